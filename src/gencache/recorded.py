"""The run behind an artifact, from the artifact alone: what ``export``, ``audit`` and scripts rebuild from.

::

    from gencache.recorded import load_recorded_run, load_recorded_tokenizer, rebuild_samples

    run = load_recorded_run("generation_cache/artifacts/run")   # an artifact, one shard, or a shard base
    run.config, run.generation, run.seed                          # the effective config, generation kwargs, seed
    samples = rebuild_samples(run, load_recorded_tokenizer(run))  # build_samples over the recorded data configs

:func:`load_recorded_run` opens the artifact (every open-time check of the reader; a shard base must be a whole
set of one run), reads the first artifact's ``resolved_config.json`` and checks it (shape, ``resolved_digest``, the
fields it repeats of the manifest) and, by default, the SHA-256 of every recorded local source file: a damaged or
edited record is a :class:`~gencache.errors.FormatError` (exit 1), a source file that is gone a
:class:`~gencache.errors.DatasetError` and one that changed a :class:`~gencache.errors.SourceChangedError` (both
exit 2), each one line naming the file. The checks themselves live in :mod:`gencache.data.recorded`, which
``DistillationDataset`` uses too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gencache.data.recorded import RecordedRun, check_resolved, check_sources, rebuild_samples, recorded_run

if TYPE_CHECKING:
    from gencache.artifact.reader import CacheReader

__all__ = [
    "RecordedRun",
    "check_sources",
    "checked_resolved_config",
    "load_recorded_run",
    "load_recorded_tokenizer",
    "rebuild_samples",
    "run_of_readers",
]


def checked_resolved_config(reader: CacheReader) -> dict[str, Any]:
    """The ``resolved_config.json`` of an opened artifact after the checks ``gencache verify`` makes of it (shape,
    ``resolved_digest`` when recorded, the fields it repeats of the manifest): a :class:`FormatError` naming the
    file otherwise. Use it for provenance values; :func:`run_of_readers` also requires the digest and a config."""
    from gencache.artifact.names import RESOLVED_NAME
    from gencache.artifact.reader import read_resolved_config

    resolved = read_resolved_config(reader.path)
    check_resolved(
        resolved,
        resolved_path=reader.path / RESOLVED_NAME,
        provenance=reader.provenance,
        shard_record=reader.summary.get("shard"),
        require_digest=False,
    )
    return resolved


def run_of_readers(path: str | os.PathLike[str], readers: Sequence[CacheReader]) -> RecordedRun:
    """The checked :class:`RecordedRun` of already opened ``readers`` (an artifact, or shards of one run) that
    ``path`` stands for; the sources are not hashed (see :func:`check_sources`)."""
    from gencache.artifact.names import RESOLVED_NAME
    from gencache.artifact.reader import read_resolved_config

    first = readers[0]
    return recorded_run(
        read_resolved_config(first.path),
        resolved_path=first.path / RESOLVED_NAME,
        provenance=first.provenance,
        shard_records=[reader.summary.get("shard") for reader in readers],
        path=Path(os.path.abspath(os.path.expanduser(path))),
        paths=tuple(reader.path for reader in readers),
    )


def load_recorded_run(
    path: str | os.PathLike[str],
    *,
    check_sources: bool = True,
    index_cache: str | os.PathLike[str] | bool | None = None,
) -> RecordedRun:
    """The checked record of the run behind ``path`` (an artifact, one shard, or a shard base); with
    ``check_sources`` every recorded local source file is hashed again and must match (``sources_checked``)."""
    from dataclasses import replace

    from gencache.artifact.mixture import MultiCacheReader, open_caches
    from gencache.data.recorded import check_sources as check

    reader = open_caches(path, index_cache=index_cache)
    readers = list(reader.readers) if isinstance(reader, MultiCacheReader) else [reader]
    run = run_of_readers(path, readers)
    if check_sources:
        check(run)
        run = replace(run, sources_checked=True)
    return run


def load_recorded_tokenizer(run: RecordedRun) -> Any:
    """The tokenizer the run recorded (its ``tokenizer_path`` at its ``revision``), prepared as for generation."""
    from gencache.generation.teacher import load_tokenizer

    model = run.config.model
    return load_tokenizer(model.effective_tokenizer_path, revision=model.revision)
