"""Per-sequence sampling: every sequence of every sample draws from its own random stream, so a sampled answer
depends only on its prompt, the teacher, the generation settings and the run's ``seed``.

The transformers engines draw the token at answer position ``t`` from one uniform number, output ``t + 1`` of
SplitMix64 started at the stream seed, by inverse transform. The draw is counter-based, so a request that an engine
pauses, evicts or recomputes draws the same token at the same position. The ``vllm`` engine seeds each request and
lets vLLM draw its ``n`` sequences.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)

SAMPLING_RULE: dict[str, str] = {
    "scope": "per sequence: every sequence of every sample has its own random stream",
    "stream_seed": "sha256(f'{seed}\\0{key}\\0{sequence}')[:4] big-endian & 0x7FFFFFFF",
    "draw": "answer position t: u = top 53 bits of SplitMix64 output t+1 from the stream seed / 2**53; the first "
    "token whose float64 cumulative softmax (float32) of the processed scores exceeds u * total",
}
"""How the ``transformers`` and ``transformers-continuous`` engines sample (recorded in ``resolved_config.json``)."""

VLLM_SAMPLING_RULE: dict[str, str] = {
    "scope": "per prompt: one vLLM request seed, from which vLLM draws the prompt's n sequences",
    "stream_seed": "sha256(f'{seed}\\0{key}')[:4] big-endian & 0x7FFFFFFF",
    "draw": "vLLM's own sampler with SamplingParams.seed = the stream seed",
}
"""How the ``vllm`` engine samples (recorded in ``resolved_config.json``)."""


def sampling_seed(seed: int, key: str, sequence: int | None = None) -> int:
    """The 31-bit stream seed of sequence ``sequence`` of the sample ``key``; without ``sequence``, the seed of the
    whole request (the ``vllm`` engine's)."""
    text = f"{seed}\0{key}" if sequence is None else f"{seed}\0{key}\0{sequence}"
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def uniforms(streams: Sequence[int], positions: Sequence[int]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """One uniform number in [0, 1) per ``(stream seed, answer position)`` pair."""
    state = np.asarray(streams, dtype=np.uint64)  # 31-bit stream seeds
    steps = np.asarray([int(p) + 1 for p in positions], dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = state + steps * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
    draws: np.ndarray[Any, np.dtype[np.float64]] = (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    return draws


def draw_tokens(scores: torch.Tensor, draws: np.ndarray[Any, np.dtype[np.float64]]) -> torch.Tensor:
    """The token of each row of ``scores`` (``[rows, vocab]``, processed logits) for the row's uniform number in
    ``draws``, by inverse transform over the float64 cumulative sum of the float32 softmax."""
    import torch

    probs = torch.softmax(scores.float(), dim=-1).double()
    cdf = probs.cumsum(dim=-1)
    total = cdf[:, -1:]
    targets = torch.as_tensor(draws, dtype=torch.float64, device=scores.device).unsqueeze(-1) * total
    # strictly below the total, so the token found always has a positive probability (its cumulative sum rises)
    targets = torch.minimum(targets, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, targets, right=True).squeeze(-1)
