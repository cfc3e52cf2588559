"""``generate --ray``: one run's shards handed to a pool of teacher workers on a Ray cluster.

The driver makes the refusals and the model-free checks of phase 1 (:mod:`gencache.run.preflight`) before any worker
starts, connects (:mod:`gencache.run.ray_cluster`), fixes the shard count (``--shards N``; else the count of a shard
base already started at ``output_dir``; else :data:`~gencache.run.ray_cluster.SHARDS_PER_WORKER` per worker, at
most one per unique key), and creates the workers (:class:`gencache.run.ray_worker.ShardWorker`, one per GPU by
default) with Ray's own restart and retry: a worker whose process dies is created again and the call it was
running, its shard, is made again, at most ``max_retries`` times. Ray's :class:`ray.util.ActorPool` hands each shard
to whichever worker is free; nothing here assigns or schedules. Each worker publishes its shards itself, with the
atomic publish of one process, to the output path every node reaches; the driver verifies each published shard and
its ``run_digest``, shows one progress display (:mod:`gencache.run.ray_progress`) and returns a :class:`RayRun`
with a record per shard. The shards already published by the same run are skipped, as ``--shards N`` skips them,
so the same command run again after the driver died generates only the rest; the dead writers' temporary
directories of the run's shards are removed at the start and the end.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gencache.core.errors import ConfigError, GencacheError, GenerationError
from gencache.run.overrides import Overrides
from gencache.run.preflight import plan_run, reshard
from gencache.run.ray_cluster import SHARDS_PER_WORKER

if TYPE_CHECKING:
    from gencache.core.progress import Notify, ProgressFactory
    from gencache.run.preflight import Plan, Target
    from gencache.run.ray_cluster import Address, WorkerShape
    from gencache.run.ray_progress import RunView
    from gencache.run.ray_worker import ShardOutcome

#: Seconds the driver waits for a shard before it refreshes the progress display.
POLL_S = 0.5
#: Retries of a shard whose worker died, when not given.
DEFAULT_MAX_RETRIES = 3


class ShardFailedError(GencacheError):
    """A shard failed for a reason retrying cannot fix (its worker's error, with that error's exit code)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class ShardRecord:
    """One shard of a Ray run: ``published`` here, ``done`` (found published by a dead attempt) or ``skipped``
    (published before this run), the worker, wall seconds (of which ``load_seconds`` were the worker's checks and
    teacher load, on its first shard), attempts, entries, tokens, and the wall-clock times of its last attempt
    (seconds since the epoch)."""

    index: int
    output_dir: Path
    status: str
    worker: str | None = None
    seconds: float = 0.0
    attempts: int = 0
    entries: int = 0
    tokens: int = 0
    load_seconds: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0

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


@dataclass
class RayRun:
    """What a Ray run did: the shard base, the cluster it ran on, and a record per shard."""

    output_dir: Path
    address: str
    shards: int
    workers: int
    max_retries: int
    records: list[ShardRecord] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def published(self) -> list[Path]:
        return [r.output_dir for r in self.records if r.status in ("published", "done")]

    @property
    def skipped(self) -> list[Path]:
        return [r.output_dir for r in self.records if r.status == "skipped"]

    @property
    def retries(self) -> int:
        return sum(max(r.attempts - 1, 0) for r in self.records)

    def to_json(self) -> dict[str, Any]:
        generated = [r for r in self.records if r.status != "skipped"]
        return {
            "output_dir": str(self.output_dir),
            "address": self.address,
            "shards": self.shards,
            "workers": self.workers,
            "max_retries": self.max_retries,
            "published": len(self.published),
            "skipped": len(self.skipped),
            "retries": self.retries,
            "entries": sum(r.entries for r in generated),
            "tokens": sum(r.tokens for r in generated),
            "seconds": round(self.seconds, 3),
            "temporary_directories_removed": [str(p) for p in self.removed],
            "per_shard": [r.to_json() for r in sorted(self.records, key=lambda r: r.index)],
        }


def _quiet(level: str, text: str) -> None:
    """The default ``notify``: library callers get results, not output."""


