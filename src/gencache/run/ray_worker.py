"""The worker side of a Ray run (:mod:`gencache.run.ray` is the driver's): :class:`ShardWorker`, the teacher
worker that plans the run as the driver did and publishes the shards it is handed; :class:`WorkerSpec`, what it is
created with (and :func:`driver_files`, the driver's config and data sent with it when no shared filesystem is
assumed); :class:`RunTally`, the small actor that counts attempts and progress; :class:`ShardRecord`, the outcome
of one shard."""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gencache.artifact.store import Location, exists
from gencache.config.documents import DEFAULTS_FILENAME
from gencache.core.errors import (
    GencacheError,
    OutputExistsError,
)
from gencache.run.plan import Overrides
from gencache.run.preflight import plan_run

if TYPE_CHECKING:
    from gencache.data.sources import SourceInfo
    from gencache.run.plan import Plan, Target
    from gencache.run.session import TeacherSession

#: Seconds between a worker's progress reports (each is one message to the tally).
REPORT_INTERVAL_S = 0.5


@dataclass(frozen=True)
class ShardRecord:
    """One shard of a Ray run, as its worker returns it: ``published`` here, ``done`` (found published by a dead
    attempt), ``skipped`` (published before this run) or ``failed`` (then ``error`` and ``exit_code``); the worker,
    wall seconds (of which ``load_seconds`` were the worker's checks and teacher load, on its first shard),
    attempts, entries, tokens, and the wall-clock times of its last attempt (seconds since the epoch)."""

    index: int
    output_dir: Location
    status: str
    worker: str | None = None
    seconds: float = 0.0
    attempts: int = 0
    entries: int = 0
    tokens: int = 0
    load_seconds: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    error: str = ""
    exit_code: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "shard": self.index,
            "output_dir": str(self.output_dir),
            "status": self.status,
            "worker": self.worker,
            "seconds": round(self.seconds, 3),
            "attempts": self.attempts,
            "entries": self.entries,
            "tokens": self.tokens,
            "load_seconds": round(self.load_seconds, 3),
            "started_at": round(self.started_at, 3),
            "finished_at": round(self.finished_at, 3),
        }


def driver_files(config_path: str, sources: Iterable[SourceInfo]) -> dict[str, bytes]:
    """The bytes of the config file, its ``_default.json`` and every local data file of ``sources``, by absolute
    path: what the workers read when they may not see the driver's files."""
    defaults = Path(config_path).parent / DEFAULTS_FILENAME
    paths = [config_path, *([str(defaults)] if defaults.is_file() else []), *(p for s in sources for p, _ in s.files)]
    return {path: Path(path).read_bytes() for path in paths}


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker of a run is created with: the config (an absolute path), the overrides, the shard count,
    the driver's working directory (the config's relative paths are relative to it), the absolute location of each
    local data ``source`` the driver sends (by ``source`` as the config names it), what ``resolved_config.json``
    records of the launch, and the name of the run's tally actor."""

    config_path: str
    overrides: Overrides
    shards: int
    working_directory: str
    sources: dict[str, str]
    launch: dict[str, Any]
    tally: str


