"""The generator service on the real tiny teacher (float32, CPU): batching, answer cuts, finish reasons, configs."""

from __future__ import annotations

import io
import json
import logging
import shutil
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gencache.config.generation import effective_problems
from gencache.core.errors import ConfigError, GenerationError
from gencache.generation.effective import EffectiveGeneration
from gencache.generation.engines import FINISH_EOS, FINISH_LENGTH, FINISH_STOP_STRING, EngineContext, GeneratedEntry
from gencache.generation.engines.transformers import TransformersEngine, plan_batches
from gencache.generation.teacher import load_teacher, load_tokenizer, runtime_info
from gencache.generation.tiny import ENDOFTEXT, IM_END, TINY_MAX_NEW_TOKENS
from support.generation_helpers import (
    PROMPT_TEXTS,
    choose_finish_case,
    decode,
    key_of,
    resolve,
    solo,
    static_entries,
    text_prompts,
)


def _run(model: Any, tokenizer: Any, generation: EffectiveGeneration, prompts: Any, batch_size: int) -> list[Any]:
    return list(static_entries(model, tokenizer, generation, prompts, batch_size=batch_size))


def _tokens(entry: GeneratedEntry) -> list[list[int]]:
    return [seq.tolist() for seq in entry.sequences]


@contextmanager
def _no_warnings() -> Iterator[list[logging.LogRecord]]:
    """Python warnings become errors and transformers' warning log records are collected (its once-only cache is
    cleared first, so an earlier test cannot hide a warning)."""
    warning_once: Any = logging.Logger.warning_once  # type: ignore[attr-defined]
    warning_once.cache_clear()
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect(level=logging.WARNING)
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield records
    finally:
        logger.removeHandler(handler)


# ---------------------------------------------------------------------------------------------------------------
# Batched generation equals generating each prompt alone
# ---------------------------------------------------------------------------------------------------------------
def test_stored_tokens_equal_plain_generate_of_each_prompt_alone(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any
) -> None:
    generation = resolve(tiny_teacher_dir, tiny_tokenizer)
    prompts = text_prompts(tiny_tokenizer)
    entries = _run(tiny_model, tiny_tokenizer, generation, prompts, batch_size=4)
    assert [entry.key for entry in entries] == [
        prompts[i][0] for batch in plan_batches([len(ids) for _, ids in prompts], 4) for i in batch
    ]
    ids_by_key = dict(prompts)
    for entry in entries:
        alone = solo(tiny_model, tiny_tokenizer, generation, ids_by_key[entry.key])
        assert _tokens(entry) == alone
        (sequence,) = entry.sequences
        assert entry.texts == (tiny_tokenizer.decode(sequence.tolist(), skip_special_tokens=False),)
        last = sequence[-1].item()
        expected = FINISH_EOS if last in generation.eos_token_ids else FINISH_LENGTH
        assert entry.finish_reasons == (expected,)
        if expected == FINISH_LENGTH:
            assert sequence.numel() == TINY_MAX_NEW_TOKENS


def test_batch_sizes_one_and_four_give_identical_entries(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any
) -> None:
    generation = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=10)
    prompts = text_prompts(tiny_tokenizer)

    def bykey_of(batch_size: int) -> dict[str, tuple[Any, ...]]:
        entries = _run(tiny_model, tiny_tokenizer, generation, prompts, batch_size)
        return {e.key: (_tokens(e), e.texts, e.finish_reasons) for e in entries}

    one, four = bykey_of(1), bykey_of(4)
    assert one == four
    assert len(one) == len(prompts)


def test_entries_are_one_dimensional_int64_cpu_tensors_with_their_own_storage(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any
) -> None:
    import torch

    generation = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=6)
    for entry in _run(tiny_model, tiny_tokenizer, generation, text_prompts(tiny_tokenizer)[:5], batch_size=5):
        for sequence in entry.sequences:
            assert sequence.dtype == torch.int64
            assert sequence.dim() == 1
            assert sequence.device.type == "cpu"
            assert sequence.is_contiguous()
            # Not a view into the batch output: the entry holds only its own bytes.
            assert sequence.untyped_storage().nbytes() == sequence.numel() * 8


