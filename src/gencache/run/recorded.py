"""The run behind an artifact, from the artifact alone: what ``export``, ``audit`` and scripts rebuild from.

::

    from gencache.data.recorded import rebuild_samples
    from gencache.run.recorded import load_recorded_run, load_recorded_tokenizer

    run = load_recorded_run("generation_cache/artifacts/run")   # an artifact, one shard, or a shard base
    run.config, run.generation, run.seed                          # the effective config, generation kwargs, seed
    samples = rebuild_samples(run, load_recorded_tokenizer(run))  # build_samples over the recorded data configs

:func:`load_recorded_run` opens the artifact (every open-time check of the reader; a shard base must be a whole
set of one run), reads the first artifact's ``resolved_config.json`` and checks it (shape, ``resolved_digest``, the
fields it repeats of the manifest) and, by default, the SHA-256 of every recorded local source file: a damaged or
edited record is a :class:`~gencache.core.errors.FormatError` (exit 1), a source file that is gone a
:class:`~gencache.core.errors.DatasetError` and one that changed a
:class:`~gencache.core.errors.SourceChangedError` (both exit 2), each one line naming the file. The
checks, :class:`~gencache.data.recorded.RecordedRun` and :func:`~gencache.data.recorded.rebuild_samples` live in
:mod:`gencache.data.recorded`, which ``DistillationDataset`` uses too; this module opens the artifact for them and
loads the tokenizer the run recorded.
"""

from __future__ import annotations

import os
from typing import Any

from gencache.data.recorded import RecordedRun, run_of_readers


def load_recorded_run(
    path: str | os.PathLike[str],
    *,
    check_sources: bool = True,
    index_cache: str | os.PathLike[str] | bool | None = None,
) -> RecordedRun:
    """The checked record of the run behind ``path`` (an artifact, one shard, or a shard base); with
    ``check_sources`` every recorded local source file is hashed again and must match (``sources_checked``)."""
    return open_recorded_run(path, check_sources=check_sources, index_cache=index_cache)[1]


def open_recorded_run(
    path: str | os.PathLike[str],
    *,
    check_sources: bool = True,
    index_cache: str | os.PathLike[str] | bool | None = None,
) -> tuple[Any, RecordedRun]:
    """The reader of ``path`` (:func:`gencache.open_caches`) and its run's checked record
    (:func:`load_recorded_run`), from one open."""
    from dataclasses import replace

    from gencache.artifact.mixture import MultiCacheReader, open_caches
    from gencache.data.recorded import check_sources as check

    reader = open_caches(path, index_cache=index_cache)
    readers = list(reader.readers) if isinstance(reader, MultiCacheReader) else [reader]
    run = run_of_readers(path, readers)
    if check_sources:
        check(run)
        run = replace(run, sources_checked=True)
    return reader, run


def load_recorded_tokenizer(run: RecordedRun) -> Any:
    """The tokenizer the run recorded (its ``tokenizer_path`` at its ``revision``), prepared as for generation."""
    from gencache.generation.teacher import load_tokenizer

    model = run.config.model
    return load_tokenizer(model.effective_tokenizer_path, revision=model.revision)
