"""A table of bad inputs: for every case, generate exits with the expected code and one ``error:`` line on stderr
naming the problem, nothing is written, and the dry run exits as generate does (with the same line)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from config_factory import config_dict, musique, write_config
from gencache.cli import run as cli_run

Setup = Callable[[Path, Path], tuple[Path, list[str]]]


@dataclass(frozen=True)
class Case:
    name: str
    setup: Setup
    code: int
    says: str


def _config(**change: Any) -> Setup:
    return lambda tmp, teacher: (write_config(tmp, teacher, **change), [])


def _raw_config(text: Callable[[Path, Path], str]) -> Setup:
    def setup(tmp: Path, teacher: Path) -> tuple[Path, list[str]]:
        path = tmp / "config.json"
        path.write_text(text(tmp, teacher), encoding="utf-8")
        return path, []

    return setup


def _with_args(*args: str, **change: Any) -> Setup:
    return lambda tmp, teacher: (write_config(tmp, teacher, **change), list(args))


def _fifo(tmp: Path, teacher: Path) -> tuple[Path, list[str]]:
    path = tmp / "config.json"
    os.mkfifo(path)
    return path, []


def _deep(tmp: Path, teacher: Path) -> str:
    config = config_dict(tmp, teacher)
    text = json.dumps(config)
    return text[:-1] + ', "deep": ' + "[" * 5000 + "]" * 5000 + "}"


def _duplicate_seed(tmp: Path, teacher: Path) -> str:
    return json.dumps(config_dict(tmp, teacher))[:-1] + ', "seed": 1, "seed": 2}'


def _teacher_copy(edit: Callable[[Path], None]) -> Setup:
    def setup(tmp: Path, teacher: Path) -> tuple[Path, list[str]]:
        copy = tmp / "teacher"
        shutil.copytree(teacher, copy)
        edit(copy)
        return write_config(tmp, copy), []

    return setup


def _edit_json(name: str, **change: Any) -> Callable[[Path], None]:
    def edit(directory: Path) -> None:
        data = json.loads((directory / name).read_text(encoding="utf-8"))
        data.update(change)
        (directory / name).write_text(json.dumps(data), encoding="utf-8")

    return edit


def _truncate_weights(directory: Path) -> None:
    weights = directory / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)


def _remove_weights(directory: Path) -> None:
    (directory / "model.safetensors").unlink()


def _model(**change: Any) -> Setup:
    def setup(tmp: Path, teacher: Path) -> tuple[Path, list[str]]:
        config = config_dict(tmp, teacher)
        config["model"] |= change
        return write_config(tmp, teacher, model=config["model"]), []

    return setup


CASES = [
    Case("config is a FIFO", _fifo, 2, "is not a regular file"),
    Case("config nested too deeply", _raw_config(_deep), 2, "nested more than 64 levels"),
    Case("duplicate key with --limit", lambda t, m: (_raw_config(_duplicate_seed)(t, m)[0], ["--limit", "2"]), 2,
         "duplicate key 'seed'"),
    Case("--set value nested too deeply", _with_args("--set", "model.attn_implementation=" + "[" * 3000 + "]" * 3000),
         2, "nested more than 64 levels"),
    Case("--set object with a duplicate key", _with_args("--set", 'model.generation_kwargs={"a": 1, "a": 2}'), 2,
         "duplicate key 'a'"),
    Case("seed beyond numpy's range", _config(seed=2**32), 2, "seed: must be <= 4294967295"),
    Case("data config seed below zero", _config(data_configs=[musique(seed=-1)]), 2, "seed: must be >= 0"),
    Case("attn_implementation garbage", _model(attn_implementation="garbage"), 2,
         "model.attn_implementation 'garbage' is not an attention implementation"),
    Case("flash attention on a CPU", _model(attn_implementation="flash_attention_2"), 2,
         "'flash_attention_2' needs a CUDA device"),
    Case("pad_token_id beyond the vocabulary", _model(generation_kwargs={"max_new_tokens": 6, "pad_token_id": 10**6}),
         2, "pad_token_id"),
    Case("forced_eos_token_id beyond the vocabulary",
         _model(generation_kwargs={"max_new_tokens": 6, "forced_eos_token_id": 10**6}), 2, "forced_eos_token_id"),
    Case("suppress_tokens beyond the vocabulary",
         _model(generation_kwargs={"max_new_tokens": 6, "suppress_tokens": [3, 10**6]}), 2, "suppress_tokens"),
    Case("more shards than keys", _with_args("--shards", "16"), 2, "--shards asks for 16 shards but the run has 4"),
    Case("paged cache too small for one request",
         _config(engine="transformers-continuous", engine_options={"kv_cache_memory_gib": 1e-6}), 2,
         "of paged KV cache, more than engine_options.kv_cache_memory_gib"),
    Case("output_dir component over 255 bytes", _config(output_dir="/tmp/" + "x" * 300), 2, "255"),
    Case("output_dir path over 4096 bytes", _config(output_dir="/tmp/" + "/".join(["d" * 100] * 42)), 2, "4096"),
    Case("teacher weights missing", _teacher_copy(_remove_weights), 2, "has no weights"),
    Case("teacher weights truncated", _teacher_copy(_truncate_weights), 2, "model.safetensors is truncated"),
    Case("teacher generation_config max_new_tokens 0", lambda t, m: _teacher_max_new_tokens_zero(t, m), 2,
         "max_new_tokens"),
    Case("tokenizer beyond the teacher's embedding", _teacher_copy(_edit_json("config.json", vocab_size=300)), 2,
         "but the teacher's embedding has 300 rows"),
    Case("tokenizer of another model", _teacher_copy(_edit_json("config.json", vocab_size=40_000)), 2,
         "under 90% of the teacher's 40,000-row vocabulary"),
    Case("attn_implementation flash_attention_4 on a CPU", _model(attn_implementation="flash_attention_4"), 2,
         "'flash_attention_4' needs a CUDA device"),
]  # fmt: skip


def _teacher_max_new_tokens_zero(tmp: Path, teacher: Path) -> tuple[Path, list[str]]:
    copy = tmp / "teacher"
    shutil.copytree(teacher, copy)
    _edit_json("generation_config.json", max_new_tokens=0)(copy)
    config = config_dict(tmp, copy)
    config["model"]["generation_kwargs"] = {}  # the teacher's own value applies
    path = tmp / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path, []


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_input_is_one_line_and_the_dry_run_agrees(
    case: Case, tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, args = case.setup(tmp_path, tiny_teacher_dir)
    before = sorted(os.listdir(tmp_path))
    assert cli_run(["generate", str(config), *args]) == case.code
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and case.says in lines[0], err
    assert sorted(os.listdir(tmp_path)) == before  # nothing written
    assert cli_run(["generate", str(config), "--dry-run", *args]) == case.code
    dry = capsys.readouterr().err
    assert any(line.startswith("error: ") and case.says in line for line in dry.splitlines()), dry


def test_what_real_teachers_ship_is_accepted() -> None:
    from gencache.generation.teacher_files import check_attn_implementation, check_vocabulary

    class Tokenizer:
        def __len__(self) -> int:
            return 262_145  # Gemma 3: one special token beyond its 262,144 embedding rows

    assert "262,144 rows" in check_vocabulary(Tokenizer(), 262_144, {"eos_token_id": [1, 106]})
    assert check_attn_implementation("flash_attention_4", "cuda:0") == "flash_attention_4"
    assert "resolved by transformers" in check_attn_implementation("kernels-community/flash-attn2", "cpu")


def test_a_stale_index_beside_model_safetensors_is_not_read(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    from gencache.generation.teacher_files import check_teacher_weights

    copy = tmp_path / "teacher"
    shutil.copytree(tiny_teacher_dir, copy)
    (copy / "pytorch_model.bin.index.json").write_text('{"weight_map": {"a": "pytorch_model-00001.bin"}}')
    assert "1 weight file(s)" in check_teacher_weights(str(copy))  # model.safetensors loads first, as in transformers
