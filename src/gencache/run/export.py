"""``gencache export``: one record per stored sequence, as JSON Lines or parquet, from the artifact alone.

Every record has the key, the sequence index, the answer as text (``completion``) and as the exact stored token ids
(``completion_ids``), its finish reason, token length and content digest, and the run's ``max_new_tokens`` (from
``resolved_config.json``). Prompts (``prompt``, ``prompt_ids``, the dataset name, data config index and sample index
of each key, its ``reference`` answer and the source row it came from, ``row_id`` and ``row_index``) are added when
the samples can be rebuilt (:mod:`gencache.run.recorded`): from the dataset sources the artifact recorded, or from
``data_root`` (a directory holding the recorded local sources by their last path component) and ``sources`` (a new
source per data config index). When the sources are gone the export still happens, without prompts, and says why;
``prompts=False`` skips them. ``prompt_text`` and ``text``, the earlier names of ``prompt`` and ``completion``, are
written too unless ``legacy_names=False``.

Every value comes from a checked source: the manifest, or a ``resolved_config.json`` that passes the checks
``gencache verify`` makes of it (and, to rebuild prompts, its ``resolved_digest`` and the recorded source files'
SHA-256). A damaged or edited record stops the export with one line naming the file (exit 1), even with
``prompts=False``; a source file that changed since generation stops it too (exit 2).

A parquet file carries the artifact's provenance in its schema metadata, under the key ``gencache`` (JSON, see
:func:`export_metadata`). Records are streamed: one entry at a time to a temporary sibling that is fsynced and
linked into place, so the file appears complete or not at all.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gencache.artifact.publish import publish_file
from gencache.config.paths import check_output_name
from gencache.core.errors import (
    ConfigError,
    DatasetError,
    FormatError,
    GencacheError,
    OutputExistsError,
    SourceChangedError,
    WriteError,
    first_line,
)

FORMATS = ("jsonl", "parquet")
ExportRow = dict[str, Any]
PARQUET_BATCH_ROWS = 4096

#: The columns of every record and their pyarrow types (``None`` values are nulls; ``ids`` is a list of int64).
COLUMNS: dict[str, str] = {
    "key": "string",
    "dataset_name": "string",
    "data_config_index": "int64",
    "sample_index": "int64",
    "row_id": "string",
    "row_index": "int64",
    "sequence_index": "int64",
    "prompt": "string",
    "reference": "string",
    "completion": "string",
    "prompt_ids": "ids",
    "completion_ids": "ids",
    "prompt_token_length": "int64",
    "token_length": "int64",
    "max_new_tokens": "int64",
    "finish_reason": "string",
    "reached_max_length": "bool_",
    "content_digest": "string",
}
#: The earlier names of ``prompt`` and ``completion``, written beside them unless ``legacy_names=False``.
LEGACY_COLUMNS: dict[str, str] = {"prompt_text": "prompt", "text": "completion"}
#: The parquet schema metadata key holding :func:`export_metadata`.
METADATA_KEY = "gencache"


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote: the number of records, whether they carry prompts, why not when they do not, and the
    provenance a parquet file carries in its schema metadata."""

    out: Path
    records: int
    prompts: bool
    note: str | None = None
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True)
class _Prompt:
    data_config_index: int
    sample_index: int
    text: str
    ids: tuple[int, ...] | None
    dataset_name: str | None
    reference: str | None = None
    row_id: str | None = None
    row_index: int | None = None


def _rebuild_prompts(
    directory: str | os.PathLike[str],
    readers: list[Any],
    data_root: Path | None,
    sources: Mapping[int, str],
    keys: set[str],
    resolved: Mapping[str, Any],
) -> tuple[list[str], dict[str, _Prompt]]:
    """The prompts of ``keys`` rebuilt from the checked record of the run (``resolved``, the first reader's checked
    ``resolved_config.json``; with the overrides), in run order."""
    from gencache.data.recorded import rebuild_samples, run_of_readers
    from gencache.run.recorded import load_recorded_tokenizer

    run = run_of_readers(directory, readers, resolved=resolved)
    samples = rebuild_samples(run, load_recorded_tokenizer(run), sources=sources, data_root=data_root)
    prompts: dict[str, _Prompt] = {}
    order: list[str] = []
    for sample in samples.unique:
        if sample.key in keys:
            order.append(sample.key)
            ids = tuple(int(i) for i in sample.input_ids) if sample.input_ids is not None else None
            name = run.config.data_configs[sample.data_config_index].dataset_name
            source_id = sample.source_id
            prompts[sample.key] = _Prompt(
                sample.data_config_index,
                sample.sample_index,
                sample.prompt_text,
                ids,
                name,
                sample.reference,
                None if source_id is None else str(source_id),
                sample.row,
            )
    missing = len(keys) - len(prompts)
    if missing:
        raise DatasetError(
            f"{missing} cache entries match no rebuilt sample (the datasets or tokenizer changed since generation)"
        )
    return order, prompts


