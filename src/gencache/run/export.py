"""``gencache export``: one record per stored sequence, as JSON Lines or parquet, from the artifact alone.

Every record has the key, the sequence index, the answer as text (``completion``) and as the exact stored token ids
(``completion_ids``), its finish reason, token length and content digest, and the run's ``max_new_tokens`` (from
``resolved_config.json``). Prompts (``prompt``, ``prompt_ids``, the dataset name, data config index and sample index
of each key, its ``reference`` answer and the source row it came from, ``row_id`` and ``row_index``) are added when
the samples can be rebuilt (:mod:`gencache.data.recorded`): from the dataset sources the artifact recorded, or from
``data_root`` (a directory holding the recorded local sources by their last path component) and ``sources`` (a new
source per data config index), rendered with the recorded tokenizer or ``tokenizer_path`` (the tokenizer's directory
after it moved). When the sources or the tokenizer are gone the export still happens, without prompts, and says
why.
``prompts=False`` leaves the prompts out and loads no tokenizer: the join fields (``row_id``, ``row_index``,
``reference``, the dataset name, data config and sample index) still come from the samples rebuilt without one, and
when they cannot be rebuilt (the sources gone or changed, a template that renders with the tokenizer, a recorded
config that does not parse) they are left null, with a note saying why.

``format`` follows ``out``'s extension when not given (``.jsonl`` JSON Lines, ``.parquet`` parquet); a given
``format`` that contradicts the extension is refused. ``min_score`` (for example ``{"f1": 0.5}``) keeps the
answers whose metrics against the reference (:mod:`gencache.data.scores`) are all at or above their bar, scored on
the fly or read from ``scores`` (a ``gencache score --out`` file); a bar that keeps nothing is refused.

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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gencache.artifact.mixture import MultiCacheReader, open_caches
from gencache.artifact.names import FORMAT_VERSION
from gencache.artifact.publish import publish_file
from gencache.config.paths import check_output_name
from gencache.core.errors import (
    ConfigError,
    DatasetError,
    FormatError,
    GencacheError,
    InputPathError,
    OutputExistsError,
    SourceChangedError,
    WriteError,
    first_line,
)
from gencache.core.version import __version__

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
#: The format of an ``out`` path by its extension.
EXTENSIONS: dict[str, str] = {".jsonl": "jsonl", ".parquet": "parquet"}
#: The parquet schema metadata key holding :func:`export_metadata`.
METADATA_KEY = "gencache"


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote: the number of records, whether they carry prompts, why not when they do not, the
    provenance a parquet file carries in its schema metadata, and how many answers ``min_score`` left out."""

    out: Path
    records: int
    prompts: bool
    note: str | None = None
    metadata: dict[str, Any] | None = None
    left_out: int = 0


@dataclass(frozen=True)
class _Prompt:
    data_config_index: int
    sample_index: int
    text: str | None
    ids: tuple[int, ...] | None
    dataset_name: str | None
    reference: str | None = None
    row_id: str | None = None
    row_index: int | None = None


def _rebuild_samples(
    directory: str | os.PathLike[str],
    readers: list[Any],
    data_root: Path | None,
    sources: Mapping[int, str],
    resolved: Mapping[str, Any],
    tokenized: bool,
    tokenizer_path: str | None,
) -> Any:
    """The run's samples rebuilt from the checked record of the run (``resolved``, the first reader's checked
    ``resolved_config.json``; with the overrides), tokenized when ``tokenized`` with the tokenizer at
    ``tokenizer_path`` or else the recorded one: a :class:`_TokenizerError` when it cannot be loaded."""
    from gencache.data.recorded import rebuild_samples, run_of_readers
    from gencache.generation.teacher import load_tokenizer

    run = run_of_readers(directory, readers, resolved=resolved)
    tokenizer = None
    if tokenized:
        model = run.config.model
        path = tokenizer_path or model.effective_tokenizer_path
        if tokenizer_path is None and os.path.isabs(path) and not os.path.isdir(path):  # hub ids are never absolute
            raise _TokenizerError(f"the tokenizer directory the run used, {path}, is gone (moved or deleted)")
        try:
            tokenizer = load_tokenizer(path, revision=model.revision)
        except GencacheError as error:
            raise _TokenizerError(first_line(error)) from None
    return rebuild_samples(run, tokenizer, sources=sources, data_root=data_root)


