"""The Python API of ``gencache generate``: :func:`generate` runs exactly what the command runs and returns the
published path; :func:`dry_run` makes the same checks and returns their report. Nothing is printed here: messages go
to the caller's ``notify`` and progress to the caller's ``progress`` factory.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gencache.artifact.store import Location
from gencache.core.errors import ConfigError, Stopped, StoppedRun
from gencache.core.progress import Notify, ProgressFactory, StagedProgress
from gencache.run.plan import Overrides
from gencache.run.preflight import Preflight, plan_run, preflight
from gencache.run.ray import RayOptions, generate_on_ray

Settings = Mapping[str, Any] | Sequence[str]
PathLike = str | os.PathLike[str]


def _overrides(overrides: Settings | None, output_dir: PathLike | None, limit: int | None) -> Overrides:
    if isinstance(overrides, str):
        raise ConfigError("overrides must be a mapping of dotted paths to values or a list of 'PATH=VALUE' texts.")
    texts = []
    if isinstance(overrides, Mapping):
        for path, value in overrides.items():
            try:
                texts.append(f"{path}={json.dumps(value)}")
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"overrides[{path!r}] is not a JSON value: {exc}") from None
    else:
        texts = [str(text) for text in overrides or ()]
    return Overrides(tuple(texts), None if output_dir is None else os.fspath(output_dir), limit)


def dry_run(
    config: PathLike,
    *,
    overrides: Settings | None = None,
    output_dir: PathLike | None = None,
    limit: int | None = None,
    shard: str | None = None,
    shards: int | None = None,
    skip_published: bool = False,
    show_prompt: int | None = None,
    check_output: bool = True,
    env: Mapping[str, str] | None = None,
) -> Preflight:
    """Make every check :func:`generate` makes with the same arguments, loading and writing nothing, and return
    the report (``report.errors``, ``report.exit_code``). ``show_prompt=N`` adds sample N's rendered prompt as
    ``report.prompt``; ``check_output=False`` leaves the output path unchecked. A problem of the config itself is
    raised, as :func:`generate` raises it."""
    changes = _overrides(overrides, output_dir, limit)
    plan = plan_run(config, changes, shard, shards, env, skip_published or shards is not None)
    return preflight(plan, env, show_prompt, check_output=check_output)


def generate(
    config: PathLike,
    *,
    overrides: Settings | None = None,
    output_dir: PathLike | None = None,
    limit: int | None = None,
    shard: str | None = None,
    shards: int | None = None,
    skip_published: bool = False,
    ray: RayOptions | str | bool | None = None,
    env: Mapping[str, str] | None = None,
    notify: Notify | None = None,
    progress: ProgressFactory | None = None,
) -> Location:
    """Check, generate and publish the artifact of the config file ``config``, as ``gencache generate`` does.

    ``overrides`` (``--set``) maps dotted config paths to values (``{"model.generation_kwargs.max_new_tokens": 64}``)
    or is a list of ``"PATH=VALUE"`` texts; ``output_dir`` and ``limit`` are ``--output-dir`` and ``--limit``.
    ``shard="I/N"`` generates one shard (under torchrun or SLURM the rank's, read from ``env``); ``shards=N`` all N
    with one model load, skipping those the same run already published; ``skip_published`` accepts an output this
    run already published. ``ray`` runs the shards on a Ray cluster: ``True`` (``RAY_ADDRESS`` or a local Ray), an
    address, or a :class:`~gencache.run.ray.RayOptions`.

    Returns the published directory: the artifact, the shard's directory, or the unsuffixed ``output_dir`` of a
    shard set. Every problem found before the weights load is raised at once (:class:`gencache.InputProblems` for
    several). ``notify(level, text)`` receives the run's messages and ``progress(total)`` makes a progress for it.
    """
    changes = _overrides(overrides, output_dir, limit)
    say: Notify = notify or (lambda level, text: None)  # library callers get results, not output
    if ray is not None and ray is not False:
        pool = ray if isinstance(ray, RayOptions) else RayOptions(None if ray is True else str(ray))
        pool = pool if shards is None else replace(pool, shards=shards)
        on_ray = generate_on_ray(config, pool, shard=shard, overrides=changes, env=env, notify=say, progress=progress)
        return on_ray.output_dir
    say("status", f"checking {os.fspath(config)}: the config, the data, the tokenizer and the teacher's files")
    plan = plan_run(config, changes, shard, shards, env, skip_published or shards is not None)
    published: list[Location] = []
    current: Location | None = None
    started = False
    try:
        found = preflight(plan, env)
        for path in plan.published:
            say("info", f"already published and verified: {path}")
        if not plan.pending:
            return plan.output_dir
        session = found.run_session()
        pending, samples, setup = session.targets, session.samples, plan.config
        if conflicts := len(samples.conflicting_prompts):  # another template or rendering option
            say("warning", f"{conflicts} duplicated keys rendered different prompts; each key's first is generated.")
        total = sum(len(t.keys) for t in pending)
        say(
            "info",
            f"{total} unique samples to generate ({samples.duplicates} duplicates skipped"
            f"{f', {len(pending)} shards' if len(pending) > 1 else ''}), max_new_tokens "
            f"{session.generation.max_new_tokens}, engine {setup.engine}"
            f"{f', batch size {setup.gen_batch_size}' if setup.engine == 'transformers' else ''}, "
            f"device {session.device}",
        )
        session.engine.import_libraries()  # the load below is timed alone, without the imports
        say("status", f"loading the teacher {setup.model.model_path}")
        loading = time.monotonic()
        session.engine.load_weights()

        def loaded() -> None:
            say("info", f"teacher loaded in {_seconds(time.monotonic() - loading)}")

        started = True
        bar = _LoadedOnStart(progress(total) if progress else None, total)
        if session.engine.loads_with_prompts:  # vLLM on a CPU builds its model with the prompts
            say("info", f"{setup.engine} loads the teacher with the first prompts (it sizes its cache from them)")
            bar.loaded = loaded
        else:
            loaded()
        with contextlib.closing(bar):
            for target in pending:
                if target.shard is not None:  # zero-based, as in --shard I/N and the shard directory names
                    where = f"shard {target.shard.index}/{target.shard.count}"
                    bar.stage(where)
                    if not target.keys:  # still published (empty), so the set of shards is complete
                        say("warning", f"{where} owns none of the keys; publishing it empty")
                current = target.output_dir
                done = session.publish(target, bar, on_published=published.append)
                if target is pending[-1]:  # the bar's final line comes before the last word
                    bar.close()
                say(
                    "info",
                    f"published {target.output_dir} ({done.entries} entries, {done.tokens} tokens, "
                    f"{_seconds(done.seconds)}, rename: {done.rename_mode})",
                )
    except Stopped as stop:  # the caller's signal handlers raised it: say what is on disk
        generating = None if current is None or current in published else str(current)
        remaining = started and len(published) < len(plan.pending)
        stop.run = StoppedRun(tuple(map(str, published)), generating, started=started, remaining=remaining)
        raise
    return plan.output_dir


def _seconds(value: float) -> str:
    """A duration for a message: milliseconds under a second (a tiny teacher loads in 40 ms, not "0.0s")."""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f}s"


class _LoadedOnStart(StagedProgress):
    """The run's progress; its first ``start`` calls ``loaded`` (for an engine that loads with the first prompts)."""

    loaded: Callable[[], None] | None = None

    def start(self, total_samples: int) -> None:
        if self.loaded is not None and not self.started:
            self.loaded()
        super().start(total_samples)
