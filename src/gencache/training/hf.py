"""A Hugging Face ``datasets.Dataset`` view of a :class:`~gencache.training.DistillationDataset`, built from the
exact stored token ids (never from re-tokenized text), in the pre-tokenized form TRL's ``SFTTrainer`` takes.

Columns, one row per dataset item: ``input_ids`` (prompt ids then the teacher's answer ids), ``attention_mask``
(ones), ``labels`` (-100 over the prompt, the answer ids after it), ``completion_mask`` (1 on the answer tokens, 0
on the prompt) and, unless ``metadata=False``, the item's descriptive fields (:data:`METADATA_COLUMNS`: ``key``,
``finish_reason``, ``sequence_index``, ``prompt_length``, ``data_config_index``, ``row_id``, ``row_index``,
``reference``), which join the rows back to the source rows. Trainers drop the metadata columns themselves
(``remove_unused_columns``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from gencache.core.errors import OutputExistsError, WriteError
from gencache.training.collate import IGNORE_INDEX


class Rows(Protocol):
    """What the view is built from: a :class:`~gencache.training.DistillationDataset` (its items, by index)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> Mapping[str, Any]: ...


ROWS_PER_BATCH = 1024
TOKEN_COLUMNS: tuple[str, ...] = ("input_ids", "attention_mask", "labels", "completion_mask")
#: The descriptive columns (``metadata=True``) and their Arrow types; each is the item's field of the same name.
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


def _schema(metadata: bool) -> Any:
    import pyarrow as pa

    fields = [pa.field(name, pa.list_(pa.int64())) for name in TOKEN_COLUMNS]
    if metadata:
        fields += [pa.field(name, getattr(pa, kind)()) for name, kind in METADATA_COLUMNS.items()]
    return pa.schema(fields)


def _list_column(rows: list[np.ndarray]) -> Any:
    import pyarrow as pa

    lengths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.astype(np.int64, copy=False)))


def _batches(data: Rows, metadata: bool) -> Iterator[Any]:
    import pyarrow as pa

    schema = _schema(metadata)
    for start in range(0, len(data), ROWS_PER_BATCH):
        items = [data[index] for index in range(start, min(start + ROWS_PER_BATCH, len(data)))]
        ids = [item["input_ids"].numpy() for item in items]
        labels = [item["labels"].numpy() for item in items]
        ones = [np.ones(len(row), dtype=np.int64) for row in ids]
        completion = [(row != IGNORE_INDEX).astype(np.int64) for row in labels]
        columns = [_list_column(ids), _list_column(ones), _list_column(labels), _list_column(completion)]
        if metadata:
            columns += [
                pa.array([item[name] for item in items], getattr(pa, kind)()) for name, kind in METADATA_COLUMNS.items()
            ]
        yield pa.RecordBatch.from_arrays(columns, schema=schema)


def build_hf_dataset(data: Rows, *, path: str | os.PathLike[str] | None = None, metadata: bool = True) -> Any:
    """``data``'s items as a ``datasets.Dataset`` (see the module docstring), in ``data``'s order; what
    :func:`gencache.training.to_hf_dataset` returns.

    Without ``path`` the table is built in memory. With ``path`` (a file that must not exist) the rows are
    streamed into an Arrow file there, ``ROWS_PER_BATCH`` items at a time, and the dataset memory-maps it: use it
    for caches too large to hold twice in memory.
    """
    import datasets
    import pyarrow as pa

    schema = _schema(metadata)
    if path is None:
        table = pa.Table.from_batches(list(_batches(data, metadata)), schema=schema)
        return datasets.Dataset(datasets.table.InMemoryTable(table))
    target = Path(path)
    if os.path.lexists(target):
        raise OutputExistsError(f"{os.path.abspath(target)} already exists; choose another path for the datasets view.")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with pa.OSFile(str(target), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            for batch in _batches(data, metadata):
                writer.write_batch(batch)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            target.unlink()  # never leave half a view behind
        if isinstance(exc, OSError):
            raise WriteError(f"Cannot write the datasets view to {target}: {exc}") from exc
        raise
    return datasets.Dataset.from_file(str(target))
