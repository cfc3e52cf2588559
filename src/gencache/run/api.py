"""The Python API of ``gencache generate``: :func:`generate` runs exactly what the command runs and returns values.

The command line is a thin layer over it (it adds rendering and exit codes); a notebook or a training script calls
it directly and gets the published path, or the dry run's report, and gencache's errors as exceptions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from gencache.core.errors import ConfigError

if TYPE_CHECKING:
    from gencache.run.pipeline import DryRun, Notify, ProgressFactory

Settings = Mapping[str, Any] | Sequence[str]


def _sets(overrides: Settings | None) -> tuple[str, ...]:
    """``overrides`` as ``--set`` texts: a mapping of dotted paths to Python values (JSON-encoded), or the texts."""
    if overrides is None:
        return ()
    if isinstance(overrides, str):
        raise ConfigError("overrides must be a mapping of dotted paths to values or a list of 'PATH=VALUE' texts.")
    if isinstance(overrides, Mapping):
        texts = []
        for path, value in overrides.items():
            try:
                texts.append(f"{path}={json.dumps(value)}")
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"overrides[{path!r}] is not a JSON value: {exc}") from None
        return tuple(texts)
    return tuple(str(text) for text in overrides)


@overload
def generate(
    config: str | os.PathLike[str],
    *,
    overrides: Settings | None = ...,
    output_dir: str | os.PathLike[str] | None = ...,
    limit: int | None = ...,
    shard: str | None = ...,
    shards: int | None = ...,
    skip_published: bool = ...,
    dry_run: Literal[False] = ...,
    show_prompt: None = ...,
    env: Mapping[str, str] | None = ...,
    notify: Notify | None = ...,
    progress: ProgressFactory | None = ...,
    ray: str | bool | None = ...,
    workers: int | None = ...,
    worker_gpus: float = ...,
    max_retries: int = ...,
) -> Path: ...


@overload
def generate(
    config: str | os.PathLike[str],
    *,
    overrides: Settings | None = ...,
    output_dir: str | os.PathLike[str] | None = ...,
    limit: int | None = ...,
    shard: str | None = ...,
    shards: int | None = ...,
    skip_published: bool = ...,
    dry_run: Literal[True],
    show_prompt: int | None = ...,
    env: Mapping[str, str] | None = ...,
    notify: Notify | None = ...,
    progress: ProgressFactory | None = ...,
    ray: str | bool | None = ...,
    workers: int | None = ...,
    worker_gpus: float = ...,
    max_retries: int = ...,
) -> DryRun: ...


@overload
def generate(
    config: str | os.PathLike[str],
    *,
    overrides: Settings | None = ...,
    output_dir: str | os.PathLike[str] | None = ...,
    limit: int | None = ...,
    shard: str | None = ...,
    shards: int | None = ...,
    skip_published: bool = ...,
    dry_run: bool,
    show_prompt: int | None = ...,
    env: Mapping[str, str] | None = ...,
    notify: Notify | None = ...,
    progress: ProgressFactory | None = ...,
    ray: str | bool | None = ...,
    workers: int | None = ...,
    worker_gpus: float = ...,
    max_retries: int = ...,
) -> Path | DryRun: ...


def generate(
    config: str | os.PathLike[str],
    *,
    overrides: Settings | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    limit: int | None = None,
    shard: str | None = None,
    shards: int | None = None,
    skip_published: bool = False,
    dry_run: bool = False,
    show_prompt: int | None = None,
    env: Mapping[str, str] | None = None,
    notify: Notify | None = None,
    progress: ProgressFactory | None = None,
    ray: str | bool | None = None,
    workers: int | None = None,
    worker_gpus: float = 1.0,
    max_retries: int = 3,
) -> Path | DryRun:
    """Check, generate and publish the artifact of the config file ``config``, as ``gencache generate`` does.

    ``overrides`` (``--set``) is a mapping of dotted config paths to values, such as
    ``{"model.generation_kwargs.max_new_tokens": 64}``, or a list of ``"PATH=VALUE"`` texts; ``output_dir`` and
    ``limit`` are ``--output-dir`` and ``--limit``. ``shard="I/N"`` generates one shard (under torchrun or SLURM the
    rank's shard is used, read from ``env``, by default the process environment); ``shards=N`` generates all N here
    with one model load, skipping shards already published by the same run; ``skip_published`` accepts an output
    that is already published, verifies and belongs to this run.

    Returns the published directory: the artifact, the shard's directory with ``shard``, or with ``shards`` the
    unsuffixed ``output_dir`` that :func:`gencache.open_caches`, ``inspect`` and ``verify`` read as the whole set.
    With ``dry_run=True`` nothing loads or is written: the :class:`~gencache.run.pipeline.DryRun` report comes back
    (``report.preflight.errors`` lists every problem found, ``report.exit_code`` is the command's exit code;
    ``show_prompt=N`` adds sample N's rendered prompt as ``report.prompt``). Errors are raised as
    :class:`gencache.GencacheError` subclasses; nothing is printed. ``notify(level, text)`` receives the run's
    messages and ``progress(total)`` makes a :class:`gencache.core.progress.Progress` for it.

    ``ray`` runs the shards on a Ray cluster (``gencache generate --ray``, :mod:`gencache.run.ray`):
    ``True`` is ``RAY_ADDRESS`` or a local Ray instance, a string an address (``HOST:PORT``, ``ray://HOST:PORT``),
    ``"auto"`` or ``"local"``; ``shards`` defaults to the count of a split already at ``output_dir``, else eight
    per worker (fewer when some shard would own no key); ``workers`` caps the pool, ``worker_gpus`` is each
    worker's share of a GPU and ``max_retries`` bounds how often a dead worker's shard is generated again.
    It returns the unsuffixed ``output_dir`` of the shard base.
    """
    from gencache.run.overrides import Overrides
    from gencache.run.pipeline import generate_run

    if show_prompt is not None and not dry_run:
        raise ConfigError("show_prompt needs dry_run=True (the rendered prompt is part of the dry run's report).")
    sets = Overrides(
        sets=_sets(overrides), output_dir=None if output_dir is None else os.fspath(output_dir), limit=limit
    )
    if ray is not None and ray is not False:
        from gencache.run.ray import RayOptions, generate_on_ray

        if dry_run:
            raise ConfigError("--dry-run makes the same checks with or without --ray; drop --ray for the dry run.")
        options = RayOptions(None if ray is True else str(ray), shards, workers, worker_gpus, max_retries)
        run = generate_on_ray(config, options, shard=shard, overrides=sets, env=env, notify=notify, progress=progress)
        return run.output_dir
    result = generate_run(
        config,
        shard=shard,
        shards=shards,
        skip_published=skip_published,
        dry_run=dry_run,
        overrides=sets,
        show_prompt=show_prompt,
        env=env,
        notify=notify,
        progress=progress,
    )
    if result.dry_run is not None:
        return result.dry_run
    return result.output_dir
