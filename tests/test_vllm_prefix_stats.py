"""Shared prompt prefixes: the floor of prompt tokens a run must compute, and the continuous transformers engine's
block sharing measured against that floor (the vllm engine's own measure is tested in ``test_vllm_cpu.py``). Runs in
the default environment."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from gencache.config.engines import ContinuousOptions
from gencache.generation.engines import PrefixStats, prefix_floor
from gencache.generation.engines.transformers import TransformersContinuousEngine, supported_transformers
from support.generation_helpers import engine_of, resolve


def _counts(prompts: list[list[int]], block: int) -> tuple[int, int]:
    stats = prefix_floor(prompts, block)
    return stats.prompt_tokens, stats.floor_prompt_tokens


def test_the_floor_counts_what_no_earlier_prompt_shares_in_whole_blocks() -> None:
    shared = list(range(10, 30))  # 20 tokens: two whole blocks of 8 and 4 more
    first, second = [*shared, 1, 2, 3], [*shared, 4, 5]
    assert _counts([first], 8) == (23, 23)  # nothing before it
    # The second prompt shares 20 tokens, of which two whole blocks (16 tokens) can be served.
    assert _counts([first, second], 8) == (45, 23 + 22 - 16)
    assert _counts([first, first], 8) == (46, 23 + 23 - 16)  # the last prompt token is always computed
    assert _counts([[1, 2, 3], [4, 5, 6]], 1) == (6, 6)
    assert _counts([[1, 2, 3], [1, 2, 9]], 1) == (6, 4)
    assert _counts([[1] * 8, [1] * 8, [1] * 9], 8) == (25, 8 + 8 + 1)  # whole blocks; never the last token


def test_prefix_stats_say_how_much_of_what_the_floor_allows_was_cached() -> None:
    stats = PrefixStats(16, prompt_tokens=100, cached_prompt_tokens=45, floor_prompt_tokens=50, cached_from="test")
    assert stats.to_json() == {
        "block_size": 16,
        "prompt_tokens": 100,
        "cached_prompt_tokens": 45,
        "computed_prompt_tokens": 55,
        "floor_prompt_tokens": 50,
        "cached_from": "test",
    }


needs_continuous = pytest.mark.skipif(not supported_transformers(), reason="transformers too old for the manager")


@needs_continuous
def test_the_continuous_engines_block_sharing_is_measured_against_the_floor(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any
) -> None:
    rng = random.Random(1)
    vocabulary = len(tiny_tokenizer)
    shots = [rng.randrange(5, vocabulary) for _ in range(96)]  # six whole blocks of 16
    few_shot = [(f"q{i}", [*shots, *(rng.randrange(5, vocabulary) for _ in range(5))]) for i in range(6)]
    unrelated = [(f"u{i}", [i + 5, *(rng.randrange(5, vocabulary) for _ in range(40))]) for i in range(6)]
    generation = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=3, eos_token_id=[])
    options = ContinuousOptions(max_concurrent_sequences=2, page_size=16)
    engine = engine_of("transformers-continuous", tiny_model, tiny_tokenizer, generation, options=options)
    assert len(list(engine.entries(few_shot))) == 6
    stats = engine.prefix
    assert (stats.prompt_tokens, stats.floor_prompt_tokens) == (6 * 101, 101 + 5 * 5)
    # The requests of the first forward each compute the shots; every later one is served them from the cache. The
    # manager runs in its own thread, so the first forward holds one request or both (two slots), by timing.
    assert stats.cached_prompt_tokens in (4 * 96, 5 * 96)
    assert "block sharing" in stats.cached_from
    list(engine.entries(unrelated))
    assert (
        engine.prefix.cached_prompt_tokens == 0
        and engine.prefix.floor_prompt_tokens == engine.prefix.prompt_tokens == 6 * 41
    )


@needs_continuous
def test_the_continuous_engine_records_its_prefix_statistics_under_batching(
    tiny_teacher_dir: Path, tiny_tokenizer: Any
) -> None:
    from gencache.generation.engines import EngineContext

    context = EngineContext(
        generation=resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=2),
        tokenizer=tiny_tokenizer,
        model_path=str(tiny_teacher_dir),
        dtype="float32",
        device="cpu",
        options=ContinuousOptions(page_size=16),
    )
    engine = TransformersContinuousEngine(context)
    engine.load_weights()
    prompts = [(f"k{i}", [7] * 40 + [i + 9]) for i in range(3)]
    assert len(list(engine.generate(prompts))) == 3
    recorded = engine.batching()["prefix_cache"]
    assert recorded["prompt_tokens"] == 3 * 41 and recorded["block_size"] == 16
    assert recorded["floor_prompt_tokens"] == 41 + 2 * 9