def generate_on_ray(
    config_path: str | os.PathLike[str],
    *,
    address: str | None = None,
    shards: int | None = None,
    workers: int | None = None,
    worker_gpus: float = 1.0,
    max_retries: int = DEFAULT_MAX_RETRIES,
    shard: str | None = None,
    overrides: Overrides | None = None,
    env: Mapping[str, str] | None = None,
    notify: Notify | None = None,
    progress: ProgressFactory | None = None,
) -> RayRun:
    """Run ``config_path``'s shards on the Ray cluster at ``address`` (see the module docstring): ``None`` is
    ``RAY_ADDRESS`` from ``env`` (by default the process environment) or a local instance started for the run,
    ``"auto"`` the cluster ``ray start`` runs on this machine, ``"local"`` a local instance. ``workers`` caps the
    pool (default: as many as the cluster holds at once); ``worker_gpus`` is each worker's share of a GPU (0.5 puts
    two workers on one GPU). Raises :class:`gencache.GencacheError` subclasses (exit 2 for bad input, before any
    worker starts); nothing is printed: ``notify`` and ``progress`` as for :func:`gencache.generate`."""
    from gencache.run.ray_cluster import check_reachable, import_ray, refuse_launched, resolve_address

    env = os.environ if env is None else env
    say = notify or _quiet
    overrides = overrides or Overrides()
    _check_numbers(shards, workers, max_retries)
    refuse_launched(shard, env)
    ray = import_ray()
    where = resolve_address(address, env)
    check_reachable(where)
    # every problem of the config before connecting; no launcher's ranks apply: the driver is not one
    config_path = os.path.abspath(os.fspath(config_path))
    plan = plan_run(config_path, overrides, None, shards, {}, True)
    driver = _Driver(ray, plan, config_path, overrides, say, progress)
    return driver.execute(where, shards, workers, worker_gpus, max_retries)


def _check_numbers(shards: int | None, workers: int | None, max_retries: int) -> None:
    if shards is not None and (isinstance(shards, bool) or shards < 1):
        raise ConfigError(f"--shards must be at least 1, got {shards}.")
    if workers is not None and (isinstance(workers, bool) or workers < 1):
        raise ConfigError(f"--workers must be at least 1, got {workers}.")
    if isinstance(max_retries, bool) or max_retries < 0:
        raise ConfigError(f"--max-retries must be 0 or more, got {max_retries}.")