def _content_digests(reader: Any) -> dict[str, Any]:
    """Every entry's ``content_digest``, by key (one pass over the manifest entries)."""
    return {key: (reader.metadata(key) or {}).get("content_digest") for key in reader}


def _records(
    reader: Any,
    order: list[str],
    prompts: Mapping[str, _Prompt],
    max_new_tokens: Any,
    legacy_names: bool,
    digests: Mapping[str, Any],
) -> Iterator[ExportRow]:
    for key in order:
        generation = reader.get_arrays(key)  # numpy arrays read from the file: no torch
        prompt = prompts.get(key)
        prompt_ids = None if prompt is None or prompt.ids is None else list(prompt.ids)
        for index, (sequence, text, reason) in enumerate(
            zip(generation.sequences, generation.texts, generation.finish_reasons, strict=True)
        ):
            record: ExportRow = {
                "key": key,
                "dataset_name": None if prompt is None else prompt.dataset_name,
                "data_config_index": None if prompt is None else prompt.data_config_index,
                "sample_index": None if prompt is None else prompt.sample_index,
                "row_id": None if prompt is None else prompt.row_id,
                "row_index": None if prompt is None else prompt.row_index,
                "reference": None if prompt is None else prompt.reference,
                "sequence_index": index,
                "prompt": None if prompt is None else prompt.text,
                "completion": text,
                "prompt_ids": prompt_ids,
                "completion_ids": sequence.tolist(),
                "prompt_token_length": None if prompt_ids is None else len(prompt_ids),
                "token_length": len(sequence),
                "max_new_tokens": max_new_tokens if isinstance(max_new_tokens, int) else None,
                "finish_reason": reason,
                "reached_max_length": reason == "length",
                "content_digest": digests.get(key),
            }
            if legacy_names:
                for old, new in LEGACY_COLUMNS.items():
                    record[old] = record[new]
            yield record