class _TokenizerError(DatasetError):
    """The tokenizer the prompts are rendered with cannot be loaded."""


def _prompts_of(samples: Any, keys: set[str], with_prompts: bool) -> tuple[list[str], dict[str, _Prompt]]:
    """The prompt (and join fields) of each of ``keys``, from its first sample, in run order (the prompt's text and
    ids only ``with_prompts``)."""
    prompts: dict[str, _Prompt] = {}
    order: list[str] = []
    names = {summary.index: summary.dataset_name for summary in samples.summaries}
    for sample in samples.unique:
        if sample.key in keys:
            order.append(sample.key)
            ids = None
            if with_prompts and sample.input_ids is not None:
                ids = tuple(int(i) for i in sample.input_ids)
            source_id = sample.source_id
            prompts[sample.key] = _Prompt(
                sample.data_config_index,
                sample.sample_index,
                sample.prompt_text if with_prompts else None,
                ids,
                names[sample.data_config_index],
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
    digests: Mapping[str, Any],
    kept: Callable[[str, int], bool] | None = None,
) -> Iterator[ExportRow]:
    for key in order:
        generation = reader.get_arrays(key)  # numpy arrays read from the file: no torch
        prompt = prompts.get(key)
        prompt_ids = None if prompt is None or prompt.ids is None else list(prompt.ids)
        for index, (sequence, text, reason) in enumerate(
            zip(generation.sequences, generation.texts, generation.finish_reasons, strict=True)
        ):
            if kept is not None and not kept(key, index):
                continue
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
            yield record


