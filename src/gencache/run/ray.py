"""``generate --ray``: one run's shards handed to a pool of teacher workers on a Ray cluster.

The driver (:func:`generate_on_ray`) plans the run and makes the model-free checks once, probes the address,
connects, fixes the shard count and hands each shard still to publish to Ray's :class:`ray.util.ActorPool` of
:class:`ShardWorker` actors; Ray restarts a worker whose process died and retries its shard. Each worker publishes
with the atomic publish of one process, to a path every node reaches: a shared filesystem, or a bucket (then the
driver sends its config and local data files). The driver checks each published shard's ``run_digest``, shows one
progress display fed by the :class:`RunTally` actor, and gives up when no worker starts or no shard progresses for
``timeout`` seconds.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gencache.artifact.names import TEMP_RE
from gencache.artifact.publish import clean
from gencache.artifact.store import Location, exists
from gencache.artifact.upload import clean as clean_prefix
from gencache.config.documents import DEFAULTS_FILENAME
from gencache.config.paths import S3Url
from gencache.core.errors import (
    ConfigError,
    GencacheError,
    GenerationError,
    OutputExistsError,
    ShardError,
    Stopped,
    StoppedRun,
)
from gencache.core.progress import Notify, ProgressFactory, StagedProgress
from gencache.data.sources import loaded_sources, mirrored, read_mirrored, shared_tables
from gencache.run.plan import Overrides, Plan, check_published, full_split, shard_from_env
from gencache.run.preflight import input_keys, plan_run, preflight
from gencache.run.ray_cluster import check_reachable, connected, import_ray, resolve_address, worker_shape
from gencache.run.session import TeacherSession

#: Seconds of each wait on Ray: how soon a stop, a published shard or a change of progress is seen.
POLL_S = 0.5
#: Shards per worker when ``--shards`` is not given: enough that the last shards, handed to whichever worker is
#: free, leave a short tail (8 keeps 64 simulated workers within 1.05x of the ideal makespan: docs/benchmarks.md).
SHARDS_PER_WORKER = 8
#: Seconds between a worker's progress reports (each is one message to the tally).
REPORT_INTERVAL_S = 0.5
#: Seconds the end of a run waits for its killed workers to exit and free their shards' locks, so that their
#: temporary directories can be removed (under a second, unless the machine is loaded).
KILL_WAIT_S = 30.0


@dataclass(frozen=True)
class RayOptions:
    """How a run uses Ray: the cluster's ``address`` (None: ``RAY_ADDRESS``, else a local instance; ``"auto"`` the
    cluster ``ray start`` runs here; ``"local"``), the shard count (None: the existing base's, else eight per
    worker), at most ``workers`` workers of ``worker_gpus`` GPUs each (0.5 puts two on one GPU), the retries of a
    dead worker's shard, and the seconds the driver waits for a worker to start or any shard to progress."""

    address: str | None = None
    shards: int | None = None
    workers: int | None = None
    worker_gpus: float = 1.0
    max_retries: int = 3
    timeout: float = 600.0

    def __post_init__(self) -> None:
        for name, value in (("shards", self.shards), ("workers", self.workers)):  # before the address is probed
            if value is not None and (isinstance(value, bool) or value < 1):
                raise ConfigError(f"--{name} must be at least 1, got {value}.")
        if isinstance(self.max_retries, bool) or self.max_retries < 0:
            raise ConfigError(f"--max-retries must be 0 or more, got {self.max_retries}.")
        if not self.worker_gpus > 0:
            raise ConfigError(f"--worker-gpus must be more than 0, got {self.worker_gpus}.")
        if not self.timeout > 0:
            raise ConfigError(f"--ray-timeout must be more than 0 seconds, got {self.timeout}.")


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
        fields = {name: round(v, 3) if isinstance(v, float) else v for name, v in asdict(self).items()}
        del fields["index"], fields["error"], fields["exit_code"]
        return {"shard": self.index, **fields, "output_dir": str(self.output_dir)}


