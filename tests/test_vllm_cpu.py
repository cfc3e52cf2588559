"""The vllm engine on a CPU with vLLM's CPU build: equality with one-prompt generate, the static engine's artifact,
seeded sampling, bfloat16, refusals before any weights load, and the prefix-cache statistics.

Run in the vLLM CPU environment: ``uv run nox -s vllm-cpu`` (these tests skip where vLLM's CPU build is absent).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gencache.cli.app import run as cli_run
from gencache.config.engines import VllmOptions
from gencache.core.errors import ConfigError
from gencache.data.recipes import sample_source
from gencache.generation.engines import FINISH_EOS, FINISH_LENGTH, FINISH_STOP_STRING, EngineContext, create_engine
from gencache.generation.engines.vllm import VllmEngine, installed_build
from support.generation_helpers import (
    build_cpu_attention_teacher,
    decode,
    finish_workload,
    manifest_digests,
    resolve,
    solo,
    static_entries,
    text_prompts,
)

pytestmark = pytest.mark.vllm
_build = installed_build()
if _build is None or not _build.cpu:
    pytest.skip("needs vLLM's CPU build (run `uv run nox -s vllm-cpu`)", allow_module_level=True)

#: Small engine settings for the tiny teacher: no torch.compile (a quick start), a few sequences at a time.
OPTIONS = {"enforce_eager": True, "max_num_seqs": 4}


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_cpu_attention_teacher(tmp_path_factory.mktemp("tiny-teacher-hd32"))


@pytest.fixture(scope="module")
def tokenizer(teacher: Path) -> Any:
    from gencache.generation.teacher import load_tokenizer

    return load_tokenizer(str(teacher))


@pytest.fixture(scope="module")
def model(teacher: Path) -> Any:
    from gencache.generation.teacher import load_teacher

    return load_teacher(str(teacher), dtype="float32", device="cpu")


def _engine(teacher: Path, tokenizer: Any, generation: Any, dtype: str = "float32", **options: Any) -> VllmEngine:
    context = EngineContext(
        generation=generation,
        tokenizer=tokenizer,
        model_path=str(teacher),
        dtype=dtype,
        device="cpu",
        seed=7,
        options=VllmOptions(**{**OPTIONS, **options}),
    )
    engine = create_engine("vllm", context)
    assert isinstance(engine, VllmEngine)
    engine.load_weights()
    return engine


@pytest.fixture()
def engines() -> Iterator[list[VllmEngine]]:
    """Engines a test built; each is shut down after the test (its in-process vLLM released)."""
    built: list[VllmEngine] = []
    yield built
    for engine in built:
        engine.close()


class _Recorder:
    """A progress display that records what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def start(self, total_samples: int) -> None:
        self.calls.append(("start", total_samples, 0))

    def advance(self, samples: int, tokens: int) -> None:
        self.calls.append(("advance", samples, tokens))

    def close(self) -> None:
        self.calls.append(("close", 0, 0))


def _tokens(entry: Any) -> list[list[int]]:
    return [seq.tolist() for seq in entry.sequences]


def test_greedy_float32_equals_one_prompt_generate_for_every_finish_reason(
    teacher: Path, tokenizer: Any, model: Any, engines: list[VllmEngine]
) -> None:
    workload = finish_workload(teacher, tokenizer, model, steps=12)
    prompts, outputs, expect, generation = workload.prompts, workload.outputs, workload.expect, workload.generation
    engine = _engine(teacher, tokenizer, generation)
    engines.append(engine)
    entries = list(engine.generate(prompts))
    assert sorted(entry.key for entry in entries) == sorted(key for key, _ in prompts)
    ids_by_key = dict(prompts)
    for entry in entries:
        (tokens,) = _tokens(entry)
        assert [tokens] == solo(model, tokenizer, generation, ids_by_key[entry.key]), entry.key
        assert entry.texts == (decode(tokenizer, tokens),)
        if entry.key in expect:
            step, reason = expect[entry.key]
            assert entry.finish_reasons == (reason,)
            assert tokens == outputs[entry.key][:step]
    assert {entry.finish_reasons[0] for entry in entries} == {FINISH_EOS, FINISH_STOP_STRING, FINISH_LENGTH}
    static = static_entries(model, tokenizer, generation, prompts, batch_size=4)
    by_key = {e.key: (_tokens(e), e.texts, e.finish_reasons) for e in static}
    assert {e.key: (_tokens(e), e.texts, e.finish_reasons) for e in entries} == by_key