def export_metadata(
    reader: Any, resolved: Mapping[str, Any], digests: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Where an export came from: the teacher (``model_path``, its ``commit_hash`` when recorded), the tokenizer
    path and state, the dtype, the format and gencache versions, the provenance digest, the artifact paths, and
    ``entries_digest``: SHA-256 over ``"<key> <content_digest>\\n"`` for every entry in key order (each record
    carries its entry's ``content_digest``; ``digests`` gives them when they were already read)."""
    import hashlib

    if digests is None:
        digests = _content_digests(reader)
    entries = hashlib.sha256()
    for key in reader:
        entries.update(f"{key} {digests.get(key)}\n".encode())
    provenance = dict(reader.provenance)
    recorded = resolved.get("model")
    model: Mapping[str, Any] = recorded if isinstance(recorded, dict) else {}
    return {
        "format_version": FORMAT_VERSION,
        "gencache_version": __version__,
        "teacher": {"model_path": provenance.get("model_path"), "commit_hash": model.get("commit_hash")},
        "tokenizer_path": provenance.get("tokenizer_path"),
        "tokenizer": provenance.get("tokenizer"),
        "dtype": provenance.get("dtype"),
        "provenance": provenance,
        "provenance_digest": reader.provenance_digest,
        "artifacts": [str(path) for path in reader.paths],
        "entries": len(reader),
        "entries_digest": entries.hexdigest(),
        "run_digest": resolved.get("run_digest"),
    }


def write_jsonl(records: Iterator[ExportRow], handle: IO[bytes]) -> int:
    """Write ``records`` as JSON Lines (sorted keys, UTF-8) on ``handle``; the number written."""
    count = 0
    for record in records:
        handle.write((json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
        count += 1
    return count


def parquet_schema(*, metadata: Mapping[str, Any] | None = None, columns: Mapping[str, str] = COLUMNS) -> Any:
    """The pyarrow schema of an export (or of ``columns``, name to pyarrow type), with ``metadata`` as JSON under
    :data:`METADATA_KEY`."""
    import pyarrow as pa

    fields = [(name, pa.list_(pa.int64()) if kind == "ids" else getattr(pa, kind)()) for name, kind in columns.items()]
    encoded = None if metadata is None else {METADATA_KEY: json.dumps(metadata, sort_keys=True)}
    return pa.schema(fields, metadata=encoded)


def write_parquet(records: Iterator[ExportRow], handle: IO[bytes], schema: Any) -> int:
    """Stream ``records`` into a parquet file of ``schema`` on ``handle``, in row groups; the number written."""
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


def check_out_parent(out: Path) -> None:
    """Refuse an ``out`` path under something that is not a directory: one line naming it (exit code 2)."""
    for parent in Path(os.path.abspath(out)).parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                raise InputPathError(
                    f"Cannot write {os.path.abspath(out)}: {parent} is not a directory; choose an --out path under "
                    "a directory."
                )
            return


def write_atomic(out: Path, write: Any) -> int:
    """Run ``write(handle)`` on a temporary sibling of ``out`` and link it into place (never over a file: one
    that appeared since the caller checked is an error); what ``write`` returned."""
    out = Path(os.path.abspath(out))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"Cannot write {out}: {exc.strerror or exc}; choose another --out path.") from exc
    try:
        count: int = publish_file(out, write, replace=False)
    except FileExistsError:
        raise OutputExistsError(f"{out} appeared while writing it; nothing was replaced.") from None
    return count


def export_format(out: str | os.PathLike[str], format: str | None) -> str:
    """The format an export to ``out`` is written in: ``format`` when given (one of :data:`FORMATS`, and not one
    that contradicts ``out``'s extension), else the one ``out``'s extension names (a :class:`ConfigError`
    otherwise)."""
    by_extension = EXTENSIONS.get(Path(out).suffix.lower())
    if format is None:
        if by_extension is None:
            raise ConfigError(
                f"--out {out}: the format follows the extension ({', '.join(EXTENSIONS)}); name the file so, or "
                "pass --format jsonl|parquet."
            )
        return by_extension
    if format not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}.")
    if by_extension is not None and by_extension != format:
        raise ConfigError(
            f"--format {format} contradicts --out {out} (a {by_extension} name); drop --format or rename the file."
        )
    return format


def _bar_of(
    samples: Any,
    reader: Any,
    min_score: Mapping[str, float],
    scores: str | os.PathLike[str] | None,
) -> tuple[Callable[[str, int], bool], int, int]:
    """Whether each answer clears ``min_score`` (scored from ``samples`` and ``reader``, or read from ``scores``),
    with the number of answers considered and of those left out."""
    from gencache.data.scores import check_min_score, read_scores, rules_of, score_cache

    bar = check_min_score(min_score) or ()
    if scores is not None:
        lookup: Mapping[tuple[str, int], Mapping[str, float] | None] = read_scores(scores)
    else:
        lookup = {(a.key, a.sequence_index): a.metrics for a in score_cache(samples, reader, rules_of(samples))}
    passed: set[tuple[str, int]] = set()
    total = 0
    for key in reader:
        for index in range(len(reader.metadata(key)["finish_reasons"])):
            total += 1
            if (key, index) not in lookup:
                raise ConfigError(
                    f"{scores}: no score for answer {index} of key {key[:12]}...; the file was written for another "
                    "artifact: score this one (gencache score ARTIFACT --out FILE)."
                )
            metrics = lookup[(key, index)]
            if metrics is not None and all(metrics[name] >= value for name, value in bar):
                passed.add((key, index))
    if not passed:
        raise ConfigError(
            f"the selection (min_score={dict(bar)}) keeps no answer: all {total} answers score below it or have no "
            "reference; lower the bar."
        )

    def kept(key: str, index: int) -> bool:
        return (key, index) in passed

    return kept, total, total - len(passed)


def export(
    directory: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    format: str | None = None,
    prompts: bool = True,
    data_root: str | os.PathLike[str] | None = None,
    sources: Mapping[int, str] | None = None,
    min_score: Mapping[str, float] | None = None,
    scores: str | os.PathLike[str] | None = None,
    tokenizer_path: str | None = None,
) -> ExportResult:
    """Export an artifact (or an unsuffixed sharded output) to ``out`` in ``format`` (see the module docstring)."""
    from gencache.data.recorded import checked_resolved_config

    check_output_name(os.fspath(out), "--out")
    chosen_format = export_format(out, format)
    if scores is not None and min_score is None:
        raise ConfigError("--scores goes with --min-score METRIC=VALUE; add the bar.")
    out_path = Path(out)
    if os.path.lexists(out_path):
        raise OutputExistsError(f"{os.path.abspath(out_path)} already exists; choose another --out path.")
    check_out_parent(out_path)
    reader = open_caches(directory)
    readers = list(reader.readers) if isinstance(reader, MultiCacheReader) else [reader]
    resolved = checked_resolved_config(readers[0])  # a shard set: its first shard's; damaged: FormatError
    generation = resolved.get("generation")
    max_new_tokens = generation.get("max_new_tokens") if isinstance(generation, dict) else None
    keys = set(reader.keys())
    order = sorted(keys)
    found: dict[str, _Prompt] = {}
    note = None
    samples = None
    overridden = data_root is not None or bool(sources)
    root = Path(data_root).expanduser().absolute() if data_root is not None else None
    what = "prompts" if prompts else "join fields (row_id, row_index, reference)"
    try:
        samples = _rebuild_samples(directory, readers, root, dict(sources or {}), resolved, prompts, tokenizer_path)
        order, found = _prompts_of(samples, keys, prompts)
    except (FormatError, SourceChangedError) as error:  # a damaged record or changed data: never quiet prompts
        if prompts or min_score is not None:
            raise
        note = f"{what} left out: {first_line(error)}"
    except _TokenizerError as error:
        if min_score is not None and scores is None:
            raise DatasetError(f"Cannot render the prompts of {directory}: {error}") from None
        note = (
            f"prompts left out: they are rendered with the run's tokenizer, and {error}; pass --tokenizer DIR "
            "(its place now), or --no-prompts"
        )
    except GencacheError as error:
        if overridden or (min_score is not None and scores is None):  # the data is needed, or pointed at
            raise DatasetError(f"Cannot rebuild the samples of {directory}: {first_line(error)}") from None
        note = (
            f"{what} left out: the samples could not be rebuilt ({first_line(error)}); point --data-root or "
            "--source at the datasets to add them" + ("" if not prompts else ", or pass --no-prompts")
        )
    kept = None
    left_out = 0
    if min_score is not None:
        kept, _total, left_out = _bar_of(samples, reader, min_score, scores)
    digests = _content_digests(reader)
    metadata = export_metadata(reader, resolved, digests)

    def write(handle: IO[bytes]) -> int:
        records = _records(reader, order, found, max_new_tokens, digests, kept)
        if chosen_format == "parquet":
            return write_parquet(records, handle, parquet_schema(metadata=metadata))
        return write_jsonl(records, handle)

    count = write_atomic(out_path, write)
    with_prompts = prompts and (bool(found) or not keys)
    return ExportResult(Path(os.path.abspath(out_path)), count, with_prompts, note, metadata, left_out)


def parse_source_override(text: str) -> tuple[int, str]:
    """``I=PATH`` (``--source``) to ``(data config index, source)``."""
    index, sep, source = text.partition("=")
    if not sep or not index.strip().isdigit() or not source:
        raise ConfigError(f"--source must look like I=PATH (data config index I), got {text!r}.")
    return int(index), source
