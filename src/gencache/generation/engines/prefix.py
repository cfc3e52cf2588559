"""Shared prompt prefixes: the order that runs them together and the floor of prompt tokens a run must compute.

Few-shot prompts repeat their shots: an engine with a prefix cache computes a shared prefix once and serves it to
every later prompt that starts with it, in whole cache blocks. :func:`prefix_order` sorts prompts by their token ids,
so prompts with a common prefix are neighbours (the set of prompts, and so the artifact's entries, is unchanged).
:func:`prefix_floor` counts, for prompts in run order, the tokens that no earlier prompt of the run shares at the
engine's block granularity: no prefix cache can serve those, so they are the least a run computes. An engine reports
what it served from its cache beside that floor (:class:`PrefixStats`, recorded under ``batching.prefix_cache``).

Pure Python: no torch, no engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

P = TypeVar("P", bound=tuple[str, Sequence[int]])


def prefix_order(prompts: Iterable[P]) -> list[P]:
    """The prompts sorted by their token ids (ties keep their order): prompts that share a prefix are adjacent,
    and the longer their common prefix, the closer they are."""
    return sorted(prompts, key=lambda prompt: tuple(prompt[1]))


def reusable_prefix(shared: int, length: int, block: int) -> int:
    """Tokens of a prompt of ``length`` tokens a block cache can serve when ``shared`` leading tokens are cached:
    whole blocks only, and never the last prompt token (its logits start the answer, so it is always computed)."""
    return (min(shared, length - 1) // block) * block if length > 0 else 0


def prefix_floor(prompts: Iterable[Sequence[int]], block: int) -> tuple[int, int]:
    """``(prompt tokens, floor)`` of prompts in run order: the floor counts the tokens of each prompt beyond the
    longest whole-block prefix that an earlier prompt has (:func:`reusable_prefix`)."""
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block}")
    seen: set[int] = set()
    total = floor = 0
    for ids in prompts:
        tokens = tuple(int(token) for token in ids)
        total += len(tokens)
        chain = 0
        hashes = []
        for start in range(0, len(tokens) - len(tokens) % block, block):
            chain = hash((chain, tokens[start : start + block]))
            hashes.append(chain)
        shared = 0
        for chained in hashes:
            if chained not in seen:
                break
            shared += block
        floor += len(tokens) - reusable_prefix(shared, len(tokens), block)
        seen.update(hashes)
    return total, floor


@dataclass
class PrefixStats:
    """Prompt tokens of one run, those its engine served from a prefix cache, and the floor (:func:`prefix_floor`)."""

    block_size: int
    prompt_tokens: int = 0
    cached_tokens: int = 0
    floor_tokens: int = 0
    source: str = ""

    @property
    def computed_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def reuse_of_floor(self) -> float:
        """Cached tokens over what the floor allows to cache (1.0 when nothing could be cached)."""
        allowed = self.prompt_tokens - self.floor_tokens
        return self.cached_tokens / allowed if allowed else 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "block_size": self.block_size,
            "prompt_tokens": self.prompt_tokens,
            "cached_prompt_tokens": self.cached_tokens,
            "computed_prompt_tokens": self.computed_tokens,
            "floor_prompt_tokens": self.floor_tokens,
            "cached_from": self.source,
        }