def export_metadata(
    reader: Any, resolved: Mapping[str, Any], digests: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Where an export came from: the teacher (``model_path``, its ``commit_hash`` when recorded), the tokenizer
    path and state, the dtype, the format and gencache versions, the provenance digest, the artifact paths, and
    ``entries_digest``: SHA-256 over ``"<key> <content_digest>\\n"`` for every entry in key order (each record
    carries its entry's ``content_digest``; ``digests`` gives them when they were already read)."""
    import hashlib

    from gencache.artifact.names import FORMAT_VERSION
    from gencache.core.version import __version__

    if digests is None:
        digests = _content_digests(reader)
    entries = hashlib.sha256()
    for key in reader:
        entries.update(f"{key} {digests.get(key)}\n".encode())
    provenance = dict(reader.provenance)
    recorded = resolved.get("model")
    model: Mapping[str, Any] = recorded if isinstance(recorded, dict) else {}
    paths = getattr(reader, "paths", None) or (reader.path,)
    return {
        "format_version": FORMAT_VERSION,
        "gencache_version": __version__,
        "teacher": {"model_path": provenance.get("model_path"), "commit_hash": model.get("commit_hash")},
        "tokenizer_path": provenance.get("tokenizer_path"),
        "tokenizer": provenance.get("tokenizer"),
        "dtype": provenance.get("dtype"),
        "provenance": provenance,
        "provenance_digest": reader.provenance_digest,
        "artifacts": [str(path) for path in paths],
        "entries": len(reader),
        "entries_digest": entries.hexdigest(),
        "run_digest": resolved.get("run_digest"),
    }


def _write_jsonl(records: Iterator[ExportRow], handle: IO[bytes]) -> int:
    count = 0
    for record in records:
        handle.write((json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
        count += 1
    return count


def parquet_schema(*, legacy_names: bool = True, metadata: Mapping[str, Any] | None = None) -> Any:
    """The pyarrow schema of an export (with ``metadata`` as JSON under :data:`METADATA_KEY`)."""
    import pyarrow as pa

    columns = dict(COLUMNS)
    if legacy_names:
        columns.update({old: COLUMNS[new] for old, new in LEGACY_COLUMNS.items()})
    fields = [(name, pa.list_(pa.int64()) if kind == "ids" else getattr(pa, kind)()) for name, kind in columns.items()]
    encoded = None if metadata is None else {METADATA_KEY: json.dumps(metadata, sort_keys=True)}
    return pa.schema(fields, metadata=encoded)


def _write_parquet(records: Iterator[ExportRow], handle: IO[bytes], schema: Any) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    count = 0
    with pq.ParquetWriter(handle, schema) as writer:
        batch: list[ExportRow] = []
        for record in records:
            batch.append(record)
            if len(batch) >= PARQUET_BATCH_ROWS:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                count += len(batch)
                batch = []
        if batch or not count:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            count += len(batch)
    return count


def _check_out_parent(out: Path) -> None:
    """Refuse an ``out`` path under something that is not a directory: one line naming it (exit code 2)."""
    from gencache.core.errors import InputPathError

    for parent in Path(os.path.abspath(out)).parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                raise InputPathError(
                    f"Cannot write {os.path.abspath(out)}: {parent} is not a directory; choose an --out path under "
                    "a directory."
                )
            return


def _write_atomic(out: Path, write: Any) -> int:
    """Run ``write(handle)`` on a temporary sibling of ``out`` and link it into place (never over a file: one
    that appeared since :func:`export` checked is an error)."""
    out = Path(os.path.abspath(out))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"Cannot write {out}: {exc.strerror or exc}; choose another --out path.") from exc
    try:
        count: int = publish_file(out, write, replace=False)
    except FileExistsError:
        raise OutputExistsError(f"{out} appeared while exporting; nothing was replaced.") from None
    return count


def export(
    directory: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    format: str = "jsonl",
    prompts: bool = True,
    data_root: str | os.PathLike[str] | None = None,
    sources: Mapping[int, str] | None = None,
    legacy_names: bool = True,
) -> ExportResult:
    """Export an artifact (or an unsuffixed sharded output) to ``out`` in ``format`` (see the module docstring)."""
    from gencache.artifact.mixture import MultiCacheReader, open_caches
    from gencache.data.recorded import checked_resolved_config

    if format not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}.")
    check_output_name(os.fspath(out), "--out")
    out_path = Path(out)
    if os.path.lexists(out_path):
        raise OutputExistsError(f"{os.path.abspath(out_path)} already exists; choose another --out path.")
    _check_out_parent(out_path)
    reader = open_caches(directory)
    readers = list(reader.readers) if isinstance(reader, MultiCacheReader) else [reader]
    resolved = checked_resolved_config(readers[0])  # a shard set: its first shard's; damaged: FormatError
    generation = resolved.get("generation")
    max_new_tokens = generation.get("max_new_tokens") if isinstance(generation, dict) else None
    keys = set(reader.keys())
    order = sorted(keys)
    found: dict[str, _Prompt] = {}
    note = None
    overridden = data_root is not None or bool(sources)
    if prompts:
        root = Path(data_root).expanduser().absolute() if data_root is not None else None
        try:
            order, found = _rebuild_prompts(directory, readers, root, dict(sources or {}), keys, resolved)
        except (FormatError, SourceChangedError):  # a damaged record or changed data: never a quiet export
            raise
        except GencacheError as error:
            if overridden:  # the user pointed at the data: not finding it is an error
                raise DatasetError(f"Cannot rebuild the prompts of {directory}: {error}") from None
            note = (
                f"prompts left out: the samples could not be rebuilt ({first_line(error)}); point --data-root or "
                "--source at the datasets to add them, or pass --no-prompts"
            )
    digests = _content_digests(reader)
    metadata = export_metadata(reader, resolved, digests)

    def write(handle: IO[bytes]) -> int:
        records = _records(reader, order, found, max_new_tokens, legacy_names, digests)
        if format == "parquet":
            return _write_parquet(records, handle, parquet_schema(legacy_names=legacy_names, metadata=metadata))
        return _write_jsonl(records, handle)

    count = _write_atomic(out_path, write)
    with_prompts = bool(found) or (not keys and prompts)
    return ExportResult(Path(os.path.abspath(out_path)), count, with_prompts, note, metadata)


def parse_source_override(text: str) -> tuple[int, str]:
    """``I=PATH`` (``--source``) to ``(data config index, source)``."""
    index, sep, source = text.partition("=")
    if not sep or not index.strip().isdigit() or not source:
        raise ConfigError(f"--source must look like I=PATH (data config index I), got {text!r}.")
    return int(index), source
