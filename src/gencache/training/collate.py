"""Padding distillation items into batches, on the tokenizer's padding side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from gencache.errors import ConfigError

IGNORE_INDEX = -100


def pad_batch(items: Sequence[dict[str, Any]], *, pad_token_id: int, padding_side: str) -> dict[str, Any]:
    """Stack :class:`~gencache.training.DistillationDataset` items: ``input_ids`` padded with ``pad_token_id``,
    ``attention_mask`` with 0 and ``labels`` with -100, on ``padding_side`` (``"left"`` or ``"right"``); ``key``,
    ``finish_reason``, ``sequence_index`` and ``prompt_length`` become lists."""
    if padding_side not in ("left", "right"):
        raise ConfigError(f"padding_side must be 'left' or 'right', got {padding_side!r}.")
    if not items:
        raise ConfigError("pad_batch needs at least one item.")
    width = max(len(item["input_ids"]) for item in items)
    batch: dict[str, Any] = {}
    for name, fill in (("input_ids", pad_token_id), ("attention_mask", 0), ("labels", IGNORE_INDEX)):
        out = torch.full((len(items), width), fill, dtype=torch.int64)
        for row, item in enumerate(items):
            values = item[name]
            if padding_side == "right":
                out[row, : len(values)] = values
            else:
                out[row, width - len(values) :] = values
        batch[name] = out
    for name in ("key", "finish_reason", "sequence_index", "prompt_length"):
        batch[name] = [item[name] for item in items]
    return batch


class DistillationCollator:
    """A DataLoader ``collate_fn`` padding with the tokenizer's pad id on its padding side (read once, here)."""

    def __init__(self, tokenizer: Any) -> None:
        pad = getattr(tokenizer, "pad_token_id", None)
        side = getattr(tokenizer, "padding_side", None)
        if pad is None:
            raise ConfigError(
                "The tokenizer has no pad token; pass it through gencache.prepare_tokenizer() (which falls back to "
                "the EOS token) before building the collator."
            )
        self.pad_token_id = int(pad)
        self.padding_side = str(side)
        if self.padding_side not in ("left", "right"):
            raise ConfigError(f"The tokenizer's padding_side must be 'left' or 'right', got {side!r}.")

    def __call__(self, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return pad_batch(items, pad_token_id=self.pad_token_id, padding_side=self.padding_side)


__all__ = ["DistillationCollator", "pad_batch"]
