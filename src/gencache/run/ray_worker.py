"""A teacher worker of a Ray run: a Ray actor that loads the teacher once and publishes shard after shard.

Ray creates it (and creates it again when its process dies); :meth:`ShardWorker.publish` is the one call the
driver's actor pool makes. On its first call a worker reads the run's plan (:func:`gencache.run.preflight.plan_run`,
as ``--shards N`` in one process does); on the first shard it has to generate it makes the run's checks for the
shards not yet published (:func:`gencache.run.preflight.preflight`) and loads the teacher into a
:class:`gencache.run.session.TeacherSession`; each call then publishes one shard with it. A shard already
published and verified (by an earlier attempt that died after its rename, or by a rerun's predecessor) is reported
done, never generated twice. Every outcome, a failure included, comes back as a
:class:`ShardOutcome` value: only the death of the worker's process reaches the driver as Ray's error.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gencache.core.errors import GencacheError, GenerationError, OutputExistsError

if TYPE_CHECKING:
    from gencache.run.overrides import Overrides
    from gencache.run.preflight import Plan, Target
    from gencache.run.session import TeacherSession


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker of a run is created with: the config (an absolute path), the overrides, the shard count,
    the driver's working directory (the config's relative paths are relative to it), what ``resolved_config.json``
    records of the launch, and the name of the run's tally actor."""

    config_path: str
    overrides: Overrides
    shards: int
    working_directory: str
    launch: dict[str, Any]
    tally: str


@dataclass(frozen=True)
class ShardOutcome:
    """What one :meth:`ShardWorker.publish` call did: ``status`` is ``published``, ``done`` (found published) or
    ``failed`` (then ``error``, ``error_type`` and ``exit_code`` say why); wall seconds, the part of them spent
    on the checks and the teacher's load (a worker's first call), and the wall-clock times (seconds since the
    epoch) it started and finished."""

    index: int
    status: str
    worker: str
    attempt: int
    output_dir: str
    seconds: float = 0.0
    entries: int = 0
    tokens: int = 0
    error: str = ""
    error_type: str = ""
    exit_code: int = 0
    load_seconds: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0


class _Call:
    """One :meth:`ShardWorker.publish` call: when it started, and the outcome it ends with."""

    def __init__(self, index: int, worker: str, attempt: int) -> None:
        self.index, self.worker, self.attempt = index, worker, attempt
        self.output = ""
        self.loaded = 0.0
        self.started_at, self.started = time.time(), time.monotonic()

    def outcome(self, status: str, entries: int = 0, tokens: int = 0, **failure: Any) -> ShardOutcome:
        seconds = time.monotonic() - self.started
        return ShardOutcome(
            self.index,
            status,
            self.worker,
            self.attempt,
            self.output,
            seconds,
            entries,
            tokens,
            load_seconds=self.loaded,
            started_at=self.started_at,
            finished_at=self.started_at + seconds,
            **failure,
        )

    def failed(self, error: Exception) -> ShardOutcome:
        return self.outcome(
            "failed",
            error=str(error) or type(error).__name__,
            error_type=type(error).__name__,
            exit_code=error.exit_code if isinstance(error, GencacheError) else 1,
        )


class ShardWorker:
    """The actor (wrapped with ``ray.remote`` by the driver). Creating it is cheap; the first :meth:`publish` call
    makes the checks and loads the teacher, so that a restarted worker (Ray runs ``__init__`` again) loads it in
    the call that retries the dead worker's shard."""

    def __init__(self, spec: WorkerSpec) -> None:
        import ray

        self.spec = spec
        # By name, not a handle among the arguments: Ray restarts an actor only from arguments held inline.
        self.tally: Any = ray.get_actor(spec.tally)
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.plan: Plan | None = None
        self.session: TeacherSession | None = None
        self.targets: dict[int, Target] = {}

    def pid(self) -> int:
        """This worker's process id (the crash tests kill it)."""
        return os.getpid()

    def publish(self, index: int) -> ShardOutcome:
        """Publish shard ``index`` (or find it published); never raises for the shard's own failure."""
        import ray

        attempt: int = ray.get(self.tally.begin.remote(index))
        call = _Call(index, self.name, attempt)
        try:
            target = self._target(index)
            call.output = str(target.output_dir)
            if os.path.lexists(target.output_dir):
                return self._found(call)
            if self.session is None:  # this call makes the checks and loads the teacher first
                self.session = self._open()
                call.loaded = time.monotonic() - call.started
            published = self._publish(self.targets[index], index, call.attempt)
        except OutputExistsError:  # another attempt's rename won the race (the no-replace publish refused ours)
            return self._found(call)
        except Exception as error:
            return call.failed(error)
        return call.outcome("published", published.entries, published.tokens)

    def _found(self, call: _Call) -> ShardOutcome:
        """The shard is published already: it must verify and be of this run (else a failure, as for a rerun)."""
        from gencache.run.preflight import check_published

        try:
            check_published(Path(call.output), self._plan().digest)
        except GencacheError as error:
            return call.failed(error)
        return call.outcome("done")

    def _publish(self, target: Target, index: int, attempt: int) -> Any:
        from gencache.core.progress import StagedProgress
        from gencache.run.ray_progress import TallyProgress

        assert self.session is not None, "publish opened the session"
        progress = TallyProgress(self.tally, index, attempt)
        try:
            return self.session.publish(target, StagedProgress(progress, len(target.keys)))
        finally:
            progress.close()

    def _plan(self) -> Plan:
        """The run's plan (its config read once): as ``--shards N`` in one process, with no launcher's ranks (a
        worker is not one)."""
        if self.plan is None:
            from gencache.run.preflight import plan_run

            spec = self.spec
            if os.path.isdir(spec.working_directory):  # the worker's own process: relative paths read as the driver's
                os.chdir(spec.working_directory)
            self.plan = plan_run(spec.config_path, spec.overrides, None, spec.shards, {}, True)
        return self.plan

    def _target(self, index: int) -> Target:
        """Shard ``index``'s target in the run's plan."""
        for target in self._plan().targets:
            if target.shard is not None and target.shard.index == index:
                return target
        raise GenerationError(f"shard {index} is not one of this run's {self.spec.shards} shards.")

    def _open(self) -> TeacherSession:
        """The run's checks for the shards not yet published, and the teacher loaded (as ``--shards N`` does)."""
        from gencache.run.preflight import preflight
        from gencache.run.session import TeacherSession

        plan = self._plan()
        inputs = preflight(plan, {}).run_inputs()
        self.targets = {t.shard.index: t for t in inputs.targets if t.shard is not None}
        session = TeacherSession(plan, inputs, launch=self.spec.launch)
        session.load()
        return session
