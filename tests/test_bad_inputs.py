"""A table of bad inputs: for every case, generate exits with the expected code and one ``error:`` line on stderr
naming the problem, nothing is written, and the dry run exits as generate does (with the same line). Configs with
several mistakes get every one listed, one line each, and the count; each message's suggested fix, applied, makes
its problem go away."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gencache.cli.app import run as cli_run
from support.config_factory import config_dict, musique, write_config

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


def _break_json(name: str) -> Callable[[Path], None]:
    def edit(directory: Path) -> None:
        path = directory / name
        path.write_text(path.read_text(encoding="utf-8").replace("{", '{\n  "x" 1,', 1), encoding="utf-8")

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
    Case(
        "duplicate key with --limit",
        lambda t, m: (_raw_config(_duplicate_seed)(t, m)[0], ["--limit", "2"]),
        2,
        "duplicate key 'seed'",
    ),
    Case(
        "--set value nested too deeply",
        _with_args("--set", "model.attn_implementation=" + "[" * 3000 + "]" * 3000),
        2,
        "nested more than 64 levels",
    ),
    Case(
        "--set object with a duplicate key",
        _with_args("--set", 'model.generation_kwargs={"a": 1, "a": 2}'),
        2,
        "duplicate key 'a'",
    ),
    Case("seed beyond numpy's range", _config(seed=2**32), 2, "seed: input should be less than or equal to 4294967295"),
    Case(
        "data config seed below zero",
        _config(data_configs=[musique(seed=-1)]),
        2,
        "seed: input should be greater than or equal to 0",
    ),
    Case(
        "attn_implementation garbage",
        _model(attn_implementation="garbage"),
        2,
        "model.attn_implementation 'garbage' is not an attention implementation",
    ),
    Case(
        "flash attention on a CPU",
        _model(attn_implementation="flash_attention_2"),
        2,
        "'flash_attention_2' needs a CUDA device",
    ),
    Case(
        "pad_token_id beyond the vocabulary",
        _model(generation_kwargs={"max_new_tokens": 6, "pad_token_id": 10**6}),
        2,
        "pad_token_id",
    ),
    Case(
        "forced_eos_token_id beyond the vocabulary",
        _model(generation_kwargs={"max_new_tokens": 6, "forced_eos_token_id": 10**6}),
        2,
        "forced_eos_token_id",
    ),
    Case(
        "suppress_tokens beyond the vocabulary",
        _model(generation_kwargs={"max_new_tokens": 6, "suppress_tokens": [3, 10**6]}),
        2,
        "suppress_tokens",
    ),
    Case("more shards than keys", _with_args("--shards", "16"), 2, "--shards 16 for 4 keys leaves some empty"),
    Case(
        "paged cache too small for one request",
        _config(engine="transformers-continuous", engine_options={"kv_cache_memory_gib": 1e-6}),
        2,
        "of paged KV cache, more than engine_options.kv_cache_memory_gib",
    ),
    Case("output_dir component over 255 bytes", _config(output_dir="/tmp/" + "x" * 300), 2, "255"),
    Case("output_dir path over 4096 bytes", _config(output_dir="/tmp/" + "/".join(["d" * 100] * 42)), 2, "4096"),
    Case("output_dir the root directory", _config(output_dir="/"), 2, "output_dir: '/' has no name of its own"),
    Case("output_dir ending in ..", _config(output_dir="runs/.."), 2, "output_dir: 'runs/..' has no name of its own"),
    Case("--output-dir ending in .", _with_args("--output-dir", "runs/."), 2, "--output-dir runs/.: output_dir:"),
    Case("teacher weights missing", _teacher_copy(_remove_weights), 2, "has no weights"),
    Case("teacher weights truncated", _teacher_copy(_truncate_weights), 2, "model.safetensors is truncated"),
    Case(
        "teacher generation_config max_new_tokens 0",
        lambda t, m: _teacher_max_new_tokens_zero(t, m),
        2,
        "max_new_tokens",
    ),
    *(
        Case(
            f"teacher {name} not JSON",
            _teacher_copy(_break_json(name)),
            2,
            f"teacher/{name} is not valid JSON (Expecting ':' delimiter: line 2 column 7",
        )
        for name in ("generation_config.json", "config.json", "tokenizer_config.json", "tokenizer.json")
    ),
    Case(
        "tokenizer beyond the teacher's embedding",
        _teacher_copy(_edit_json("config.json", vocab_size=300)),
        2,
        "but the teacher's embedding has 300 rows",
    ),
    Case(
        "tokenizer of another model",
        _teacher_copy(_edit_json("config.json", vocab_size=40_000)),
        2,
        "but the teacher's embedding has 40,000 rows",
    ),
    Case(
        "attn_implementation flash_attention_4 on a CPU",
        _model(attn_implementation="flash_attention_4"),
        2,
        "'flash_attention_4' needs a CUDA device",
    ),
]


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


def test_a_teacher_setting_the_run_overrides_passes_the_dry_run_and_generate_alike(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The teacher's generation_config.json says max_new_tokens 0 (transformers refuses that when it reads the
    file), the run's config says 6: the effective value is valid, and the load takes it, so both succeed."""
    copy = tmp_path / "teacher"
    shutil.copytree(tiny_teacher_dir, copy)
    _edit_json("generation_config.json", max_new_tokens=0)(copy)
    config = write_config(tmp_path, copy)
    assert cli_run(["generate", str(config), "--dry-run"]) == 0
    assert cli_run(["generate", str(config)]) == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "manifest.json").is_file()