class ShardWorker:
    """A teacher worker (wrapped with ``ray.remote`` by the driver). Creating it is cheap; the first shard it has
    to generate makes the run's checks and loads the teacher, so that a restarted worker (Ray runs ``__init__``
    again) loads it in the call that retries the dead worker's shard. Every outcome, a failure included, comes
    back as a :class:`ShardRecord`: only the death of the worker's process reaches the driver as Ray's error."""

    def __init__(self, spec: WorkerSpec, files: dict[str, bytes]) -> None:
        import ray

        self.spec, self.files = spec, files
        # By name, not a handle among the arguments: Ray restarts an actor only from arguments held inline.
        self.tally: Any = ray.get_actor(spec.tally)
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.plan: Plan | None = None
        self.session: TeacherSession | None = None
        self.targets: dict[int, Target] = {}

    def pid(self) -> int:
        """This worker's process id, once it runs."""
        return os.getpid()

    def publish(self, index: int) -> ShardRecord:
        """Publish shard ``index`` (or find it published); never raises for the shard's own failure."""
        import ray

        attempt: int = ray.get(self.tally.begin.remote(index))
        started_at, started = time.time(), time.monotonic()
        record = ShardRecord(index, Path(), "failed", self.name, attempts=attempt, started_at=started_at)
        try:
            with self._sent() as config_path:
                plan = self._plan(config_path)
                target = next(t for t in plan.targets if t.shard is not None and t.shard.index == index)
                record = replace(record, output_dir=target.output_dir)
                if exists(target.output_dir):
                    raise OutputExistsError(f"{target.output_dir} exists")
                if self.session is None:
                    self.session = self._checked(plan, config_path)
            if not self.session.loaded:  # this call made the checks; it loads the teacher first
                self.session.load()
                record = replace(record, load_seconds=time.monotonic() - started)
            published = self._publish(self.targets[index], index, attempt)
            record = replace(record, status="published", entries=published.entries, tokens=published.tokens)
        except OutputExistsError:  # published by an earlier attempt (or another attempt's rename won the race)
            from gencache.run.plan import check_published

            assert self.plan is not None, "only the run's checks, after its plan, find an output"
            try:
                check_published(record.output_dir, self.plan.digest)
                record = replace(record, status="done")
            except GencacheError as error:
                record = replace(record, error=str(error), exit_code=error.exit_code)
        except Exception as error:
            code = error.exit_code if isinstance(error, GencacheError) else 1
            record = replace(record, error=str(error) or type(error).__name__, exit_code=code)
        seconds = time.monotonic() - started
        return replace(record, seconds=seconds, finished_at=started_at + seconds)

    @contextlib.contextmanager
    def _sent(self) -> Iterator[str]:
        """The config file to plan with: the driver's, or until the checks are made, its copy among the files the
        driver sent (none on a shared filesystem), written to a temporary directory that the block removes; the
        data sources are read from their copies there (:func:`gencache.data.sources.read_mirrored`)."""
        from gencache.data.sources import mirrored, read_mirrored

        if self.session is not None or not self.files:
            yield self.spec.config_path
            return
        with tempfile.TemporaryDirectory(prefix="gencache-sent-") as temporary:
            root = Path(temporary).resolve()
            for path, data in self.files.items():
                copy = mirrored(root, path)
                copy.parent.mkdir(parents=True, exist_ok=True)
                copy.write_bytes(data)
            with read_mirrored(root, self.spec.sources):
                yield str(mirrored(root, self.spec.config_path))

    def _plan(self, config_path: str) -> Plan:
        """The run's plan (its config read once), as ``--shards N`` in one process plans it, with no launcher's
        ranks (a worker is not one), in the driver's working directory when this node has it (the config's
        relative paths read as the driver's)."""
        if self.plan is None:
            spec = self.spec
            if os.path.isdir(spec.working_directory):
                os.chdir(spec.working_directory)
            self.plan = plan_run(config_path, spec.overrides, None, spec.shards, {}, True)
        return self.plan

    def _publish(self, target: Target, index: int, attempt: int) -> Any:
        from gencache.core.progress import StagedProgress

        assert self.session is not None, "publish opened the session"
        progress = TallyProgress(self.tally, index, attempt)
        try:
            return self.session.publish(target, StagedProgress(progress, len(target.keys)))
        finally:
            progress.close()

    def _checked(self, plan: Plan, config_path: str) -> TeacherSession:
        """The run's checks for the shards not yet published (as ``--shards N`` makes them); the session (recording
        the driver's working directory), whose teacher is not loaded yet."""
        from gencache.run.preflight import preflight
        from gencache.run.session import TeacherSession

        for _ in plan.targets:  # another worker may publish a planned shard meanwhile: plan again without it
            report = preflight(plan, {})
            if not report.problems or any(p.location != "output_dir" for p in report.problems):
                break
            self.plan = None
            plan = self._plan(config_path)
        inputs = report.run_inputs()
        self.targets = {t.shard.index: t for t in inputs.targets if t.shard is not None}
        return TeacherSession(plan, inputs, launch=self.spec.launch, working_directory=self.spec.working_directory)


class RunTally:
    """Attempts per shard and the samples and tokens of each shard's current attempt (a small Ray actor beside the
    workers). A worker calls :meth:`begin` when it takes a shard (an attempt that died is forgotten) and reports
    through :class:`TallyProgress`; the driver reads :meth:`snapshot` while it waits."""

    def __init__(self) -> None:
        self.attempts: dict[int, int] = {}
        self.done: dict[int, tuple[int, int]] = {}

    def begin(self, shard: int) -> int:
        """A worker takes ``shard``: its attempt number (1 for the first), its progress back to zero."""
        self.attempts[shard] = self.attempts.get(shard, 0) + 1
        self.done[shard] = (0, 0)
        return self.attempts[shard]

    def advance(self, shard: int, attempt: int, samples: int, tokens: int) -> None:
        """Add an attempt's progress (a report of an earlier, dead attempt is dropped)."""
        if self.attempts.get(shard) == attempt:
            old_samples, old_tokens = self.done[shard]
            self.done[shard] = (old_samples + samples, old_tokens + tokens)

    def snapshot(self) -> tuple[int, int, dict[int, int]]:
        """Samples and tokens generated by the current attempts, and every shard's attempts so far."""
        return sum(s for s, _ in self.done.values()), sum(t for _, t in self.done.values()), dict(self.attempts)


class TallyProgress:
    """The engine's progress inside a worker: samples and tokens sent to the tally every
    :data:`REPORT_INTERVAL_S` seconds (fire and forget) and at :meth:`close`."""

    def __init__(self, tally: Any, shard: int, attempt: int) -> None:
        self.tally, self.shard, self.attempt = tally, shard, attempt
        self.samples = self.tokens = 0
        self.sent = time.monotonic()

    def start(self, total_samples: int) -> None:
        """Nothing to do: the driver knows every shard's size."""

    def advance(self, samples: int, tokens: int) -> None:
        self.samples += samples
        self.tokens += tokens
        if time.monotonic() - self.sent >= REPORT_INTERVAL_S:
            self.flush()

    def flush(self) -> Any:
        """Send what is not sent yet; the message's reference (None when there was nothing to send)."""
        sent = None
        if self.samples or self.tokens:
            sent = self.tally.advance.remote(self.shard, self.attempt, self.samples, self.tokens)
            self.samples = self.tokens = 0
        self.sent = time.monotonic()
        return sent

    def close(self) -> None:
        """Send the rest and wait until the tally has it, so the driver's next snapshot counts the whole shard."""
        import ray

        sent = self.flush()
        if sent is not None:
            ray.get(sent)
