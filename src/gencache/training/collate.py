"""Padding distillation items into batches that any trainer can take: a :class:`DistillationBatch` holds only model
inputs, so ``model(**batch)`` works and Hugging Face ``Trainer`` passes nothing else to ``model.forward``; what
describes the rows rides beside it in :attr:`DistillationBatch.metadata`, a plain attribute that trainers ignore.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence

from gencache.core.errors import ConfigError

#: The label of a position that is not an answer token (Hugging Face's ignore index).
IGNORE_INDEX = -100
#: The model inputs of every batch, in order.
MODEL_INPUTS: tuple[str, ...] = ("input_ids", "attention_mask", "labels")
#: What an item says about its row, kept out of the model inputs, with its Arrow type in the datasets view.
METADATA_COLUMNS: dict[str, str] = {
    "key": "string",
    "finish_reason": "string",
    "sequence_index": "int64",
    "prompt_length": "int64",
    "data_config_index": "int64",
    "row_id": "string",
    "row_index": "int64",
    "reference": "string",
}
METADATA_FIELDS: tuple[str, ...] = tuple(METADATA_COLUMNS)


class DistillationBatch(dict[str, Any]):
    """A ``dict`` of model inputs with ``metadata``, a list per field with one value per row. Hugging Face
    ``Trainer`` with ``remove_unused_columns=True`` (its default) strips the fields from the items before the
    collator sees them, so its batches have empty metadata. The attribute survives pickling (DataLoader workers)
    and ``copy.copy`` (``pin_memory``)."""

    def __init__(self, *args: Any, metadata: Mapping[str, list[Any]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.metadata: dict[str, list[Any]] = dict(metadata or {})


def _check_side(padding_side: Any) -> str:
    if padding_side not in ("left", "right"):
        raise ConfigError(f"padding_side must be 'left' or 'right', got {padding_side!r}.")
    return str(padding_side)


def pad_batch(items: Sequence[Mapping[str, Any]], *, pad_token_id: int, padding_side: str) -> DistillationBatch:
    """Stack :class:`~gencache.training.DistillationDataset` items, padding ``input_ids`` with ``pad_token_id``,
    ``attention_mask`` with 0 and ``labels`` with -100; the :data:`METADATA_FIELDS` all items have become
    :attr:`DistillationBatch.metadata`."""
    side = _check_side(padding_side)
    batch = DistillationBatch()
    for name, fill in zip(MODEL_INPUTS, (pad_token_id, 0, IGNORE_INDEX), strict=True):
        rows = [torch.as_tensor(item.get(name, [1] * len(item["input_ids"])), dtype=torch.int64) for item in items]
        batch[name] = pad_sequence(rows, batch_first=True, padding_value=fill, padding_side=side)
    batch.metadata = {name: [item[name] for item in items] for name in METADATA_FIELDS if all(name in i for i in items)}
    return batch


class DistillationCollator:
    """A DataLoader (or ``Trainer``) ``collate_fn`` padding with the tokenizer's pad id on its padding side, or on
    ``padding_side`` when given (``"right"`` is the usual choice for training)."""

    def __init__(self, tokenizer: Any, *, padding_side: str | None = None) -> None:
        if tokenizer.pad_token_id is None:
            raise ConfigError("The tokenizer has no pad token; pass it through gencache.prepare_tokenizer() first.")
        self.pad_token_id = int(tokenizer.pad_token_id)
        self.padding_side = _check_side(padding_side or tokenizer.padding_side)

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> DistillationBatch:
        return pad_batch(items, pad_token_id=self.pad_token_id, padding_side=self.padding_side)