def test_seeded_sampling_reproduces_and_a_prompts_samples_ignore_the_other_prompts(
    teacher: Path, tokenizer: Any, engines: list[VllmEngine]
) -> None:
    prompts = text_prompts(tokenizer)
    generation = resolve(
        teacher,
        tokenizer,
        max_new_tokens=10,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        num_return_sequences=3,
    )
    engine = _engine(teacher, tokenizer, generation)
    engines.append(engine)

    def run(selection: list[tuple[str, list[int]]]) -> dict[str, list[list[int]]]:
        return {entry.key: _tokens(entry) for entry in engine.generate(selection)}

    first = run(prompts)
    assert all(len(samples) == 3 for samples in first.values())
    assert any(len({tuple(s) for s in samples}) > 1 for samples in first.values())  # it really samples
    assert run(prompts) == first  # an identical rerun
    subset = prompts[::3]
    assert run(list(reversed(subset))) == {key: first[key] for key, _ in subset}  # other prompts, other order


def test_bfloat16_runs_on_the_cpu(teacher: Path, tokenizer: Any, engines: list[VllmEngine]) -> None:
    generation = resolve(teacher, tokenizer, max_new_tokens=6, eos_token_id=[])
    engine = _engine(teacher, tokenizer, generation, dtype="bfloat16")
    engines.append(engine)
    entries = list(engine.generate(text_prompts(tokenizer)[:4]))
    assert [entry.finish_reasons for entry in entries] == [(FINISH_LENGTH,)] * 4
    assert all(len(entry.sequences[0]) == 6 for entry in entries)
    assert engine.runtime()["dtype"] == "bfloat16"