# ---------------------------------------------------------------------------------------------------------------
# Finish reasons: eos (one on the first token), stop_string and length, at different steps, in one batch
# ---------------------------------------------------------------------------------------------------------------
def test_one_batch_finishes_by_eos_stop_string_and_length_at_different_steps(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any
) -> None:
    steps = 12
    prompts = text_prompts(tiny_tokenizer)
    # The model's own greedy outputs, one prompt at a time, with no EOS ids and no stop strings.
    free = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=steps, eos_token_id=[])
    assert free.eos_token_ids == ()
    outputs = {key: solo(tiny_model, tiny_tokenizer, free, ids)[0] for key, ids in prompts}
    assert all(len(tokens) == steps for tokens in outputs.values())
    case = choose_finish_case(tiny_tokenizer, outputs, steps)
    expect: dict[str, tuple[int, str]] = case["expect"]
    # Not vacuous: all three reasons, at four different steps, one EOS on the very first token.
    assert {reason for _, reason in expect.values()} == {FINISH_EOS, FINISH_STOP_STRING, FINISH_LENGTH}
    assert len({step for step, _ in expect.values()}) == 4
    assert (1, FINISH_EOS) in expect.values()

    generation = resolve(
        tiny_teacher_dir, tiny_tokenizer, max_new_tokens=steps, eos_token_id=case["eos"], stop_strings=[case["stop"]]
    )
    chosen = [(key, ids) for key, ids in prompts if key in expect]
    assert len({len(ids) for _, ids in chosen}) > 1  # the batch really is padded
    entries = _run(tiny_model, tiny_tokenizer, generation, chosen, batch_size=len(chosen))
    assert len(entries) == 4
    for entry in entries:
        step, reason = expect[entry.key]
        assert entry.finish_reasons == (reason,)
        assert _tokens(entry) == [outputs[entry.key][:step]]
        assert entry.texts == (decode(tiny_tokenizer, outputs[entry.key][:step]),)
        if reason == FINISH_STOP_STRING:
            assert entry.texts[0].endswith(case["stop"])
        # transformers' own EOS and stop-string criteria, one prompt alone, stop at the same token.
        assert _tokens(entry) == solo(tiny_model, tiny_tokenizer, generation, dict(chosen)[entry.key])


def test_pad_fill_never_enters_an_answer(tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any) -> None:
    """Rows that finish early are followed by pad fill in the batch output; the cut is by recorded step."""
    pad = tiny_tokenizer.pad_token_id
    prompts = text_prompts(tiny_tokenizer)
    free = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=8, eos_token_id=[])
    first_tokens = {key: solo(tiny_model, tiny_tokenizer, free, ids)[0][0] for key, ids in prompts[:4]}
    eos = next(iter(first_tokens.values()))
    generation = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=8, eos_token_id=[eos])
    entries = _run(tiny_model, tiny_tokenizer, generation, prompts[:4], batch_size=4)
    finished_at_once = [e for e in entries if e.finish_reasons == (FINISH_EOS,) and e.sequences[0].numel() == 1]
    assert finished_at_once
    for entry in entries:
        tokens = entry.sequences[0].tolist()
        if entry.finish_reasons == (FINISH_EOS,):
            assert tokens[-1] == eos and eos not in tokens[:-1]
        else:
            assert len(tokens) == 8
        assert pad not in tokens or first_tokens[entry.key] == pad


# ---------------------------------------------------------------------------------------------------------------
# Padding: explicit attention mask, prompts containing the pad id
# ---------------------------------------------------------------------------------------------------------------
def test_prompts_containing_the_pad_id_are_padded_correctly(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any
) -> None:
    pad = tiny_tokenizer.pad_token_id
    assert pad == tiny_tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    body = list(tiny_tokenizer("The river flows north", add_special_tokens=False).input_ids)
    prompts = [
        (key_of("pad-first"), [pad, *body]),
        (key_of("pad-middle"), [*body[:2], pad, pad, *body[2:]]),
        (key_of("pad-last"), [*body, pad]),
        (key_of("pad-only"), [pad]),
        (key_of("long"), list(tiny_tokenizer(PROMPT_TEXTS[9], add_special_tokens=False).input_ids)),
    ]
    generation = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=8)
    entries = _run(tiny_model, tiny_tokenizer, generation, prompts, batch_size=len(prompts))
    ids_by_key = dict(prompts)
    for entry in entries:
        assert _tokens(entry) == solo(tiny_model, tiny_tokenizer, generation, ids_by_key[entry.key])
    # The pad id inside a prompt is content: dropping it changes the answer, so it was really attended to.
    with_pad = {e.key: _tokens(e) for e in entries}[key_of("pad-middle")]
    without_pad = solo(tiny_model, tiny_tokenizer, generation, body)
    assert with_pad != without_pad


