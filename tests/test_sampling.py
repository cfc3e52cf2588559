"""Per-sequence sampling: a sample's answers depend on its prompt, the teacher, the settings and the seed only.

The derivation is pinned against independent reference code; the engines are run on the tiny teacher in float32
(real models, no mocks) across batch sizes, concurrencies, prompt subsets and orders, shards and ``--limit``.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import gencache
from gencache.config.engines import ContinuousOptions
from gencache.core.errors import ConfigError
from gencache.generation.engines import EngineContext, create_engine
from gencache.generation.sampling import draw_tokens, sampling_seed, uniforms
from support.config_factory import hotpot_qa, musique, write_config
from support.generation_helpers import continuous_entries, resolve, static_entries, text_prompts

SAMPLING = {"do_sample": True, "temperature": 1.3, "top_p": 0.9, "top_k": 20, "num_return_sequences": 3}


# -- the derivation, against reference code ---------------------------------------------------------------------
def _reference_seed(seed: int, key: str, sequence: int | None) -> int:
    text = f"{seed}\0{key}" + ("" if sequence is None else f"\0{sequence}")
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % 2**31


def _reference_uniform(stream: int, position: int) -> float:
    """Output ``position + 1`` of SplitMix64 started at ``stream``, written from its published definition."""
    mask = 2**64 - 1
    state = stream
    for _ in range(position + 1):
        state = (state + 0x9E3779B97F4A7C15) & mask
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    z ^= z >> 31
    return (z >> 11) / 2**53


def test_the_stream_seed_and_the_draws_follow_the_documented_rule() -> None:
    for seed, key, sequence in [(0, "a" * 64, 0), (42, "k", 2), (2**31, "é", None), (7, "key", 15)]:
        assert sampling_seed(seed, key, sequence) == _reference_seed(seed, key, sequence)
    assert sampling_seed(5, "k", 0) != sampling_seed(5, "k", 1) != sampling_seed(6, "k", 1)
    streams = [0, 1, 2**31 - 1, 123456789]
    positions = [0, 5, 17, 300]
    got = uniforms(streams, positions)
    assert got.dtype == np.float64
    assert list(got) == [_reference_uniform(s, p) for s, p in zip(streams, positions, strict=True)]
    assert all(0.0 <= value < 1.0 for value in got)


def test_a_draw_never_picks_an_excluded_token_and_follows_the_distribution() -> None:
    logits = torch.tensor([[0.0, float("-inf"), 1.0, float("-inf"), 2.0]])
    probs = torch.softmax(logits, dim=-1)[0].tolist()
    draws = uniforms([99] * 20000, list(range(20000)))
    tokens = [int(draw_tokens(logits, draws[i : i + 1])[0]) for i in range(0, 20000, 10)]
    counts = np.bincount(tokens, minlength=5) / len(tokens)
    assert counts[1] == counts[3] == 0
    assert np.allclose(counts, probs, atol=0.03)
    edge = draw_tokens(logits, np.array([1.0 - 2**-53]))  # the largest uniform still lands on an allowed token
    assert int(edge[0]) == 4
    batch = torch.cat([logits, torch.tensor([[5.0, 0.0, float("-inf"), 0.0, 0.0]])])
    both = draw_tokens(batch, np.array([0.3, 0.3]))
    assert int(both[0]) == int(draw_tokens(logits, np.array([0.3]))[0])  # a row's draw ignores the other rows


# -- the engines: a sample's answers do not depend on what it runs with -----------------------------------------
def _answers(entries: Any) -> dict[str, tuple[tuple[int, ...], ...]]:
    return {e.key: tuple(tuple(s.tolist()) for s in e.sequences) for e in entries}


@pytest.mark.slow
@pytest.mark.parametrize("settings", [SAMPLING, {}], ids=["sampled", "greedy"])
def test_static_and_continuous_answers_ignore_batch_size_concurrency_subset_and_order(
    tiny_teacher_dir: Path, tiny_tokenizer: Any, tiny_model: Any, settings: dict[str, Any]
) -> None:
    prompts = text_prompts(tiny_tokenizer)
    generation = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=8, **settings)
    shuffled = list(prompts)
    random.Random(3).shuffle(shuffled)
    subset = shuffled[:5]

    def static(chosen: list[tuple[str, list[int]]], batch_size: int, seed: int = 11) -> dict[str, Any]:
        return _answers(
            static_entries(tiny_model, tiny_tokenizer, generation, chosen, batch_size=batch_size, seed=seed)
        )

    def continuous(chosen: list[tuple[str, list[int]]], concurrency: int) -> dict[str, Any]:
        options = ContinuousOptions(max_concurrent_sequences=concurrency)
        return _answers(continuous_entries(tiny_model, tiny_tokenizer, generation, chosen, options=options, seed=11))

    reference = static(prompts, 1)
    for other in (
        static(prompts, 4),
        static(shuffled, 16),
        continuous(prompts, 1),
        continuous(shuffled, 4),
        continuous(prompts, 16),
    ):
        assert other == reference
    for other in (static(subset, 3), continuous(subset, 16)):
        assert other == {key: reference[key] for key in other}
    if settings:
        assert static(prompts, 4, seed=12) != reference
        assert any(len(set(rows)) > 1 for rows in reference.values())  # three different draws per prompt


def test_sampling_beam_search_is_refused_before_weights_load(tiny_teacher_dir: Path, tiny_tokenizer: Any) -> None:
    generation = resolve(tiny_teacher_dir, tiny_tokenizer, do_sample=True, num_beams=3, max_new_tokens=4)
    context = EngineContext(generation, tiny_tokenizer, str(tiny_teacher_dir), "float32", "cpu")
    with pytest.raises(ConfigError, match=r"cannot sample each sequence from its own stream in beam search"):
        create_engine("transformers", context)


# -- whole runs: the manifests agree entry for entry ------------------------------------------------------------
def _digests(path: Path) -> dict[str, str]:
    reader = gencache.open_caches(path)
    return {key: (reader.metadata(key) or {})["content_digest"] for key in reader}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("engine", "settings"),
    [("transformers", SAMPLING), ("transformers-continuous", SAMPLING), ("transformers", {})],
    ids=["transformers-sampled", "continuous-sampled", "transformers-greedy"],
)
def test_runs_store_the_same_entries_across_batching_shards_limit_and_order(
    tmp_path: Path, tiny_teacher_dir: Path, engine: str, settings: dict[str, Any]
) -> None:
    model = {
        "model_path": str(tiny_teacher_dir),
        "dtype": "float32",
        "device": "cpu",
        "generation_kwargs": {"max_new_tokens": 6, **settings},
    }
    configs = [musique(num_samples=6), hotpot_qa()]

    def run(name: str, size: int, *, order: list[dict[str, Any]] = configs, **kwargs: Any) -> dict[str, str]:
        options = {"max_concurrent_sequences": size} if engine == "transformers-continuous" else {}
        config = write_config(
            tmp_path,
            tiny_teacher_dir,
            model=model,
            data_configs=order,
            gen_batch_size=size,
            engine=engine,
            engine_options=options,
            seed=9,
            output_dir=str(tmp_path / name),
        )
        return _digests(gencache.generate(config, **kwargs))

    reference = run("one", 1)
    assert len(reference) == 12
    assert run("four", 4) == reference
    assert run("sixteen", 16) == reference
    assert run("sharded", 4, shards=3) == reference
    assert run("reversed", 4, order=configs[::-1]) == reference
    limited = run("limited", 4, limit=3)
    assert limited and limited == {key: reference[key] for key in limited}