class _Driver:
    """One Ray run: the plan, the connection, the workers, the pool and the records."""

    def __init__(
        self,
        ray: Any,
        plan: Plan,
        config_path: str,
        overrides: Overrides,
        say: Notify,
        progress: ProgressFactory | None,
    ) -> None:
        self.ray, self.plan, self.config_path, self.overrides = ray, plan, config_path, overrides
        self.say, self.progress = say, progress
        self.address = ""

    def execute(
        self, where: Address, shards: int | None, workers: int | None, worker_gpus: float, max_retries: int
    ) -> RayRun:
        """The run on the cluster at ``where``: ``shards`` (or the count of a shard base already started, or eight
        per worker) generated by at most ``workers`` workers, each of ``worker_gpus`` GPUs."""
        from gencache.run.ray_cluster import connected

        started = time.monotonic()
        self.address = where.value
        known = self._existing_count() if shards is None else shards
        if known is not None and shards is None:
            self.plan = reshard(self.plan, known)
        if known is not None and not self.plan.pending:  # every shard already published: nothing to connect for
            result = RayRun(self.plan.base, where.value, known, 0, max_retries)
            self._found_published(result)
            return result
        self.say(
            "status",
            "starting a local Ray instance" if where.local else f"connecting to the Ray cluster at {where.value}",
        )
        with connected(self.ray, where):
            result = self._connected(known, workers, worker_gpus, max_retries, default=shards is None)
        result.seconds = time.monotonic() - started
        return result

    def _connected(
        self, shards: int | None, workers: int | None, worker_gpus: float, max_retries: int, *, default: bool
    ) -> RayRun:
        """Generate the shards still to publish (``shards`` of them, or when None eight per worker and the plan
        resharded); ``default``: the count was not given (recorded with the launch)."""
        from gencache.data.sources import shared_tables
        from gencache.run.ray_cluster import worker_shape

        config = self.plan.config
        resources = self.ray.cluster_resources()
        engine_options = getattr(config, "engine_options", None)
        tensor_parallel = int(getattr(engine_options, "tensor_parallel_size", 1) or 1)
        shape = worker_shape(config.model.device, tensor_parallel, worker_gpus, resources)
        if shape.capacity < 1:
            raise ConfigError(
                f"The Ray cluster ({resources.get('GPU', 0):g} GPUs, {resources.get('CPU', 0):g} CPUs) cannot hold "
                f"one worker of {shape.num_gpus:g} GPUs and {shape.num_cpus:g} CPU; lower --worker-gpus or add nodes."
            )
        count = min(workers or shape.capacity, shape.capacity)
        if workers is not None and workers > shape.capacity:
            self.say("warning", f"the cluster holds {shape.capacity} workers at once; --workers {workers} uses that")
        with shared_tables():  # the data files are read once for both checks
            if shards is None:  # eight shards per worker, at most one per unique key
                shards = max(min(SHARDS_PER_WORKER * count, len(set(self._phase_one([])))), 1)
                self.plan = reshard(self.plan, shards)
            keys = self._phase_one(self.plan.pending)
        plan = self.plan
        launch = {
            "ray": {
                "shards": shards,
                "default_shards": default,
                "workers": min(count, max(len(plan.pending), 1)),
                "worker": shape.to_json(),
                "max_retries": max_retries,
            }
        }
        run = RayRun(plan.base, self.address, shards, 0, max_retries)
        self._found_published(run)
        try:
            self._generate(run, shape, launch, keys)
        finally:  # the temporary directories of workers that died (or were stopped with the run)
            run.removed += self._clean()
        return run

    def _phase_one(self, targets: list[Target]) -> list[str]:
        """The model-free checks of ``targets``, the shards still to publish (output location, data configs, the
        shard count); every problem raised; the run's keys returned."""
        from dataclasses import replace

        from gencache.run.preflight import input_keys

        return input_keys(replace(self.plan, pending=targets))

    def _generate(self, run: RayRun, shape: WorkerShape, launch: dict[str, Any], keys: list[str]) -> None:
        plan = self.plan
        if not plan.pending:
            return
        recorded = launch["ray"]
        run.workers = recorded["workers"]
        self.say(
            "info",
            f"ray {self.address}: {len(plan.pending)} of {run.shards} shards to generate "
            f"({f'{SHARDS_PER_WORKER} per worker' if recorded['default_shards'] else '--shards'}), {run.workers} "
            f"workers of {shape.num_gpus:g} GPU and {shape.num_cpus:g} CPU, up to {run.max_retries} retries per shard",
        )
        self._dispatch(run, shape.options(), launch, self._pending_samples(keys))

    def _dispatch(self, run: RayRun, options: dict[str, Any], launch: dict[str, Any], samples: int) -> None:
        from gencache.core.progress import StagedProgress
        from gencache.run.ray_progress import RunTally, RunView
        from gencache.run.ray_worker import ShardWorker, WorkerSpec

        ray = self.ray
        name = f"gencache-tally-{uuid.uuid4().hex}"
        tally = ray.remote(RunTally).options(name=name, num_cpus=0).remote()
        spec = WorkerSpec(self.config_path, self.overrides, run.shards, os.getcwd(), launch, name)
        retries = run.max_retries
        worker_class = ray.remote(ShardWorker).options(**options, max_restarts=retries, max_task_retries=retries)
        actors = [worker_class.remote(spec) for _ in range(run.workers)]
        sizes = {self._index_of(t.output_dir): t for t in self.plan.pending}
        view = RunView(total_shards=run.shards, workers=run.workers, shards_done=len(self.plan.published))
        bar = StagedProgress(self.progress(samples) if self.progress is not None else None, samples)
        try:
            self._collect(actors, tally, sizes, run, view, bar)
        finally:
            bar.close()
            for actor in [*actors, tally]:
                ray.kill(actor, no_restart=True)

    def _collect(
        self,
        actors: list[Any],
        tally: Any,
        sizes: dict[int, Target],
        run: RayRun,
        view: RunView,
        bar: Any,
    ) -> None:
        from ray.exceptions import RayActorError
        from ray.util import ActorPool

        ray = self.ray
        pool: Any = ActorPool(actors)  # typed Any: ray's pool has untyped methods
        for index in sizes:
            pool.submit(lambda actor, shard: actor.publish.remote(shard), index)
        bar.start(bar.total)
        lost: list[str] = []
        while pool.has_next():
            try:
                outcome = pool.get_next_unordered(timeout=POLL_S)
            except TimeoutError:
                view.update(ray.get(tally.snapshot.remote()), bar)
                continue
            except RayActorError as error:  # a worker died more often than its retries allow: Ray gave it up
                view.workers -= 1
                lost.append(str(error).splitlines()[0])
                continue
            view.update(ray.get(tally.snapshot.remote()), bar)
            self._record(outcome, run)
            view.shards_done += 1
            bar.stage(view.label())
        missing = sorted(set(sizes) - {r.index for r in run.records})
        if missing:
            shown = ", ".join(f"{i:05d}" for i in missing)
            raise GenerationError(
                f"shards {shown} of {run.shards} were not published: their workers died more than --max-retries "
                f"({run.max_retries}) times ({lost[-1] if lost else 'no worker left'}); the published shards stay: "
                "rerun the same command to generate the rest."
            )

    def _record(self, outcome: ShardOutcome, run: RayRun) -> None:
        """Check a worker's outcome: a failure ends the run; a published shard must verify and be of this run."""
        from gencache.run.preflight import check_published

        where = f"shard {outcome.index}/{run.shards}"
        if outcome.status == "failed":
            raise ShardFailedError(
                f"{where} failed on worker {outcome.worker}: {outcome.error}", outcome.exit_code or 1
            )
        path = Path(outcome.output_dir)
        check_published(path, self.plan.digest)
        run.records.append(
            ShardRecord(
                outcome.index,
                path,
                outcome.status,
                outcome.worker,
                outcome.seconds,
                outcome.attempt,
                outcome.entries,
                outcome.tokens,
                outcome.load_seconds,
                outcome.started_at,
                outcome.finished_at,
            )
        )
        self.say(
            "info",
            f"published {path} ({where}, {outcome.entries} entries, {outcome.tokens} tokens, worker "
            f"{outcome.worker}, attempt {outcome.attempt})"
            if outcome.status == "published"
            else f"{where} was published by an earlier attempt and verifies: {path}",
        )

    def _found_published(self, run: RayRun) -> None:
        """Record the shards published before this run (skipped) and remove the dead writers' leftovers of the
        run."""
        for path in self.plan.published:
            run.records.append(ShardRecord(self._index_of(path), path, "skipped"))
            self.say("info", f"already published and verified: {path}")
        run.removed += self._clean()

    def _existing_count(self) -> int | None:
        """The shard count of a shard base already started at ``output_dir`` (a rerun keeps its count)."""
        from gencache.artifact.shards import find_shards

        found = find_shards(self.plan.base)
        return found.count if found is not None else None

    def _index_of(self, path: Path) -> int:
        for target in self.plan.targets:
            if target.output_dir == path and target.shard is not None:
                return target.shard.index
        raise GenerationError(f"{path} is not a shard of this run.")

    def _pending_samples(self, keys: list[str]) -> int:
        """How many unique keys the shards still to publish own (what the progress display counts)."""
        unique = list(dict.fromkeys(keys))
        return sum(len(t.shard.select(unique)) for t in self.plan.pending if t.shard is not None)

    def _clean(self) -> list[Path]:
        """Remove the temporary directories of this run's shards whose writer died (its lock is free)."""
        from gencache.artifact.publish import clean

        parent = self.plan.targets[0].output_dir.parent
        if not parent.is_dir():
            return []
        return clean(parent, outputs={t.output_dir.name for t in self.plan.targets})