# ---------------------------------------------------------------------------------------------------------------
# Several sequences per prompt
# ---------------------------------------------------------------------------------------------------------------
def test_num_return_sequences_with_sampling_stores_all_sequences_under_onekey_of(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any
) -> None:
    generation = resolve(tiny_teacher_dir, tiny_tokenizer, do_sample=True, num_return_sequences=3, max_new_tokens=6)
    assert generation.do_sample and generation.kwargs["temperature"] == 0.6  # the teacher's sampling parameters
    prompts = text_prompts(tiny_tokenizer)[:5]

    def run(global_seed: int) -> list[GeneratedEntry]:
        import torch

        torch.manual_seed(global_seed)  # the draws come from the sequences' own streams, not torch's generator
        return _run(tiny_model, tiny_tokenizer, generation, prompts, batch_size=2)

    entries = run(7)
    assert sorted(e.key for e in entries) == sorted(key for key, _ in prompts)
    for entry in entries:
        assert len(entry.sequences) == len(entry.texts) == len(entry.finish_reasons) == 3
        for sequence, text, reason in zip(entry.sequences, entry.texts, entry.finish_reasons, strict=True):
            assert text == decode(tiny_tokenizer, sequence.tolist())
            assert reason in (FINISH_EOS, FINISH_LENGTH)
            assert (reason == FINISH_LENGTH) == (sequence.numel() == 6 and sequence[-1].item() not in (2, 0))
    assert len({tuple(map(tuple, _tokens(e))) for e in entries}) == len(entries)
    again = run(8)
    assert [_tokens(e) for e in again] == [_tokens(e) for e in entries]


def test_beam_search_cuts_each_returned_sequence_at_its_first_eos(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any
) -> None:
    generation = resolve(tiny_teacher_dir, tiny_tokenizer, num_beams=3, num_return_sequences=2, max_new_tokens=6)
    prompts = text_prompts(tiny_tokenizer)[:6]
    entries = _run(tiny_model, tiny_tokenizer, generation, prompts, batch_size=3)
    ids_by_key = dict(prompts)
    eos = set(generation.eos_token_ids)
    for entry in entries:
        assert len(entry.sequences) == 2
        alone = solo(tiny_model, tiny_tokenizer, generation, ids_by_key[entry.key])
        for sequence, reason, row in zip(entry.sequences, entry.finish_reasons, alone, strict=True):
            tokens = sequence.tolist()
            assert row[: len(tokens)] == tokens
            if reason == FINISH_EOS:
                assert tokens[-1] in eos and not eos & set(tokens[:-1])
            else:
                assert len(tokens) == 6 and not eos & set(tokens)


# ---------------------------------------------------------------------------------------------------------------
# Progress, policy, runtime facts, errors
# ---------------------------------------------------------------------------------------------------------------
class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []

    def start(self, total_samples: int) -> None:
        self.events.append(("start", total_samples, 0))

    def advance(self, samples: int, tokens: int) -> None:
        self.events.append(("advance", samples, tokens))

    def close(self) -> None:
        self.events.append(("close", 0, 0))


def test_progress_is_started_and_advanced_per_entry(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any
) -> None:
    generation = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=5)
    prompts = text_prompts(tiny_tokenizer)[:5]
    progress = _Recorder()
    engine = TransformersEngine(
        EngineContext(generation, tiny_tokenizer, str(tiny_teacher_dir), "float32", "cpu", batch_size=2)
    )
    engine.model = tiny_model
    entries = list(engine.generate(prompts, progress=progress))
    assert progress.events[0] == ("start", 5, 0)
    advances = [event for event in progress.events if event[0] == "advance"]
    assert [(s, t) for _, s, t in advances] == [(1, e.num_tokens) for e in entries]
    assert ("close", 0, 0) not in progress.events  # the owner closes it