def test_what_real_teachers_ship_is_accepted() -> None:
    from gencache.generation.teacher import check_attn_implementation, check_vocabulary

    class Tokenizer:
        def __len__(self) -> int:
            return 262_145  # Gemma 3: one special token beyond its 262,144 embedding rows

    assert "262,144 rows" in check_vocabulary(Tokenizer(), 262_144, {"eos_token_id": [1, 106]})
    assert check_attn_implementation("flash_attention_4", "cuda:0") == "flash_attention_4"
    assert "resolved by transformers" in check_attn_implementation("kernels-community/flash-attn2", "cpu")


def test_a_stale_index_beside_model_safetensors_is_not_read(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    from gencache.generation.teacher import check_teacher_weights

    copy = tmp_path / "teacher"
    shutil.copytree(tiny_teacher_dir, copy)
    (copy / "pytorch_model.bin.index.json").write_text('{"weight_map": {"a": "pytorch_model-00001.bin"}}')
    assert "1 weight file(s)" in check_teacher_weights(str(copy))  # model.safetensors loads first, as in transformers


# -- every problem in one pass ---------------------------------------------------------------------------------
ROWS = [{"q": f"Question {n}?", "a": f"answer {n}", "lvl": "easy" if n % 2 else "hard"} for n in range(6)]


def table(tmp: Path, **change: Any) -> dict[str, Any]:
    """A ``table`` data config over ``tmp / "rows.jsonl"`` (six rows), written when missing."""
    rows = tmp / "rows.jsonl"
    if not rows.exists():
        rows.write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    return {
        "dataset_name": "table",
        "num_samples": 2,
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "default",
        "source": str(rows),
        "data_kwargs": {"query": "q", "answer": "a"},
    } | change


def several(tmp: Path, teacher: Path) -> tuple[dict[str, Any], list[str]]:
    """A config with one mistake in each of four data configs."""
    config = config_dict(
        tmp,
        teacher,
        data_configs=[
            table(tmp, data_kwargs={"query": "qq", "answer": "a"}),
            table(tmp, num_samples=9),
            table(tmp, source=str(tmp / "rows.jsnol")),
            table(tmp, data_kwargs={"query": "q", "filters": {"level": "x"}}),
        ],
    )
    return config, [
        "data_configs[0]: table: column 'qq' is missing",
        "data_configs[1]: table split 'train' holds 6 usable",
        "data_configs[2]: source path",
        "data_configs[3]: table: column 'level' is missing",
    ]


def invalid_and_data(tmp: Path, teacher: Path) -> tuple[dict[str, Any], list[str]]:
    """An invalid config (two bad fields) whose valid data config and output are still checked."""
    (tmp / "out").mkdir()
    config = config_dict(
        tmp,
        teacher,
        engine="transformer",
        data_configs=[
            table(tmp, data_kwargs={"query": "qq"}),
            table(tmp, num_samples=-1),
            table(tmp, template="tokenizer_chatt"),
        ],
    )
    return config, [
        "engine: input should be 'transformers', 'transformers-continuous' or 'vllm' (got \"transformer\"); "
        "did you mean 'transformers'?",
        "data_configs[1].num_samples: input should be greater than or equal to 0 (got -1)",
        "data_configs[2].template: unknown",
        "Output path",
        "data_configs[0]: table: column 'qq' is missing",
    ]


def config_fields(tmp: Path, teacher: Path) -> tuple[dict[str, Any], list[str]]:
    """Several bad fields of one config: each its own line."""
    config = config_dict(tmp, teacher, gen_batch_size=0, seed=-3, data_configs=[table(tmp, dataset_name="tabel")])
    config["model"]["generation_kwargs"] = {"max_new_tokens": 4, "temperature": -1}
    return config, [
        "gen_batch_size: input should be greater than or equal to 1",
        "seed: input should be greater than or equal to 0",
        "dataset_name: unknown dataset 'tabel'",
        "generation_kwargs.temperature",
    ]


MULTI = {
    "four data configs": several,
    "an invalid config and its data": invalid_and_data,
    "config fields": config_fields,
}


@pytest.mark.parametrize("name", MULTI)
def test_every_problem_is_listed_once_and_nothing_is_written(
    name: str, tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, expected = MULTI[name](tmp_path, tiny_teacher_dir)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    before = sorted(os.listdir(tmp_path))
    assert cli_run(["generate", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert (
        len(errors) == len(expected) and lines[-1] == f"{len(expected)} problems found; nothing was loaded or written."
    )
    for says in expected:
        assert sum(says in line for line in errors) == 1, (says, errors)
    assert sorted(os.listdir(tmp_path)) == before
    assert cli_run(["generate", str(path), "--dry-run", "--json"]) == 2
    captured = capsys.readouterr()
    problems = json.loads(captured.out)["problems"]
    assert [f"error: {p['message']}" for p in problems] == errors
    assert all(p["check"] and p["location"] for p in problems)
    assert sorted(os.listdir(tmp_path)) == before


def dry_run_alone(config: dict[str, Any], path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``generate --dry-run`` of ``config`` (written to ``path``) in a fresh process, whose stdout ends with the exit
    code and the model libraries it imported."""
    path.write_text(json.dumps(config), encoding="utf-8")
    code = (
        "import sys\nfrom gencache.cli.app import run\n"
        f"code = run(['generate', {str(path)!r}, '--dry-run', *{list(args)!r}])\n"
        "print(code, sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)


def test_the_input_checks_import_no_model_library(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    config, expected = several(tmp_path, tiny_teacher_dir)
    result = dry_run_alone(config, tmp_path / "config.json")
    assert result.stdout.strip().splitlines()[-1] == "2 []", result.stderr
    assert sum(line.startswith("error: ") for line in result.stderr.splitlines()) == len(expected)
    assert result.stderr.splitlines()[-1] == f"the dry run found {len(expected)} problems; generate would exit 2"


def _has_gpu_driver() -> bool:
    from gencache.core.errors import ConfigError
    from gencache.run.preflight import _device

    try:
        _device("cuda", None, {})
    except ConfigError:
        return False
    return True


@pytest.mark.skipif(
    _has_gpu_driver() or importlib.util.find_spec("vllm") is not None,
    reason="needs a machine without a GPU driver and an environment without vLLM",
)
def test_the_device_the_engine_package_and_show_prompt_are_found_in_the_first_round(
    tmp_path: Path, tiny_teacher_dir: Path
) -> None:
    """A CUDA device on a machine without a GPU driver (the default device), engine vllm without vLLM and
    --show-prompt beyond the samples are reported with the first round's other problems, before torch,
    transformers or datasets are imported."""
    config = config_dict(tmp_path, tiny_teacher_dir, engine="vllm", output_dir=str(tmp_path))
    del config["model"]["device"]
    result = dry_run_alone(config, tmp_path / "config.json", "--show-prompt", "99")
    assert result.stdout.strip().splitlines()[-1] == "2 []", result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    expected = [
        "already exists",
        "--show-prompt 99 is out of range: the run has 4 samples (0..3).",
        "model.device 'cuda:0' (the default): this machine has no GPU driver",
        'set model.device to "cpu"',
        'engine "vllm" needs the vllm package',
    ]
    assert len(errors) == 4 and all(any(says in line for line in errors) for says in expected), errors


# -- hints that are right: each suggested fix makes its problem go away -------------------------------------------
def _path(location: str) -> list[str | int]:
    """``data_configs[1].data_kwargs.query`` as ``["data_configs", 1, "data_kwargs", "query"]``."""
    return [int(part) if part.isdigit() else part for part in re.findall(r"[^.\[\]]+", location)]


def apply_hint(config: dict[str, Any], problem: dict[str, str]) -> None:
    """Do what ``problem``'s message suggests, at its location; fail when the message suggests nothing doable."""
    message, *parents, last = problem["message"], *_path(problem["location"])
    node: Any = config
    for part in parents:
        node = node[part]
    suggested = re.search(r"did you mean '([^']+)'", message)
    if re.search(r"unknown field|change the key", message) and suggested:  # a misspelt key: rename it
        node[suggested.group(1)] = node.pop(last)
    elif (found := re.search(r"change '([^']+)' in", message)) and suggested:  # one name of a list
        node[last] = [suggested.group(1) if item == found.group(1) else item for item in node[last]]
    elif suggested:
        node[last] = suggested.group(1)
    elif "or to null when" in message:
        node[last] = None
    elif found := re.search(r"at most (\d+)", message):
        node[last] = int(found.group(1))
    elif found := re.search(r" (\S+) is free\.$", message):
        node[last] = found.group(1)
    elif found := re.search(r"greater than or equal to (\d+)", message):
        node[last] = int(found.group(1))
    else:
        raise AssertionError(f"no fix to apply in: {message}")


def kwargs(**change: Any) -> Callable[[Path], dict[str, Any]]:
    """A config change: the table data config with ``data_kwargs`` ``{"query": "q", "answer": "a"} | change``."""
    return lambda tmp: {"data_configs": [table(tmp, data_kwargs={"query": "q", "answer": "a"} | change)]}


HINTED: dict[str, Callable[[Path], dict[str, Any]]] = {  # each a change of a valid config
    "a column typo": kwargs(query="qq"),
    "an answer column typo": kwargs(answer="A"),
    "an answer column by default": lambda tmp: {"data_configs": [table(tmp, data_kwargs={"query": "q"})]},
    "a filter column typo": kwargs(filters={"lv": "easy"}),
    "a task column typo": kwargs(task=["lvl", "A"]),
    "a data_kwargs key": kwargs(answr="a"),
    "a missing file": lambda tmp: {"data_configs": [table(tmp, source=str(tmp / "rows.json"))]},
    "too many samples": lambda tmp: {"data_configs": [table(tmp, num_samples=50)]},
    "a dataset name": lambda tmp: {"data_configs": [table(tmp, dataset_name="tables")]},
    "a template name": lambda tmp: {"data_configs": [table(tmp, template="defualt")]},
    "an engine name": lambda tmp: {"engine": "transformers-continous"},
    "an existing output": lambda tmp: (tmp / "out").mkdir() or {},  # type: ignore[func-returns-value]
    "a negative count": lambda tmp: {"data_configs": [table(tmp), table(tmp, num_samples=-2)]},
}


@pytest.mark.parametrize("name", HINTED)
def test_each_suggested_fix_makes_its_problem_go_away(
    name: str, tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = config_dict(tmp_path, tiny_teacher_dir, data_configs=[table(tmp_path)]) | HINTED[name](tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    assert cli_run(["generate", str(path), "--dry-run", "--json"]) == 2
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert problems
    for problem in problems:
        apply_hint(config, problem)
    path.write_text(json.dumps(config), encoding="utf-8")
    code = cli_run(["generate", str(path), "--dry-run", "--json"])
    assert json.loads(capsys.readouterr().out)["problems"] == [] and code == 0


def test_a_table_without_source_is_not_told_to_omit_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = config_dict(tmp_path, tmp_path / "teacher", data_configs=[table(tmp_path, source=str(tmp_path / "x.csv"))])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    assert cli_run(["generate", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "x.csv' does not exist; fix the path." in err and "omit source" not in err
    config["data_configs"][0]["source"] = None
    path.write_text(json.dumps(config), encoding="utf-8")
    assert cli_run(["generate", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "table reads your own table: set source to" in err and "omit source" not in err