@dataclass
class RayRun:
    output_dir: Location
    address: str = ""
    shards: int = 0
    workers: int = 0
    max_retries: int = 0
    records: list[ShardRecord] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def published(self) -> list[Location]:
        return [r.output_dir for r in self.records if r.status in ("published", "done")]

    @property
    def skipped(self) -> list[Location]:
        return [r.output_dir for r in self.records if r.status == "skipped"]

    @property
    def retries(self) -> int:
        return sum(max(r.attempts - 1, 0) for r in self.records)

    def to_json(self) -> dict[str, Any]:
        generated = [r for r in self.records if r.status != "skipped"]
        return {name: getattr(self, name) for name in ("address", "shards", "workers", "max_retries", "retries")} | {
            "output_dir": str(self.output_dir),
            "published": len(self.published),
            "skipped": len(self.skipped),
            "entries": sum(r.entries for r in generated),
            "tokens": sum(r.tokens for r in generated),
            "seconds": round(self.seconds, 3),
            "temporary_directories_removed": [str(p) for p in self.removed],
            "per_shard": [r.to_json() for r in sorted(self.records, key=lambda r: r.index)],
        }


# -- the driver -----------------------------------------------------------------------------------------------------
def generate_on_ray(
    config_path: str | os.PathLike[str],
    options: RayOptions | None = None,
    *,
    shard: str | None = None,
    overrides: Overrides | None = None,
    env: Mapping[str, str] | None = None,
    notify: Notify | None = None,
    progress: ProgressFactory | None = None,
) -> RayRun:
    """Run ``config_path``'s shards on a Ray cluster as ``options`` say; bad input raises before any worker starts,
    and a stop raised by the caller's signal handlers goes on with what was published attached. ``notify`` and
    ``progress`` as for :func:`gencache.generate`."""
    options, overrides = options or RayOptions(), overrides or Overrides()
    env = os.environ if env is None else env
    if shard is not None:
        raise ShardError(
            f"--ray runs every shard on the cluster; drop --shard {shard} (or drop --ray to generate one shard here)."
        )
    if (launched := shard_from_env(env)) is not None:
        raise ShardError(
            f"--ray runs the whole run from one driver, but this process is rank {launched.index} of "
            f"{launched.count} under {launched.origin}; start the driver once, outside torchrun/srun (or drop --ray)."
        )
    where = resolve_address(options.address, env)
    ray = import_ray(local=where == "local")
    check_reachable(where)
    # every problem of the config before connecting; no launcher's ranks apply: the driver is not one
    config_path = os.path.abspath(os.fspath(config_path))
    plan = plan_run(config_path, overrides, None, options.shards, {}, True, keep_split=True)
    spec, started = plan.targets[0].shard, time.monotonic()
    run = RayRun(plan.base, where, spec.count if spec else 0, 0, options.max_retries)
    driver = _Driver(ray, plan, config_path, overrides, notify or (lambda level, text: None), progress, run)
    try:
        for target in plan.targets:
            if target.shard is not None and target.output_dir in plan.published:
                run.records.append(ShardRecord(target.shard.index, target.output_dir, "skipped"))
                driver.say("info", f"already published and verified: {target.output_dir}")
        run.removed += driver.clean()
        for removed in run.removed:
            driver.say("info", f"removed {removed}, left by a stopped or dead gencache process")
        if not run.shards or plan.pending:  # else every shard is published: nothing to connect for
            local = "starting a local Ray instance"
            driver.say("status", local if where == "local" else f"connecting to the Ray cluster at {where}")
            with connected(ray, where):
                driver.generate(options)
    except Stopped as stop:
        done = tuple(str(r.output_dir) for r in sorted(run.records, key=lambda r: r.index))
        stop.run = StoppedRun(done, remaining=len(done) < run.shards or not run.shards)
        raise
    finally:  # what workers that outlived the run's wait for them left (Ray's shutdown has ended them)
        run.removed += driver.clean()
    run.seconds = time.monotonic() - started
    return run