def test_plan_batches_is_longest_first_stable_and_chunked() -> None:
    assert plan_batches([3, 5, 5, 1, 4], 2) == [[1, 2], [4, 0], [3]]
    assert plan_batches([2, 2, 2], 5) == [[0, 1, 2]]
    assert plan_batches([], 3) == []


def test_runtime_info_records_dtype_attention_device_and_versions(tiny_model: Any) -> None:
    info = runtime_info(tiny_model)
    assert info["dtype"] == "float32"
    assert info["attn_implementation"]
    assert info["device"] == "cpu" and info["device_name"]
    assert {"torch", "transformers", "cuda", "python", "gencache"} <= set(info)
    json.dumps(info)


def test_loading_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"model\.tokenizer_path"):
        load_tokenizer(str(tmp_path / "missing"))
    with pytest.raises(GenerationError, match="Cannot load the teacher"):
        load_teacher(str(tmp_path / "missing"), dtype="float32", device="cpu")


# ---------------------------------------------------------------------------------------------------------------
# Effective generation config
# ---------------------------------------------------------------------------------------------------------------
def _teacher_without_weights(source: Path, target: Path, generation_config: dict[str, Any] | None) -> Path:
    """A model directory with the tiny teacher's config.json and the given generation config (None: no file)."""
    target.mkdir()
    shutil.copy(source / "config.json", target / "config.json")
    if generation_config is not None:
        (target / "generation_config.json").write_text(json.dumps(generation_config), encoding="utf-8")
    return target


def test_user_kwargs_beat_the_teacher_config_which_beats_defaults(tiny_teacher_dir: Path, tiny_tokenizer: Any) -> None:
    generation = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=5, repetition_penalty=1.2)
    im_end = tiny_tokenizer.convert_tokens_to_ids(IM_END)
    endoftext = tiny_tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    assert generation.max_new_tokens == 5 and generation.config.max_new_tokens == 5  # user beats teacher (16)
    assert generation.eos_token_ids == (im_end, endoftext)  # the teacher's EOS list
    assert generation.kwargs["eos_token_id"] == [im_end, endoftext]
    assert generation.kwargs["repetition_penalty"] == 1.2
    assert generation.kwargs["num_beams"] == 1 and generation.kwargs["use_cache"] is True  # transformers' defaults
    assert generation.kwargs["pad_token_id"] == tiny_tokenizer.pad_token_id
    assert "max_length" not in generation.kwargs
    assert generation.num_return_sequences == 1
    json.dumps(generation.kwargs)
    teacher_default = resolve(tiny_teacher_dir, tiny_tokenizer)
    assert teacher_default.max_new_tokens == TINY_MAX_NEW_TOKENS
    explicit = resolve(tiny_teacher_dir, tiny_tokenizer, eos_token_id=7, pad_token_id=3, max_new_tokens=None)
    assert explicit.eos_token_ids == (7,) and explicit.config.pad_token_id == 3
    assert explicit.max_new_tokens == TINY_MAX_NEW_TOKENS  # null means "not set"


def test_greedy_unless_asked_and_sampling_parameters_are_dropped_without_warnings(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any
) -> None:
    with _no_warnings() as records:
        generation = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=3, top_p=0.5)
        generation.config.validate(strict=True)
        entries = _run(tiny_model, tiny_tokenizer, generation, text_prompts(tiny_tokenizer)[:3], batch_size=3)
    assert entries
    assert [r.getMessage() for r in records] == []
    assert generation.do_sample is False and generation.config.do_sample is False  # the teacher ships do_sample
    for key in ("temperature", "top_p", "top_k", "min_p", "typical_p"):
        assert key not in generation.kwargs
    sampled = resolve(tiny_teacher_dir, tiny_tokenizer, do_sample=True, top_p=0.5)
    assert sampled.kwargs["top_p"] == 0.5 and sampled.kwargs["top_k"] == 20 and sampled.kwargs["temperature"] == 0.6


def test_the_warning_check_sees_what_plain_generate_does_with_the_teachers_sampling_parameters(
    tiny_tokenizer: Any, tiny_model: Any
) -> None:
    """Guard for the test above: a plain greedy ``generate`` re-fills the teacher's sampling parameters and warns."""
    import torch
    import transformers

    hf: Any = transformers
    if tuple(int(part) for part in hf.__version__.split(".")[:2]) < (5, 20):
        pytest.skip("transformers before 5.20 does not re-fill and warn here; nothing to guard")
    ids = torch.tensor([tiny_tokenizer("Hello", add_special_tokens=False).input_ids])
    with _no_warnings() as records, torch.inference_mode():
        tiny_model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            generation_config=hf.GenerationConfig(do_sample=False, max_new_tokens=2),
        )
    assert any("temperature" in r.getMessage() or "top_p" in r.getMessage() for r in records)


