"""Padding distillation items into batches that any trainer can take.

A batch is a :class:`DistillationBatch`: a ``dict`` holding only model inputs (``input_ids``, ``attention_mask``,
``labels``), so ``model(**batch)`` works and Hugging Face ``Trainer`` passes nothing else to ``model.forward``
(whatever ``remove_unused_columns`` is). What describes the rows (``key``, ``finish_reason``, ``sequence_index``,
``prompt_length``) rides beside it in :attr:`DistillationBatch.metadata`, a plain attribute that trainers ignore.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from gencache.core.errors import ConfigError

#: The label of a position that is not an answer token (Hugging Face's ignore index).
IGNORE_INDEX = -100
#: The model inputs of every batch, in order.
MODEL_INPUTS: tuple[str, ...] = ("input_ids", "attention_mask", "labels")
#: What an item says about its row, kept out of the model inputs (see :attr:`DistillationBatch.metadata`).
METADATA_FIELDS: tuple[str, ...] = (
    "key",
    "finish_reason",
    "sequence_index",
    "prompt_length",
    "data_config_index",
    "row_id",
    "row_index",
    "reference",
)


class DistillationBatch(dict[str, Any]):
    """A ``dict`` of model inputs (``input_ids``, ``attention_mask``, ``labels``: int64, one row per item) with
    ``metadata``: ``{"key": [...], "finish_reason": [...], "sequence_index": [...], "prompt_length": [...]}``, a
    list per field with one value per row.

    ``metadata`` holds only the fields every item carried: Hugging Face ``Trainer`` with
    ``remove_unused_columns=True`` (its default) strips them from the items before the collator sees them, so its
    batches have empty metadata. The attribute survives pickling (DataLoader workers) and ``copy.copy``
    (``pin_memory``); a trainer that rebuilds the mapping to move it to a device keeps the inputs only.
    """

    metadata: dict[str, list[Any]]

    def __init__(self, *args: Any, metadata: Mapping[str, list[Any]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.metadata = dict(metadata or {})

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}={tuple(v.shape) if hasattr(v, 'shape') else v!r}" for k, v in self.items())
        return f"DistillationBatch({shapes}; metadata={sorted(self.metadata)})"


def pad_batch(items: Sequence[Mapping[str, Any]], *, pad_token_id: int, padding_side: str) -> DistillationBatch:
    """Stack :class:`~gencache.training.DistillationDataset` items: ``input_ids`` padded with ``pad_token_id``,
    ``attention_mask`` with 0 and ``labels`` with -100, on ``padding_side`` (``"left"`` or ``"right"``). The items'
    ``key``, ``finish_reason``, ``sequence_index`` and ``prompt_length`` (those all items have) become lists in
    :attr:`DistillationBatch.metadata`; any other item key is left out."""
    if padding_side not in ("left", "right"):
        raise ConfigError(f"padding_side must be 'left' or 'right', got {padding_side!r}.")
    if not items:
        raise ConfigError("pad_batch needs at least one item.")
    for name in ("input_ids", "labels"):
        if any(name not in item for item in items):
            raise ConfigError(f"pad_batch needs {name!r} in every item (a DistillationDataset item has it).")
    width = max(len(item["input_ids"]) for item in items)
    batch = DistillationBatch()
    for name, fill in zip(MODEL_INPUTS, (pad_token_id, 0, IGNORE_INDEX), strict=True):
        out = torch.full((len(items), width), fill, dtype=torch.int64)
        for row, item in enumerate(items):
            values = item[name] if name in item else torch.ones(len(item["input_ids"]), dtype=torch.int64)
            values = torch.as_tensor(values, dtype=torch.int64)
            if padding_side == "right":
                out[row, : len(values)] = values
            else:
                out[row, width - len(values) :] = values
        batch[name] = out
    batch.metadata = {name: [item[name] for item in items] for name in METADATA_FIELDS if all(name in i for i in items)}
    return batch


class DistillationCollator:
    """A DataLoader (or ``Trainer``) ``collate_fn`` padding with the tokenizer's pad id on its padding side (read
    once, here), or on ``padding_side`` when given: ``"right"`` is the usual choice for training; the cached
    prompts were tokenized on the tokenizer's side, which never changes the ids of one sequence. Returns a
    :class:`DistillationBatch`."""

    def __init__(self, tokenizer: Any, *, padding_side: str | None = None) -> None:
        pad = getattr(tokenizer, "pad_token_id", None)
        side = padding_side if padding_side is not None else getattr(tokenizer, "padding_side", None)
        if pad is None:
            raise ConfigError(
                "The tokenizer has no pad token; pass it through gencache.prepare_tokenizer() (which falls back to "
                "the EOS token) before building the collator."
            )
        self.pad_token_id = int(pad)
        self.padding_side = str(side)
        if self.padding_side not in ("left", "right"):
            raise ConfigError(f"padding_side must be 'left' or 'right', got {side!r}.")

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> DistillationBatch:
        return pad_batch(items, pad_token_id=self.pad_token_id, padding_side=self.padding_side)