def _config(tmp_path: Path, teacher: Path, engine: str, name: str, **extra: Any) -> Path:
    config = {
        "model": {
            "model_path": str(teacher),
            "dtype": "float32",
            "device": "cpu",
            "generation_kwargs": {"max_new_tokens": 10, "stop_strings": ["."]},
        },
        "data_configs": [
            {
                "dataset_name": "musique",
                "num_samples": 6,
                "num_data_strs": 0,
                "num_shots": 0,
                "subset": "default",
                "source": str(sample_source("musique")),
            }
        ],
        "gen_batch_size": 2,
        "engine": engine,
        "output_dir": str(tmp_path / name),
        **extra,
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def test_the_vllm_artifact_has_the_static_artifacts_content_digests_and_records_the_cpu_build(
    tmp_path: Path, teacher: Path
) -> None:
    from gencache.artifact.reader import verify
    from gencache.run.api import generate

    static = generate(_config(tmp_path, teacher, "transformers", "static"))
    served = generate(_config(tmp_path, teacher, "vllm", "vllm", engine_options=OPTIONS))
    assert static is not None and served is not None and verify(served) == []
    assert len(manifest_digests(static)) == 6
    assert manifest_digests(served) == manifest_digests(static)
    resolved = json.loads((served / "resolved_config.json").read_text(encoding="utf-8"))
    assert resolved["runtime"]["device"] == "cpu" and resolved["runtime"]["vllm_platform"] == "cpu"
    assert resolved["runtime"]["vllm_distribution"] == resolved["engine"]["distribution"] == "vllm-cpu"
    assert resolved["engine"]["version"] == resolved["runtime"]["vllm"] == _build.version  # type: ignore[union-attr]
    kv = resolved["engine"]["kv_cache"]
    assert kv["concurrency"] == 4 and kv["source"].startswith("the workload")  # sized from the run, not from RAM
    assert kv["kv_cache_bytes"] < 2**30
    prefix = resolved["batching"]["prefix_cache"]
    assert prefix["prompt_tokens"] == prefix["cached_prompt_tokens"] + prefix["computed_prompt_tokens"] > 0


def test_the_prefix_cache_serves_few_shot_prompts_at_least_90_percent_of_what_the_floor_allows(
    tmp_path: Path, teacher: Path
) -> None:
    from gencache.run.api import generate

    few_shot = _config(tmp_path, teacher, "vllm", "few-shot", engine_options=OPTIONS)
    config = json.loads(few_shot.read_text(encoding="utf-8"))
    config["data_configs"] = [
        {
            "dataset_name": "hotpot_qa",
            "num_samples": 6,
            "num_data_strs": 0,
            "num_shots": 3,
            "subset": "fullwiki",
            "split": "train",
            "source": str(sample_source("hotpot_qa")),
        }
    ]
    few_shot.write_text(json.dumps(config), encoding="utf-8")
    out = generate(few_shot)
    assert out is not None
    prefix = json.loads((out / "resolved_config.json").read_text(encoding="utf-8"))["batching"]["prefix_cache"]
    allowed = prefix["prompt_tokens"] - prefix["floor_prompt_tokens"]
    assert allowed > prefix["prompt_tokens"] / 3  # the shots are shared: the floor is well below the prompts
    assert prefix["cached_prompt_tokens"] >= 0.9 * allowed
    assert prefix["cached_prompt_tokens"] <= allowed


def test_answers_stream_with_progress_and_unrelated_prompts_are_served_nothing_from_the_cache(
    teacher: Path, tokenizer: Any, engines: list[VllmEngine]
) -> None:
    rng = random.Random(3)
    vocabulary = len(tokenizer)
    prompts = [(f"k{i}", [i + 5] + [rng.randrange(5, vocabulary) for _ in range(300)]) for i in range(6)]
    engine = _engine(teacher, tokenizer, resolve(teacher, tokenizer, max_new_tokens=3, eos_token_id=[]))
    engines.append(engine)
    progress = _Recorder()
    entries = engine.generate(prompts, progress=progress)
    next(entries)
    # Streamed: the first answer reaches the caller while vLLM still runs (or queues) the other prompts.
    assert engine.llm.llm_engine.has_unfinished_requests()
    assert len(list(entries)) == 5
    assert progress.calls == [("start", 6, 0)] + [("advance", 1, 3)] * 6
    stats = engine.batching()["prefix_cache"]
    assert stats["prompt_tokens"] == stats["floor_prompt_tokens"] == stats["computed_prompt_tokens"] == 6 * 301
    assert stats["cached_prompt_tokens"] == 0


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"engine_options": {"tensor_parallel_size": 2}}, "tensor_parallel_size must be 1"),
        ({"attn_implementation": "sdpa"}, "model.attn_implementation"),
        ({"generation_kwargs": {"max_new_tokens": 4, "min_new_tokens": 2}}, "min_new_tokens"),
        ({"head_dim": 16}, "head size 16"),
        ({"device": "cuda"}, "needs vLLM's GPU build"),
    ],
)
def test_refused_settings_stop_before_any_weights_load_with_one_line_and_exit_two(
    tmp_path: Path,
    teacher: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tiny_teacher_dir: Path,
    change: dict[str, Any],
    fragment: str,
) -> None:
    import vllm

    def no_llm(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("vLLM was asked to load the teacher before the engine refused the run")

    monkeypatch.setattr(vllm, "LLM", no_llm)
    path = _config(tmp_path, tiny_teacher_dir if "head_dim" in change else teacher, "vllm", "refused")
    config = json.loads(path.read_text(encoding="utf-8"))
    config["engine_options"] = change.get("engine_options", {})
    for field in ("attn_implementation", "generation_kwargs", "device"):
        if field in change:
            config["model"][field] = change[field]
    path.write_text(json.dumps(config), encoding="utf-8")
    if change.get("device") == "cuda":  # a GPU machine, as the first round and torch see it
        import torch

        import gencache.run.preflight

        monkeypatch.setattr(gencache.run.preflight, "glob", SimpleNamespace(glob=lambda pattern: ["/dev/nvidia0"]))
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "a GPU")
    assert cli_run(["generate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert fragment in err
    assert not (tmp_path / "refused").exists()


def test_creating_the_engine_on_a_cpu_checks_the_build_before_anything_loads(
    teacher: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gencache.generation.engines.vllm as module
    from gencache.generation.engines.vllm import VllmBuild

    monkeypatch.setattr(module, "installed_build", lambda: VllmBuild("vllm", "0.33.0", cpu=False))
    context = EngineContext(
        generation=resolve(teacher, tokenizer, max_new_tokens=4),
        tokenizer=tokenizer,
        model_path=str(teacher),
        dtype="float32",
        device="cpu",
    )
    with pytest.raises(ConfigError) as info:
        create_engine("vllm", context)
    assert "needs vLLM's CPU build (vllm-cpu)" in str(info.value) and "vllm 0.33.0" in str(info.value)
    assert "\n" not in str(info.value) and info.value.exit_code == 2
    monkeypatch.setattr(module, "installed_build", lambda: None)  # engine "vllm" without vLLM installed
    with pytest.raises(ConfigError) as missing:
        create_engine("vllm", context)
    assert "needs the vllm package, which is not installed" in str(missing.value)
    assert "envs/vllm-cpu" in str(missing.value) and "\n" not in str(missing.value)