def test_the_eos_list_comes_from_the_teacher_config_in_any_form(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tmp_path: Path
) -> None:
    single = _teacher_without_weights(tiny_teacher_dir, tmp_path / "single", {"eos_token_id": 2, "max_new_tokens": 4})
    assert resolve(single, tiny_tokenizer).eos_token_ids == (2,)
    listed = _teacher_without_weights(tiny_teacher_dir, tmp_path / "list", {"eos_token_id": [5, 2, 0]})
    assert resolve(listed, tiny_tokenizer, max_new_tokens=4).eos_token_ids == (5, 2, 0)
    # No generation_config.json: what transformers derives from config.json (its eos_token_id), then defaults.
    absent = _teacher_without_weights(tiny_teacher_dir, tmp_path / "absent", None)
    derived = resolve(absent, tiny_tokenizer, max_new_tokens=4)
    assert derived.eos_token_ids == (tiny_tokenizer.convert_tokens_to_ids(IM_END),)
    assert derived.do_sample is False and derived.kwargs["num_beams"] == 1


def test_missing_max_new_tokens_is_a_config_error(tiny_teacher_dir: Path, tiny_tokenizer: Any, tmp_path: Path) -> None:
    teacher = _teacher_without_weights(tiny_teacher_dir, tmp_path / "t", {"eos_token_id": [2, 0], "do_sample": True})
    with pytest.raises(ConfigError, match=r"model\.generation_kwargs\.max_new_tokens is required") as info:
        resolve(teacher, tiny_tokenizer)
    assert info.value.exit_code == 2
    assert resolve(teacher, tiny_tokenizer, max_new_tokens=3).max_new_tokens == 3
    bad_teacher = _teacher_without_weights(tiny_teacher_dir, tmp_path / "bad", {"max_new_tokens": 0})
    with pytest.raises(ConfigError, match=r"max_new_tokens \(teacher's generation config\)"):
        resolve(bad_teacher, tiny_tokenizer)


@pytest.mark.parametrize("value", [0, -3, True, 2.0, "16"])
def test_max_new_tokens_must_be_a_positive_integer(tiny_teacher_dir: Path, tiny_tokenizer: Any, value: Any) -> None:
    with pytest.raises(ConfigError, match=r"model\.generation_kwargs\.max_new_tokens"):
        resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=value)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"num_return_sequences": 2}, "without beam search do not support `num_return_sequences` different than 1"),
        ({"num_return_sequences": 3, "num_beams": 2}, r"\(3\) has to be smaller or equal to `num_beams`"),
        ({"temprature": 0.5}, r"Unknown generation setting: model\.generation_kwargs\.temprature"),
        ({"prompt_lookup_num_tokens": 3}, "assisted"),
        ({"stop_strings": ["x"], "num_beams": 2}, "cannot be combined with beam search"),
        ({"stop_strings": ""}, "stop_strings"),
        ({"stop_strings": ["ok", 3]}, "stop_strings"),
        ({"eos_token_id": [2, "x"]}, "eos_token_id"),
        ({"eos_token_id": -1}, "eos_token_id"),
        ({"cache_implementation": "paged"}, "continuous batching"),
        ({"cache_implementation": "bogus"}, "invalid generation settings"),
        ({"early_stopping": "sometimes"}, "early_stopping"),
    ],
)
def test_invalid_generation_settings_are_config_errors(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, kwargs: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=fragment) as info:
        resolve(tiny_teacher_dir, tiny_tokenizer, **kwargs)
    assert info.value.exit_code == 2


