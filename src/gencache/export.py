"""``gencache export``: one JSON line per stored sequence, with the prompt that produced it.

Samples are rebuilt from the artifact's ``resolved_config.json`` (datasets and tokenizer must be reachable) and
matched to the cache by semantic key; the file is written to a temporary sibling, fsynced and linked into place,
so it either appears complete or not at all.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from gencache.artifact._fs import fsync_dir
from gencache.artifact.names import RESOLVED_NAME
from gencache.errors import FormatError, OutputExistsError, WriteError


def _load_resolved(directory: Path) -> dict[str, Any]:
    from gencache.artifact.reader import read_resolved_config

    value = read_resolved_config(directory)
    if not isinstance(value.get("config"), dict):
        raise FormatError(
            f"{directory / RESOLVED_NAME} has no 'config' object; it was not written by this gencache version."
        )
    return value


def export_records(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The export lines of one artifact, in generation order of the rebuilt samples."""
    from gencache.artifact.names import shard_of
    from gencache.artifact.reader import CacheReader
    from gencache.data.config import parse_config
    from gencache.data.samples import build_samples
    from gencache.errors import DatasetError
    from gencache.generation.teacher import load_tokenizer

    directory = Path(directory)
    reader = CacheReader(directory)
    resolved = _load_resolved(directory)
    config = parse_config(resolved["config"], origin=str(directory / RESOLVED_NAME))
    tokenizer = load_tokenizer(config.model.effective_tokenizer_path, revision=config.model.revision)
    samples = build_samples(config, tokenizer=tokenizer)
    shard = reader.manifest["summary"].get("shard")
    unique = list(samples.unique)
    if shard:
        unique = [s for s in unique if shard_of(s.key, shard["count"]) == shard["index"]]
    expected = {s.key for s in unique}
    stored = set(reader.keys())
    if expected != stored:
        missing, unexpected = len(expected - stored), len(stored - expected)
        raise DatasetError(
            f"Cache/config sample mismatch in {directory}: {missing} rebuilt samples are missing from the cache and "
            f"{unexpected} cache entries match no rebuilt sample; the datasets or tokenizer changed since generation."
        )
    max_new_tokens = resolved.get("generation", {}).get("max_new_tokens")
    records = []
    for sample in unique:
        generation = reader[sample.key]
        prompt_tokens = len(sample.input_ids) if sample.input_ids is not None else None
        for index, (sequence, text, reason) in enumerate(
            zip(generation.sequences, generation.texts, generation.finish_reasons, strict=True)
        ):
            records.append(
                {
                    "key": sample.key,
                    "data_config_index": sample.data_config_index,
                    "sample_index": sample.sample_index,
                    "sequence_index": index,
                    "prompt_text": sample.prompt_text,
                    "prompt_token_length": prompt_tokens,
                    "token_length": int(sequence.numel()),
                    "max_new_tokens": max_new_tokens,
                    "finish_reason": reason,
                    "reached_max_length": reason == "length",
                    "text": text,
                }
            )
    return records


def write_jsonl_atomic(records: list[dict[str, Any]], out: Path) -> None:
    """Write ``records`` to ``out``, which must not exist; a failure leaves no file behind."""
    out = Path(os.path.abspath(out))
    if os.path.lexists(out):
        raise OutputExistsError(f"{out} already exists; choose another --out path.")
    temp = out.with_name(f".{out.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        handle = open(temp, "x", encoding="utf-8")  # noqa: SIM115 - closed by the with block below
    except OSError as exc:
        raise WriteError(f"Cannot write {out}: {exc.strerror or exc}; choose another --out path.") from exc
    try:
        with handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temp, out)  # fails instead of replacing a file created meanwhile
        except FileExistsError:
            raise OutputExistsError(f"{out} appeared while exporting; nothing was replaced.") from None
        except OSError as exc:
            raise WriteError(f"Cannot publish {out}: {exc}") from exc
        fsync_dir(out.parent)
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)


def export_jsonl(directory: str | os.PathLike[str], out: str | os.PathLike[str]) -> int:
    """Export one artifact to ``out``; return the number of lines written."""
    out_path = Path(out)
    if os.path.lexists(out_path):
        raise OutputExistsError(f"{out_path} already exists; choose another --out path.")
    records = export_records(directory)
    write_jsonl_atomic(records, out_path)
    return len(records)