@dataclass
class _Driver:
    ray: Any
    plan: Plan
    config_path: str
    overrides: Overrides
    say: Notify
    progress: ProgressFactory | None
    run: RayRun

    def generate(self, options: RayOptions) -> None:
        """Fix the count when it was not known, check the shards still to publish and generate them, each handed
        to whichever worker is free; every worker is killed at the end (:meth:`clean` waits for their exit)."""
        config, run, ray = self.plan.config, self.run, self.ray
        resources = ray.cluster_resources()
        tensor_parallel = int(getattr(getattr(config, "engine_options", None), "tensor_parallel_size", 1) or 1)
        gpus, capacity = worker_shape(config.model.device, tensor_parallel, options.worker_gpus, resources)
        if capacity < 1:
            raise ConfigError(
                f"The Ray cluster ({resources.get('GPU', 0):g} GPUs, {resources.get('CPU', 0):g} CPUs) cannot hold "
                f"one worker of {gpus:g} GPUs and 1 CPU; lower --worker-gpus or add nodes."
            )
        count = min(options.workers or capacity, capacity)
        if options.workers is not None and options.workers > capacity:
            self.say("warning", f"the cluster holds {capacity} workers at once; --workers {options.workers} uses that")
        default = not run.shards
        with shared_tables():  # the data files are read once for both checks
            if default:  # eight shards per worker, fewer when some shard would own no key (planned as the workers plan)
                run.shards = full_split(input_keys(replace(self.plan, pending=[])), SHARDS_PER_WORKER * count)
                self.plan = plan_run(self.config_path, self.overrides, None, run.shards, {}, True)
            keys = input_keys(self.plan)
            # with no shared filesystem to assume (a bucket), the config and the data files go to the workers
            sources = loaded_sources() if isinstance(self.plan.base, S3Url) else {}
        pending = {t.shard.index: t.shard for t in self.plan.pending if t.shard is not None}
        if not pending:
            return
        run.workers = min(count, len(pending))
        self.say(
            "info",
            f"ray {run.address}: {len(pending)} of {run.shards} shards to generate "
            f"({'up to ' + str(SHARDS_PER_WORKER) + ' per worker, each with keys' if default else '--shards'}), "
            f"{run.workers} workers of {gpus:g} GPU and 1 CPU, up to "
            f"{options.max_retries} retries per shard",
        )
        samples = sum(len(spec.select(keys)) for spec in pending.values())
        files: dict[str, bytes] = {}
        if isinstance(self.plan.base, S3Url):  # what the workers read, as they may not see the driver's files
            paths = [self.config_path, str(Path(self.config_path).parent / DEFAULTS_FILENAME)]
            paths += [path for info in sources.values() for path, _ in info.files]
            files = {path: Path(path).read_bytes() for path in paths if os.path.isfile(path)}
        launch: dict[str, Any] = {"shards": run.shards, "default_shards": default, "workers": run.workers}
        each = {"num_gpus": gpus, "num_cpus": 1.0}
        launch |= {"worker": each, "max_retries": options.max_retries}
        located = {source: info.location for source, info in sources.items()}
        name = f"gencache-tally-{uuid.uuid4().hex}"
        spec = WorkerSpec(self.config_path, self.overrides, run.shards, os.getcwd(), located, {"ray": launch}, name)
        retries = options.max_retries
        tally = ray.remote(RunTally).options(name=name, num_cpus=0).remote()
        worker = ray.remote(ShardWorker).options(**each, max_restarts=retries, max_task_retries=retries)
        sent = ray.put(files)
        actors = [worker.remote(spec, sent) for _ in range(run.workers)]
        pool = ray.util.ActorPool(actors)
        for index in pending:
            pool.submit(lambda actor, index: actor.publish.remote(index), index)
        bar = StagedProgress(self.progress(samples) if self.progress is not None else None, samples)
        try:
            lost = self._collect(pool, tally, bar, gpus, options.timeout)
        finally:
            bar.close()
            for actor in [*actors, tally]:
                ray.kill(actor, no_restart=True)
            run.removed += self.clean(KILL_WAIT_S)  # inside the run: a second stop still says what was published
        if missing := sorted(set(pending) - {r.index for r in run.records}):
            raise GenerationError(
                f"shards {', '.join(f'{i:05d}' for i in missing)} of {run.shards} were not published: their workers "
                f"died more than --max-retries ({run.max_retries}) times ({lost or 'no worker left'}); "
                "the published shards stay: rerun the same command to generate the rest."
            )

    def _collect(self, pool: Any, tally: Any, bar: Any, gpus: float, timeout: float) -> str | None:
        """Wait for the shards, showing the tally's progress, and check each worker's record (a failure ends the run
        with its exit code; a published shard must be of this run) until ``timeout`` seconds pass without a change.
        The last error of a worker that Ray gave up, if any."""
        ray, run = self.ray, self.run
        alive, done, lost = run.workers, len(self.plan.published), None
        shown: tuple[int, int, dict[int, int]] | None = None  # None until the tally first answers
        changed = time.monotonic()
        bar.start(bar.total)
        while pool.has_next():
            try:
                record: ShardRecord = pool.get_next_unordered(timeout=POLL_S)
                where = f"shard {record.index}/{run.shards}"
                if record.status == "failed":
                    error = GencacheError(f"{where} failed on worker {record.worker}: {record.error}")
                    error.exit_code = record.exit_code or 1
                    raise error
                check_published(record.output_dir, self.plan.digest)
                run.records.append(record)
                self.say(
                    "info",
                    f"published {record.output_dir} ({where}, {record.entries} entries, {record.tokens} tokens, "
                    f"worker {record.worker}, attempt {record.attempts})"
                    if record.status == "published"
                    else f"{where} was published by an earlier attempt and verifies: {record.output_dir}",
                )
                done, changed = done + 1, time.monotonic()
            except TimeoutError:
                pass
            except ray.exceptions.RayActorError as error:  # a worker died more often than its retries allow
                alive, lost = alive - 1, str(error).splitlines()[0]
            with contextlib.suppress(TimeoutError):  # a tally that does not answer: no worker process started
                snapshot = ray.get(tally.snapshot.remote(), timeout=POLL_S)
                before = shown or (0, 0, {})
                if snapshot != shown:
                    bar.advance(snapshot[0] - before[0], snapshot[1] - before[1])
                    shown, changed = snapshot, time.monotonic()
            retries = sum(count - 1 for count in (shown or (0, 0, {}))[2].values())
            bar.stage(f"shards {done}/{run.shards}, workers {alive}, retries {retries}")
            if time.monotonic() - changed > timeout:  # why, by what the tally last said (it asks for no resources)
                why = f"no shard made progress for {timeout:g} s (a teacher that loads for longer?)"
                if shown is None or not shown[2]:
                    why = f"no worker started in {timeout:g} s: " + (
                        "Ray could not start worker processes (not even the tally's; a failing runtime environment?)"
                        if shown is None
                        else f"the cluster never had {gpus:g} GPU and 1 CPU free for one (other jobs hold them?)"
                    )
                node = ray._private.worker._global_node  # None for a Ray Client driver: the head's default
                logs = node.get_logs_dir_path() if node is not None else "/tmp/ray/session_latest/logs on the head node"
                raise GenerationError(f"{why}; Ray's logs: {logs}; --ray-timeout sets the wait.")
        return lost

    def clean(self, wait: float = 0.0) -> list[str]:
        """Remove what the dead writers of this run's shards left (on a bucket: their uploads and uncommitted
        objects), waiting up to ``wait`` seconds for killed workers to free their locks (Ray reports an actor dead
        before its process ends)."""
        parent, outputs = self.plan.base.parent, {t.output_dir.name for t in self.plan.targets}
        if isinstance(parent, S3Url):
            return clean_prefix(parent, outputs)
        if not parent.is_dir():
            return []
        removed, deadline = clean(parent, outputs), time.monotonic() + wait
        while time.monotonic() < deadline and any(
            (match := TEMP_RE.match(name)) and match["name"] in outputs for name in os.listdir(parent)
        ):
            time.sleep(POLL_S)
            removed += clean(parent, outputs)
        return [str(path) for path in removed]