def test_the_effective_config_is_checked_without_a_model() -> None:
    greedy = {"max_new_tokens": 4, "do_sample": False, "num_beams": 1, "temperature": 0.0}
    assert effective_problems(greedy, user=(), teacher="t") == []  # a sampling setting is not checked under greedy
    sampled = {"max_new_tokens": 4, "do_sample": True, "temperature": 0.0}
    assert effective_problems(sampled, user={"temperature"}, teacher="t") == [
        "model.generation_kwargs.temperature (config): input should be greater than 0 (got 0.0)."
    ]
    assert effective_problems({"max_new_tokens": 0, "do_sample": False}, user=(), teacher="t") == [
        "model.generation_kwargs.max_new_tokens (teacher's generation config): input should be greater than or "
        "equal to 1 (got 0)."
    ]
    missing = effective_problems({"do_sample": False}, user=(), teacher="t")
    assert missing == [
        "model.generation_kwargs.max_new_tokens is required: set it in the config (the teacher's generation config "
        "at 't' does not set it)."
    ]
    beams = {"max_new_tokens": 2, "do_sample": False, "num_beams": 2, "stop_strings": "x"}
    (line,) = effective_problems(beams, user=beams.keys(), teacher="t")
    assert "cannot be combined with beam" in line


def test_an_unreadable_teacher_is_a_config_error(tiny_tokenizer: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"model\.model_path"):
        resolve(tmp_path / "nowhere", tiny_tokenizer, max_new_tokens=3)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "generation_config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="teacher"):
        resolve(broken, tiny_tokenizer, max_new_tokens=3)


# ---------------------------------------------------------------------------------------------------------------
# Progress reporting (no model)
# ---------------------------------------------------------------------------------------------------------------
class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_progress_prints_periodic_lines_with_rate_and_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    from gencache.cli.render import RunProgress

    clock, stream = _Clock(), io.StringIO()
    monkeypatch.setattr(time, "monotonic", clock)
    progress = RunProgress(10, stream=stream)
    progress.start(10)
    clock.now += 4
    progress.advance(1, 40)  # within the interval: no line
    clock.now += 6
    progress.advance(4, 160)  # 10 s after the first line
    clock.now += 1
    progress.advance(1, 10)
    progress.close()
    progress.close()  # idempotent
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("gencache: generate: 0/10 samples (0.0%), 0 tokens")
    assert "5/10 samples (50.0%), 200 tokens, 20.0 tok/s, elapsed 0:00:10, ETA 0:00:10" in lines[1]
    assert "6/10 samples (60.0%), 210 tokens" in lines[2]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_run_progress_draws_plain_lines_off_a_terminal_and_a_rich_bar_on_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from gencache.cli.render import RunProgress, duration

    assert not RunProgress(3, stream=io.StringIO()).live
    stream, clock = _Terminal(), _Clock()
    monkeypatch.setattr(time, "monotonic", clock)
    monkeypatch.setenv("COLUMNS", "200")  # the bar's figures whole whatever the terminal's width
    progress = RunProgress(3, stream=stream)
    assert progress.live
    progress.start(3)
    clock.now += 2
    progress.advance(3, 30)
    progress.close()
    output = stream.getvalue()
    assert "3/3 samples" in output and "30 tokens" in output and "15.0 tok/s" in output
    assert duration(3725.4) == "1:02:05"
    assert duration(None) == "-:--:--"


def test_device_auto_places_the_teacher_through_accelerate(tiny_teacher_dir: Path) -> None:
    import torch
    import transformers

    if not transformers.utils.is_accelerate_available():
        with pytest.raises(GenerationError, match="needs the accelerate package"):
            load_teacher(str(tiny_teacher_dir), dtype="float32", device="auto")
        return

    model = load_teacher(str(tiny_teacher_dir), dtype="float32", device="auto")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert next(model.parameters()).device.type == expected
    with torch.inference_mode():
        ids = torch.tensor([[5, 6, 7]], device=next(model.parameters()).device)
        assert model(ids).logits.shape[:2] == (1, 3)


def test_out_of_memory_names_the_batch_and_suggests_a_smaller_batch_size(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    def out_of_memory(*args: Any, **kwargs: Any) -> Any:  # what a too-large batch does on a GPU
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(tiny_model, "generate", out_of_memory)
    generation = resolve(tiny_teacher_dir, tiny_tokenizer)
    expected = r"Out of memory generating batch 0 \(4 prompts.*gen_batch_size \(now 4\)"
    with pytest.raises(GenerationError, match=expected):
        _run(tiny_model, tiny_tokenizer, generation, text_prompts(tiny_tokenizer)[:4], 4)
