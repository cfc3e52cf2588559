"""``gencache export``: one record per stored sequence, as JSON Lines or parquet, from the artifact alone.

Prompts and join fields come from the samples rebuilt from the artifact's checked record
(:mod:`gencache.data.recorded`); when they cannot be rebuilt the export still happens without them and says why. A
damaged or edited record stops the export (even without prompts): every value comes from a checked source.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gencache.artifact.mixture import MultiCacheReader, open_caches
from gencache.artifact.names import FORMAT_VERSION
from gencache.artifact.publish import publish_file
from gencache.artifact.resolved import nested
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
from gencache.data.recorded import checked_resolved_config, load_recorded_tokenizer, rebuild_samples, run_of_readers
from gencache.data.scores import JOIN_COLUMNS, check_min_score, join_fields, read_scores, rules_of, score_cache

PARQUET_BATCH_ROWS = 4096

#: The columns of every record and their pyarrow types (``None`` values are nulls; ``ids`` is a list of int64).
COLUMNS: dict[str, str] = JOIN_COLUMNS | {
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
FORMATS = ("jsonl", "parquet")


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote: ``note`` says why the records carry no prompts when they do not."""

    out: Path
    records: int
    note: str | None = None
    left_out: int = 0


def write_rows(
    rows: Iterator[dict[str, Any]],
    handle: IO[bytes],
    parquet: bool,
    metadata: Mapping[str, Any],
    columns: Mapping[str, str] = COLUMNS,
) -> int:
    """Write ``rows`` on ``handle``: JSON Lines (sorted keys, UTF-8), or parquet of ``columns`` (name to pyarrow
    type) in row groups with ``metadata`` as JSON under ``gencache``; the number written."""
    count = 0
    if not parquet:
        for row in rows:
            handle.write((json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
            count += 1
        return count
    import pyarrow as pa
    import pyarrow.parquet as pq

    fields = [(name, pa.list_(pa.int64()) if kind == "ids" else getattr(pa, kind)()) for name, kind in columns.items()]
    schema = pa.schema(fields, metadata={"gencache": json.dumps(metadata, sort_keys=True)})
    with pq.ParquetWriter(handle, schema) as writer:
        for batch in iter(lambda: list(itertools.islice(rows, PARQUET_BATCH_ROWS)), []):
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            count += len(batch)
        if not count:  # a file of no rows still has its schema, as datasets reads it
            writer.write_table(schema.empty_table())
    return count


def check_out(out: str | os.PathLike[str]) -> Path:
    path = Path(os.path.abspath(out))
    if os.path.lexists(path):
        raise OutputExistsError(f"{path} already exists; choose another --out path.")
    parent = next(parent for parent in path.parents if os.path.lexists(parent))
    if not parent.is_dir():
        raise InputPathError(
            f"Cannot write {path}: {parent} is not a directory; choose an --out path under a directory."
        )
    return path


def write_atomic(out: Path, write: Callable[[IO[bytes]], int]) -> int:
    """Run ``write(handle)`` on a temporary sibling of the absolute ``out`` and link it into place (never over a
    file: one that appeared since the caller checked is an error); what ``write`` returned."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"Cannot write {out}: {exc.strerror or exc}; choose another --out path.") from exc
    try:
        count: int = publish_file(out, write, replace=False)
    except FileExistsError:
        raise OutputExistsError(f"{out} appeared while writing it; nothing was replaced.") from None
    return count


def _passed(
    samples: Any, reader: Any, min_score: Mapping[str, float], scores: str | os.PathLike[str] | None
) -> tuple[set[tuple[str, int]], int]:
    """The answers that clear ``min_score`` (scored from ``samples`` and ``reader``, or read from ``scores``) and
    how many it leaves out."""
    bar = check_min_score(min_score) or ()
    if scores is not None:
        lookup: Mapping[tuple[str, int], Mapping[str, float] | None] = read_scores(scores)
    else:
        lookup = {(a.key, a.sequence_index): a.metrics for a in score_cache(samples, reader, rules_of(samples))}
    answers = [(key, index) for key in reader for index in range(len(reader.metadata(key)["finish_reasons"]))]
    for key, index in answers:
        if (key, index) not in lookup:
            raise ConfigError(
                f"{scores}: no score for answer {index} of key {key[:12]}...; the file was written for another "
                "artifact: score this one (gencache score ARTIFACT --out FILE)."
            )
    passed = {a for a in answers if (m := lookup[a]) is not None and all(m[name] >= value for name, value in bar)}
    if not passed:
        raise ConfigError(
            f"the selection (min_score={dict(bar)}) keeps no answer: all {len(answers)} answers score below it or "
            "have no reference; lower the bar."
        )
    return passed, len(answers) - len(passed)


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
    """Export an artifact (or an unsuffixed sharded output) to ``out``, in ``format`` or the one its extension
    names. ``prompts=False`` loads no tokenizer (the join fields still come from the samples rebuilt without one);
    ``data_root``, ``sources`` and ``tokenizer_path`` find moved datasets and tokenizer; ``min_score`` (for example
    ``{"f1": 0.5}``) keeps the answers whose metrics all reach their bar, scored on the fly or read from
    ``scores``."""
    check_output_name(os.fspath(out), "--out")
    suffix = Path(out).suffix.lower()[1:]
    chosen = format or suffix  # the format the extension names, unless given; never one that contradicts it
    if chosen not in FORMATS or (suffix in FORMATS and suffix != chosen):
        raise ConfigError(
            f"--out {out}{f' --format {format}' if format else ''}: the format is jsonl or parquet, named by the "
            "extension or by --format; name the file .jsonl or .parquet, or pass a --format that matches it."
        )
    if scores is not None and min_score is None:
        raise ConfigError("--scores goes with --min-score METRIC=VALUE; add the bar.")
    out_path = check_out(out)
    reader = open_caches(directory)
    readers = list(reader.readers) if isinstance(reader, MultiCacheReader) else [reader]
    resolved = checked_resolved_config(readers[0])  # a shard set: its first shard's; damaged: FormatError
    keys = set(reader.keys())
    fields: dict[str, dict[str, Any]] = {}
    note, samples, run, tokenizer = None, None, None, None
    scoring = min_score is not None and scores is None  # the references are needed
    what = "prompts" if prompts else "join fields (row_id, row_index, reference)"
    try:
        run = run_of_readers(readers)
        if prompts:
            tokenizer = load_recorded_tokenizer(run, tokenizer_path, moved="pass --tokenizer DIR, its new place")
        samples = rebuild_samples(run, tokenizer, sources=sources, data_root=data_root)
        names = {summary.index: summary.dataset_name for summary in samples.summaries}
        for sample in samples.unique:  # each key's fields from its first sample, in run order (ids: with prompts)
            if sample.key in keys and sample.key not in fields:
                fields[sample.key] = join_fields(sample, names) | {
                    "reference": sample.reference,
                    "prompt": sample.prompt_text if prompts else None,
                    "prompt_ids": None if sample.input_ids is None else [int(i) for i in sample.input_ids],
                }
        if len(fields) < len(keys):
            raise DatasetError(
                f"{len(keys) - len(fields)} cache entries match no rebuilt sample (the datasets or tokenizer "
                "changed since generation)"
            )
    except (FormatError, SourceChangedError) as error:  # a damaged record or changed data: never quiet prompts
        if prompts or min_score is not None:
            raise
        note = f"{what} left out: {first_line(error)}"
    except GencacheError as error:
        if prompts and run is not None and tokenizer is None:  # the tokenizer did not load
            if scoring:
                raise DatasetError(f"Cannot render the prompts of {directory}: {first_line(error)}") from None
            reason = first_line(error).rstrip(".")
            note = f"prompts left out: they are rendered with the run's tokenizer, and {reason}; or pass --no-prompts"
        elif data_root is not None or sources or scoring:  # the data is needed, or pointed at
            raise DatasetError(f"Cannot rebuild the samples of {directory}: {first_line(error)}") from None
        else:
            note = (
                f"{what} left out: the samples could not be rebuilt ({first_line(error)}); point --data-root or "
                "--source at the datasets to add them" + ("" if not prompts else ", or pass --no-prompts")
            )
    if note is not None:  # left out for every entry alike, never for the keys that matched only
        fields.clear()
    passed, left_out = (None, 0) if min_score is None else _passed(samples, reader, min_score, scores)
    digests = {key: (reader.metadata(key) or {}).get("content_digest") for key in reader}
    # where the export came from (a parquet file's schema metadata); entries_digest is SHA-256 over
    # "<key> <content_digest>\n" in key order
    entries = hashlib.sha256("".join(f"{key} {digests[key]}\n" for key in reader).encode())
    provenance = dict(reader.provenance)
    metadata = {
        "format_version": FORMAT_VERSION,
        "gencache_version": __version__,
        "teacher": {
            "model_path": provenance.get("model_path"),
            "commit_hash": nested(resolved, "model", "commit_hash"),
        },
        **{name: provenance.get(name) for name in ("tokenizer_path", "tokenizer", "dtype")},
        "provenance": provenance,
        "provenance_digest": reader.provenance_digest,
        "artifacts": [str(path) for path in reader.paths],
        "entries": len(reader),
        "entries_digest": entries.hexdigest(),
        "run_digest": resolved.get("run_digest"),
    }
    max_new_tokens = nested(resolved, "generation", "max_new_tokens")
    unknown: dict[str, Any] = dict.fromkeys(COLUMNS)  # the samples could not be rebuilt: their fields are null

    def records() -> Iterator[dict[str, Any]]:
        for key in list(fields) or sorted(keys):
            generation = reader.get_arrays(key)  # numpy arrays read from the file: no torch
            prompt = fields.get(key, unknown)
            for index, (sequence, text, reason) in enumerate(
                zip(generation.sequences, generation.texts, generation.finish_reasons, strict=True)
            ):
                if passed is None or (key, index) in passed:
                    yield prompt | {
                        "key": key,
                        "sequence_index": index,
                        "completion": text,
                        "completion_ids": sequence.tolist(),
                        "prompt_token_length": None if prompt["prompt_ids"] is None else len(prompt["prompt_ids"]),
                        "token_length": len(sequence),
                        "max_new_tokens": max_new_tokens if isinstance(max_new_tokens, int) else None,
                        "finish_reason": reason,
                        "reached_max_length": reason == "length",
                        "content_digest": digests[key],
                    }

    written = write_atomic(out_path, lambda handle: write_rows(records(), handle, chosen == "parquet", metadata))
    return ExportResult(out_path, written, note, left_out)