# -- the workers' side ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerSpec:
    """What every worker of a run is created with: ``working_directory`` is the driver's (the config's relative
    paths are relative to it), ``sources`` the absolute location of each local data source the driver sends (by
    its name in the config), ``launch`` what ``resolved_config.json`` records, ``tally`` the tally actor's name."""

    config_path: str
    overrides: Overrides
    shards: int
    working_directory: str
    sources: dict[str, str]
    launch: dict[str, Any]
    tally: str


class ShardWorker:
    """A teacher worker (an actor), created with the bytes of the driver's files (none on a shared filesystem).
    Creating it is cheap: its first shard makes the run's checks and loads the teacher, so that a restarted worker
    (Ray runs ``__init__`` again) loads it in the call that retries the dead worker's shard. Every outcome comes back
    as a :class:`ShardRecord`: only the death of the worker's process reaches the driver as Ray's error."""

    def __init__(self, spec: WorkerSpec, files: dict[str, bytes]) -> None:
        import ray

        self.spec, self.files = spec, files
        # By name, not a handle among the arguments: Ray restarts an actor only from arguments held inline.
        self.tally: Any = ray.get_actor(spec.tally)
        if os.path.isdir(spec.working_directory):  # where the config's relative paths are, when this node has it
            os.chdir(spec.working_directory)
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.plan: Plan | None = None
        self.session: TeacherSession | None = None

    def publish(self, index: int) -> ShardRecord:
        """Publish shard ``index`` (or find it published); never raises for the shard's own failure."""
        import ray

        attempt: int = ray.get(self.tally.begin.remote(index))
        started_at, started = time.time(), time.monotonic()
        record = ShardRecord(index, Path(), "failed", self.name, attempts=attempt, started_at=started_at)
        try:
            with self._sent() as config_path:
                plan = self.plan = self.plan or self._plan(config_path)
                target = next(t for t in plan.targets if t.shard is not None and t.shard.index == index)
                record = replace(record, output_dir=target.output_dir)
                if exists(target.output_dir):
                    raise OutputExistsError(f"{target.output_dir} exists")
                session = self.session or self._checked(plan, config_path)
            if session is not self.session:  # this call made the checks; it loads the teacher first
                session.engine.load_weights()
                self.session = session
                record = replace(record, load_seconds=time.monotonic() - started)
            with contextlib.closing(TallyProgress(self.tally, index, attempt)) as progress:
                published = session.publish(next(t for t in session.targets if t.shard == target.shard), progress)
            record = replace(record, status="published", entries=published.entries, tokens=published.tokens)
        except OutputExistsError:  # published by an earlier attempt, or another attempt's rename won the race
            record = replace(record, status="done")  # the driver checks it as it checks every published shard
        except Exception as error:
            code = error.exit_code if isinstance(error, GencacheError) else 1
            record = replace(record, error=str(error) or type(error).__name__, exit_code=code)
        seconds = time.monotonic() - started
        return replace(record, seconds=seconds, finished_at=started_at + seconds)

    @contextlib.contextmanager
    def _sent(self) -> Iterator[str]:
        """The config file to plan with: the driver's, or until the checks are made, its copy among the files the
        driver sent, written to a temporary directory that the block removes; the data sources are read from their
        copies there."""
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
        """The run's plan, as ``--shards N`` in one process plans it, with no launcher's ranks (a worker is not one)."""
        return plan_run(config_path, self.spec.overrides, None, self.spec.shards, {}, True)

    def _checked(self, plan: Plan, config_path: str) -> TeacherSession:
        """The run's checks for the shards not yet published (as ``--shards N`` makes them); the session (recording
        the driver's working directory), whose teacher is not loaded yet."""
        for _ in plan.targets:  # another worker may publish a planned shard meanwhile: plan again without it
            report = preflight(plan, {})
            if not report.problems or any(p.location != "output_dir" for p in report.problems):
                break
            plan = self.plan = self._plan(config_path)
        return replace(report.run_session(), launch=self.spec.launch, working_directory=self.spec.working_directory)


