"""The engine seam on the real tiny teacher (float32, CPU): transformers-continuous equals one-prompt ``generate`` and
the static engine's artifact, its finish reasons, sampling, cache sizing, and per-engine refusals before weights load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gencache.cli.app import run as cli_run
from gencache.config.engines import ContinuousOptions
from gencache.config.names import ALL_ENGINES, ENGINE_CONTINUOUS, ENGINE_STATIC, ENGINE_VLLM
from gencache.core.errors import ConfigError, GenerationError
from gencache.data.recipes import sample_source
from gencache.generation.effective import check_engine
from gencache.generation.engines import (
    FINISH_EOS,
    FINISH_LENGTH,
    FINISH_STOP_STRING,
    EngineContext,
    create_engine,
)
from gencache.generation.engines.transformers import size_paged_cache
from gencache.run.api import generate
from support.generation_helpers import (
    continuous_entries,
    decode,
    finish_workload,
    resolve,
    scanner,
    solo,
    static_entries,
    text_prompts,
)


def _tokens(entry: Any) -> list[list[int]]:
    return [seq.tolist() for seq in entry.sequences]


def _continuous(model: Any, tokenizer: Any, generation: Any, prompts: Any, **options: Any) -> list[Any]:
    return list(continuous_entries(model, tokenizer, generation, prompts, options=ContinuousOptions(**options)))


# ---------------------------------------------------------------------------------------------------------------
# transformers-continuous equals one-prompt generate and the static engine
# ---------------------------------------------------------------------------------------------------------------
def test_continuous_equals_one_prompt_generate_with_eos_at_step_one_stop_string_and_length(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = finish_workload(tiny_teacher_dir, tiny_tokenizer, tiny_model, steps=12)
    prompts, outputs, expect, generation = workload.prompts, workload.outputs, workload.expect, workload.generation
    from transformers.generation.continuous_batching import ContinuousBatchingManager

    cancelled: list[str] = []
    cancel = ContinuousBatchingManager.cancel_request

    def counted(manager: Any, request: str) -> None:
        cancelled.append(request)
        cancel(manager, request)

    monkeypatch.setattr(ContinuousBatchingManager, "cancel_request", counted)
    entries = list(
        continuous_entries(
            tiny_model,
            tiny_tokenizer,
            generation,
            prompts,
            options=ContinuousOptions(max_concurrent_sequences=3),
        )
    )
    assert sorted(entry.key for entry in entries) == sorted(key for key, _ in prompts)
    ids_by_key = dict(prompts)
    reasons = set()
    for entry in entries:
        (tokens,) = _tokens(entry)
        assert [tokens] == solo(tiny_model, tiny_tokenizer, generation, ids_by_key[entry.key])
        assert entry.texts == (decode(tiny_tokenizer, tokens),)
        reasons.add(entry.finish_reasons[0])
        if entry.key in expect:
            step, reason = expect[entry.key]
            assert entry.finish_reasons == (reason,)
            assert tokens == outputs[entry.key][:step]
    assert reasons == {FINISH_EOS, FINISH_STOP_STRING, FINISH_LENGTH}
    assert cancelled  # the stop-string requests were cancelled, not decoded to their limit
    static = static_entries(tiny_model, tiny_tokenizer, generation, prompts, batch_size=4)
    by_key = {e.key: (_tokens(e), e.texts, e.finish_reasons) for e in static}
    assert {e.key: (_tokens(e), e.texts, e.finish_reasons) for e in entries} == by_key


def test_continuous_packs_at_most_max_concurrent_sequences_per_forward(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = text_prompts(tiny_tokenizer)
    generation = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=10)
    packed: list[int] = []
    forward = tiny_model.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        packed.append(int(kwargs["cu_seq_lens_q"].numel()) - 1)
        return forward(*args, **kwargs)

    monkeypatch.setattr(tiny_model, "forward", counted)
    options = ContinuousOptions(max_concurrent_sequences=4)
    entries = list(continuous_entries(tiny_model, tiny_tokenizer, generation, prompts, options=options))
    assert len(entries) == len(prompts) and packed and max(packed) <= 4
    assert sum(packed) >= sum(entry.num_tokens for entry in entries)  # one slot per kept token at least


def test_num_return_sequences_and_seeded_sampling_are_reproducible(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any
) -> None:
    prompts = text_prompts(tiny_tokenizer)[:5]
    generation = resolve(
        tiny_teacher_dir, tiny_tokenizer, max_new_tokens=8, do_sample=True, temperature=1.5, num_return_sequences=3
    )

    def run(seed: int) -> dict[str, Any]:
        entries = continuous_entries(
            tiny_model,
            tiny_tokenizer,
            generation,
            prompts,
            options=ContinuousOptions(max_concurrent_sequences=4),
            seed=seed,
        )
        return {e.key: (_tokens(e), e.texts, e.finish_reasons) for e in entries}

    first, again, other = run(7), run(7), run(8)
    assert first == again
    assert first != other
    for tokens, texts, reasons in first.values():
        assert len(tokens) == len(texts) == len(reasons) == 3
        assert texts == tuple(decode(tiny_tokenizer, row) for row in tokens)
    assert any(len({tuple(row) for row in tokens}) > 1 for tokens, _, _ in first.values())


def test_the_paged_cache_is_sized_from_the_workload_and_lowered_to_the_memory_budget(tiny_model: Any) -> None:
    options = ContinuousOptions(max_concurrent_sequences=16, page_size=16)
    roomy = size_paged_cache(
        [30, 100, 7], 20, 3, options, model_config=tiny_model.config, dtype_bytes=4, budget=(2**30, "test")
    )
    assert roomy.concurrency == 3  # never more than the run's sequences
    assert roomy.num_blocks == 3 * -(-(100 + 20 + 1) // 16) + 1
    assert roomy.kv_bytes + roomy.mask_bytes <= 2**30
    tight_budget = roomy.kv_bytes + roomy.mask_bytes - 1
    tight = size_paged_cache(
        [30, 100, 7], 20, 3, options, model_config=tiny_model.config, dtype_bytes=4, budget=(tight_budget, "test")
    )
    assert tight.concurrency < 3
    assert tight.kv_bytes + tight.mask_bytes <= tight_budget
    with pytest.raises(GenerationError, match="kv_cache_memory_gib"):
        size_paged_cache([30], 20, 1, options, model_config=tiny_model.config, dtype_bytes=4, budget=(1000, "test"))


def test_the_finish_scanner_applies_eos_then_stop_string_then_length(tiny_tokenizer: Any) -> None:
    ids = tiny_tokenizer("one two three four", add_special_tokens=False).input_ids
    text_after = [decode(tiny_tokenizer, ids[:n]) for n in range(1, len(ids) + 1)]
    stop = text_after[1][len(text_after[0]) :].strip()
    stop_first = scanner(tiny_tokenizer, [], [stop], 50)
    assert stop_first.scan(ids) == (2, FINISH_STOP_STRING)
    eos_first = scanner(tiny_tokenizer, [ids[1]], [stop], 9)
    assert eos_first.scan(ids) == (2, FINISH_EOS)
    short = scanner(tiny_tokenizer, [], [], 1)
    assert short.scan(ids) == (1, FINISH_LENGTH)
    assert scanner(tiny_tokenizer, [], [], 99).scan(ids) is None


# ---------------------------------------------------------------------------------------------------------------
# The rule book: what each engine refuses
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("settings", "engine", "fragment"),
    [
        (
            {"repetition_penalty": 1.3},
            ENGINE_CONTINUOUS,
            'repetition_penalty = 1.3 exactly; remove it, or use engine "transformers" or "vllm"',
        ),
        (
            {"min_new_tokens": 3},
            ENGINE_CONTINUOUS,
            'min_new_tokens = 3 exactly; remove it, or use engine "transformers",',
        ),
        ({"no_repeat_ngram_size": 2}, ENGINE_CONTINUOUS, "no_repeat_ngram_size"),
        ({"num_beams": 2}, ENGINE_CONTINUOUS, "num_beams"),
        ({"do_sample": True, "typical_p": 0.5}, ENGINE_CONTINUOUS, "typical_p"),
        ({"suppress_tokens": [5]}, ENGINE_VLLM, "suppress_tokens"),
        ({"min_new_tokens": 2}, ENGINE_VLLM, "min_new_tokens"),
    ],
)
def test_settings_an_engine_cannot_honour_are_refused_naming_the_engine_that_does(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, settings: dict[str, Any], engine: str, fragment: str
) -> None:
    generation = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=8, **settings)
    check_engine(ENGINE_STATIC, generation)  # the static engine honours everything gencache accepts
    with pytest.raises(ConfigError) as info:
        check_engine(engine, generation)
    assert f'engine "{engine}" cannot honour model.generation_kwargs.' in str(info.value)
    assert fragment in str(info.value)
    assert info.value.exit_code == 2


def test_neutral_values_are_never_refused(tiny_teacher_dir: Path, tiny_tokenizer: Any) -> None:
    generation = resolve(
        tiny_teacher_dir,
        tiny_tokenizer,
        max_new_tokens=8,
        repetition_penalty=1.0,
        min_new_tokens=0,
        num_beams=1,
        no_repeat_ngram_size=0,
        stop_strings=["x"],
    )
    for engine in ALL_ENGINES:
        check_engine(engine, generation)


def _config(tmp_path: Path, teacher: Path, engine: str, generation: dict[str, Any], **extra: Any) -> Path:
    config = {
        "model": {"model_path": str(teacher), "dtype": "float32", "device": "cpu", "generation_kwargs": generation},
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
        "output_dir": str(tmp_path / f"out-{engine}"),
        **extra,
    }
    path = tmp_path / f"config-{engine}-{len(list(tmp_path.glob('config-*')))}.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("engine", "generation", "fragment"),
    [
        (ENGINE_CONTINUOUS, {"max_new_tokens": 8, "repetition_penalty": 1.2}, "repetition_penalty"),
        (ENGINE_CONTINUOUS, {"max_new_tokens": 8, "num_beams": 2}, "num_beams"),
        (ENGINE_VLLM, {"max_new_tokens": 8}, "vllm"),
    ],
)
def test_refusals_fail_before_the_teacher_loads_with_one_line_and_exit_code_two(
    tmp_path: Path,
    tiny_teacher_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    engine: str,
    generation: dict[str, Any],
    fragment: str,
) -> None:
    import gencache.generation.teacher

    def load_teacher(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the teacher was loaded before the engine refused the run")

    monkeypatch.setattr(gencache.generation.teacher, "load_teacher", load_teacher)
    config = _config(tmp_path, tiny_teacher_dir, engine, generation)
    assert cli_run(["generate", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f'engine "{engine}"' in err and fragment in err
    assert not (tmp_path / f"out-{engine}").exists()


def test_vllm_without_vllm_installed_says_how_to_install_it(tiny_teacher_dir: Path, tiny_tokenizer: Any) -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed in this environment")
    generation = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=8)
    context = EngineContext(
        generation=generation,
        tokenizer=tiny_tokenizer,
        model_path=str(tiny_teacher_dir),
        dtype="bfloat16",
        device="cuda:0",
    )
    with pytest.raises(ConfigError) as info:
        create_engine(ENGINE_VLLM, context)
    message = str(info.value)
    assert "needs the vllm package, which is not installed" in message
    assert 'pip install "gencache[vllm]"' in message
    assert "\n" not in message


# ---------------------------------------------------------------------------------------------------------------
# End to end: the continuous engine's artifact equals the static engine's
# ---------------------------------------------------------------------------------------------------------------
def _manifest(path: Path) -> dict[str, Any]:
    return dict(json.loads((path / "manifest.json").read_text(encoding="utf-8"))["entries"])


def _resolved(path: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((path / "resolved_config.json").read_text(encoding="utf-8"))
    return result


def test_continuous_artifact_has_the_static_artifacts_content_digests(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    generation = {"max_new_tokens": 10, "stop_strings": ["."]}
    static = generate(_config(tmp_path, tiny_teacher_dir, ENGINE_STATIC, generation))
    continuous = generate(
        _config(
            tmp_path,
            tiny_teacher_dir,
            ENGINE_CONTINUOUS,
            generation,
            engine_options={"max_concurrent_sequences": 3, "page_size": 16},
        )
    )
    assert static is not None and continuous is not None
    a, b = _manifest(static), _manifest(continuous)
    assert len(a) == 6
    assert {k: v["content_digest"] for k, v in a.items()} == {k: v["content_digest"] for k, v in b.items()}
    recorded = _resolved(continuous)
    assert recorded["engine"]["name"] == ENGINE_CONTINUOUS
    assert recorded["engine"]["options"]["max_concurrent_sequences"] == 3
    assert recorded["engine"]["version"] == recorded["runtime"]["transformers"]
    assert recorded["engine"]["paged_cache"]["concurrency"] == 3
    assert recorded["config"]["engine"] == ENGINE_CONTINUOUS
    assert _resolved(static)["engine"] == {
        "name": ENGINE_STATIC,
        "options": {},
        "version": recorded["runtime"]["transformers"],
        "sampling": "greedy (no random draws)",
    }
    determinism = recorded["runtime"]["determinism"]
    assert determinism["prefix_caching"] is True and determinism["batch_invariant"] is False
    assert determinism["tensor_parallel_size"] == 1 and determinism["gpu_name"] is None
    assert determinism["attention_backend"] == recorded["runtime"]["attn_implementation"]
    assert _resolved(static)["runtime"]["determinism"]["prefix_caching"] is False


def test_the_rule_book_the_options_and_the_engine_registry_import_without_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import gencache.config, gencache.config.generation, gencache.config.engines, "
        "gencache.generation.engines; print(sorted(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_the_continuous_engine_on_an_older_transformers_is_refused_before_the_teacher_loads(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "5.19.0")  # vLLM's CPU environment has it
    context = EngineContext(
        generation=resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=8),
        tokenizer=tiny_tokenizer,
        model_path=str(tiny_teacher_dir),
        dtype="float32",
        device="cpu",
    )
    with pytest.raises(ConfigError, match=r'engine "transformers-continuous" needs transformers 5\.20 or later'):
        create_engine(ENGINE_CONTINUOUS, context)
