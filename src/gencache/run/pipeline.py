"""One generation run: config -> every model-free check -> teacher -> writer -> publish, one shard after another.

:func:`gencache.run.checks.preflight` makes every check that needs no weights (the same code path for ``--dry-run``),
so a bad run fails in seconds. ``--shards N`` runs all N shards in this one process with one model load and
publishes each shard as soon as it is done; a rerun after a crash skips the shards that are published, verify and
belong to the same run, and generates the rest. Nothing is printed here: messages go to the caller's ``notify``
and progress to the caller's ``progress`` factory; the CLI renders the results.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gencache.core.errors import Stopped, StoppedRun
from gencache.run.overrides import Overrides, name_origins
from gencache.run.session import TeacherSession
from gencache.run.sharding import Target
from gencache.run.targets import plan_run

if TYPE_CHECKING:
    from gencache.config import CacheConfig
    from gencache.core.progress import Progress, StagedProgress
    from gencache.data.samples import Sample, SampleSet
    from gencache.run.findings import Preflight, RunInputs

#: ``notify(level, text)``: ``level`` is ``"info"``, ``"warning"`` or ``"status"`` (what the run is doing while a
#: slow step runs: checking, loading the teacher; the command line shows it on a terminal only).
Notify = Callable[[str, str], None]
#: ``progress(total_samples)``: a :class:`gencache.core.progress.Progress` for the whole run.
ProgressFactory = Callable[[int], "Progress"]


def _quiet(level: str, text: str) -> None:
    """The default ``notify``: library callers get results, not output."""


@dataclass
class DryRun:
    """What ``--dry-run`` found: the checks (with every problem), the plan and an optional rendered prompt."""

    preflight: Preflight
    output_dir: Path
    published: list[Path]
    prompt: Sample | None = None
    prompt_index: int | None = None

    @property
    def targets(self) -> list[Target]:
        """What the run would publish, each with the keys it owns (the checks selected them)."""
        return self.preflight.targets

    @property
    def exit_code(self) -> int:
        return self.preflight.exit_code


@dataclass
class RunResult:
    """What a run did: the directories it published, those it found already published, and the totals."""

    output_dir: Path
    published: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    entries: int = 0
    tokens: int = 0
    seconds: float = 0.0
    dry_run: DryRun | None = None


def generate_run(
    config_path: str | os.PathLike[str],
    *,
    shard: str | None = None,
    shards: int | None = None,
    skip_published: bool = False,
    dry_run: bool = False,
    overrides: Overrides | None = None,
    show_prompt: int | None = None,
    env: Mapping[str, str] | None = None,
    notify: Notify | None = None,
    progress: ProgressFactory | None = None,
) -> RunResult:
    """Check, generate and publish the artifact(s) of ``config_path`` (see the module docstring).

    ``shard`` is ``"I/N"`` (one shard; under torchrun/SLURM the rank's shard is used), ``shards`` runs all N
    shards here; either way, with ``skip_published`` (always with ``shards``) an output that is already published,
    verifies and belongs to this run is skipped. ``dry_run`` returns the checks' findings without loading weights;
    ``show_prompt`` picks the sample (zero-based, in run order) whose rendered prompt the dry run returns. Every
    problem found before the weights load is raised at once (:class:`gencache.core.errors.InputProblems` for several).
    Nothing is printed: messages go to ``notify``, gencache's warnings are Python warnings. The call leaves the
    process as it found it (signal handlers, environment, global random generators, logging, other modules).
    """
    return _generate_run(
        config_path,
        shard=shard,
        shards=shards,
        skip=skip_published or shards is not None,
        dry_run=dry_run,
        overrides=overrides or Overrides(),
        show_prompt=show_prompt,
        env=env,
        say=notify or _quiet,
        progress=progress,
    )


def _generate_run(
    config_path: str | os.PathLike[str],
    *,
    shard: str | None,
    shards: int | None,
    skip: bool,
    dry_run: bool,
    overrides: Overrides,
    show_prompt: int | None,
    env: Mapping[str, str] | None,
    say: Notify,
    progress: ProgressFactory | None,
) -> RunResult:
    from gencache.run.checks import preflight

    if not dry_run:  # the dry run's report is its output; a run says something before its first slow step
        say("status", f"checking {os.fspath(config_path)}: the config, the data, the tokenizer and the teacher's files")
    plan = plan_run(config_path, overrides, shard, shards, env, skip)
    targets, pending, published = plan.targets, plan.pending, plan.published
    single = targets[0].shard
    base = plan.base
    result = RunResult(output_dir=base if shards is not None else targets[0].output_dir, skipped=published)
    run = _Run(plan.config, plan.config_json, plan.digest, overrides, say, progress, result)
    try:
        found = preflight(plan.config, pending, single, env, show_prompt if dry_run else None)
        found.problems = name_origins(found.problems, plan.applied)
        pending = found.targets  # with their keys, once the samples are built
        if dry_run:
            output = base if shards is not None or single is None else targets[0].output_dir
            report = DryRun(found, output, published)
            if show_prompt is not None:
                report.prompt_index = show_prompt
                report.prompt = _nth_sample(found.samples, show_prompt)
            result.dry_run = report
            return result
        for path in published:
            say("info", f"already published and verified: {path}")
        if not pending:
            return result
        inputs = found.run_inputs()
        if inputs.samples.conflicting_prompts:
            say(
                "warning",
                f"{len(inputs.samples.conflicting_prompts)} duplicated keys rendered different prompts (another "
                "template or rendering option); the first occurrence's prompt is generated for all.",
            )
        run.execute(inputs, pending)
    except Stopped as stop:  # the caller's signal handlers raised it: say what is on disk
        stop.run = run.stopped()
        raise
    return result


def _seconds(value: float) -> str:
    """A duration for a message: milliseconds under a second (a tiny teacher loads in 40 ms, not "0.0s")."""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f}s"


def _nth_sample(samples: SampleSet | None, index: int) -> Sample | None:
    from gencache.core.errors import ConfigError

    if samples is None:
        return None
    if not 0 <= index < len(samples):
        raise ConfigError(
            f"--show-prompt {index} is out of range: the run has {len(samples)} samples (0..{len(samples) - 1})."
        )
    return samples[index]


class _LoadedOnStart:
    """The run's progress; for an engine that builds its model with the first prompts, its first ``start`` (which
    the engine calls once the model is built) says the teacher loaded, so that the message follows the load."""

    def __init__(self, inner: StagedProgress, loaded: Callable[[], None] | None) -> None:
        self.inner = inner
        self.loaded = loaded

    def stage(self, label: str) -> None:
        self.inner.stage(label)

    def start(self, total_samples: int) -> None:
        if self.loaded is not None:
            announce, self.loaded = self.loaded, None
            announce()
        self.inner.start(total_samples)

    def advance(self, samples: int, tokens: int) -> None:
        self.inner.advance(samples, tokens)

    def close(self) -> None:
        self.inner.close()


class _Run:
    """The weights-loading part of a run: one model load, then each pending target in turn."""

    def __init__(
        self,
        config: CacheConfig,
        config_json: dict[str, Any],
        digest: str,
        overrides: Overrides,
        say: Notify,
        progress: ProgressFactory | None,
        result: RunResult,
    ) -> None:
        self.config, self.config_json, self.digest = config, config_json, digest
        self.session: TeacherSession | None = None
        self.overrides, self.say, self.progress, self.result = overrides, say, progress, result
        self.current: Path | None = None
        self.target_count = 0
        self.started = False

    def execute(self, inputs: RunInputs, pending: Sequence[Target]) -> None:
        from gencache.core.progress import StagedProgress

        config = self.config
        total = sum(len(t.keys) for t in pending)
        self.target_count = len(pending)
        self.say(
            "info",
            f"{total} unique samples to generate ({inputs.samples.duplicates} duplicates skipped"
            f"{f', {len(pending)} shards' if len(pending) > 1 else ''}), max_new_tokens "
            f"{inputs.generation.max_new_tokens}, engine {config.engine}"
            f"{f', batch size {config.gen_batch_size}' if config.engine == 'transformers' else ''}, "
            f"device {inputs.device}",
        )
        inputs.engine.import_libraries()  # the load below is timed alone, without the imports
        self.say("status", f"loading the teacher {config.model.model_path}")
        started = time.monotonic()
        self.session = TeacherSession(config, self.config_json, self.digest, self.overrides, inputs)
        self.session.load()

        def loaded() -> None:
            self.say("info", f"teacher loaded in {_seconds(time.monotonic() - started)}")

        deferred = self.session.loads_with_first_prompts  # vLLM on a CPU builds its model with the prompts
        if deferred:
            self.say("info", f"{config.engine} loads the teacher with the first prompts (it sizes its cache from them)")
        else:
            loaded()
        self.started = True
        staged = StagedProgress(self.progress(total) if self.progress is not None else None, total)
        bar = _LoadedOnStart(staged, loaded if deferred else None)
        try:
            for position, target in enumerate(pending):
                if target.shard is not None:  # zero-based, as in --shard I/N and the shard directory names
                    bar.stage(f"shard {target.shard.index}/{target.shard.count}")
                    if not target.keys:  # still published (empty), so the set of shards is complete
                        self.say(
                            "warning",
                            f"shard {target.shard.index}/{target.shard.count} owns none of the keys; publishing it "
                            "empty",
                        )
                self._one(target, bar, last=position == len(pending) - 1)
        finally:
            bar.close()
        self.result.seconds = time.monotonic() - started

    def _one(self, target: Target, bar: _LoadedOnStart, *, last: bool) -> None:
        assert self.session is not None, "execute makes the session before each target"
        self.current = target.output_dir
        done = self.session.publish(target, bar, on_published=self._published)
        self.result.entries += done.entries
        self.result.tokens += done.tokens
        if last:  # the bar's final line comes before the last word
            bar.close()
        self.say(
            "info",
            f"published {target.output_dir} ({done.entries} entries, {done.tokens} tokens, "
            f"{_seconds(done.seconds)}, rename: {done.rename_mode})",
        )

    def _published(self, path: Path) -> None:
        self.result.published.append(path)
        self.current = None

    def stopped(self) -> StoppedRun:
        """Where the run stands, for the line of a stop that interrupts it."""
        published = tuple(str(path) for path in self.result.published)
        return StoppedRun(
            published=published,
            generating=None if self.current is None else str(self.current),
            started=self.started,
            remaining=self.started and len(published) < self.target_count,
        )