class RunTally:
    """Attempts per shard and the samples and tokens of each shard's current attempt (a small actor beside the
    workers): a worker calls :meth:`begin` when it takes a shard and reports through :class:`TallyProgress`; the
    driver reads :meth:`snapshot` while it waits."""

    def __init__(self) -> None:
        self.attempts: dict[int, int] = {}
        self.done: dict[int, tuple[int, int]] = {}

    def begin(self, shard: int) -> int:
        self.attempts[shard] = self.attempts.get(shard, 0) + 1
        self.done[shard] = (0, 0)
        return self.attempts[shard]

    def advance(self, shard: int, attempt: int, samples: int, tokens: int) -> None:
        """An attempt's progress so far (a report of an earlier, dead attempt is dropped)."""
        if self.attempts.get(shard) == attempt:
            self.done[shard] = (samples, tokens)

    def snapshot(self) -> tuple[int, int, dict[int, int]]:
        return sum(s for s, _ in self.done.values()), sum(t for _, t in self.done.values()), dict(self.attempts)


class TallyProgress:
    """The engine's progress inside a worker, its totals sent to the tally every :data:`REPORT_INTERVAL_S` seconds
    (fire and forget) and at :meth:`close`, which waits until the tally has them: the driver's next snapshot counts
    the shard."""

    def __init__(self, tally: Any, shard: int, attempt: int) -> None:
        self.send = functools.partial(tally.advance.remote, shard, attempt)
        self.samples = self.tokens = 0
        self.sent = time.monotonic()

    def start(self, total_samples: int) -> None:  # the driver knows every shard's size
        pass

    def advance(self, samples: int, tokens: int) -> None:
        self.samples, self.tokens = self.samples + samples, self.tokens + tokens
        if time.monotonic() - self.sent >= REPORT_INTERVAL_S:
            self.send(self.samples, self.tokens)
            self.sent = time.monotonic()

    def close(self) -> None:
        import ray

        ray.get(self.send(self.samples, self.tokens))
