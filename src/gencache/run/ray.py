"""``generate --ray``: one run's shards handed to a pool of teacher workers on a Ray cluster.

The driver (:func:`generate_on_ray`) plans the run once (:func:`gencache.run.preflight.plan_run`: a rerun without a
count keeps the count of the shard base already at ``output_dir``), makes the model-free checks before anything starts,
connects, fixes the shard count (``--shards N``; else :data:`SHARDS_PER_WORKER` per worker, lowered until every shard
owns keys) and creates the workers (:class:`ShardWorker`, one per GPU by default) with Ray's own restart and retry: a
worker whose process dies is created again and its shard made again, at most ``max_retries`` times. Ray's
:class:`ray.util.ActorPool` hands each shard to whichever worker is free. Each worker publishes its shards itself, with
the atomic publish of one process, to the output path every node reaches (a directory on a shared filesystem, or a
bucket); the driver verifies each published shard and its ``run_digest``, shows one progress display (fed by the
:class:`RunTally` actor) and returns a :class:`RayRun` with a record per shard. The shards already published by the same
run are skipped, so the same command run again generates only the rest; the dead writers' temporary directories (or
uploads) of the run's shards are removed when it starts and ends.

A worker plans the run as the driver did. On a shared filesystem it reads the driver's config and data files at the
driver's paths, in the driver's working directory. With an ``s3://`` output no shared filesystem is assumed: the driver
sends the bytes of its config file (and ``_default.json``) and of every local data file the run reads
(:func:`driver_files`, once through Ray's object store), and each worker writes them to a temporary directory of its own
while it makes its checks, reading them in place of the driver's paths
(:func:`gencache.data.sources.read_mirrored`), so that it records the driver's paths and digests; only the teacher must
be reachable from every node.

Every wait is bounded. The address is probed before Ray's client (which retries for minutes) with a short TCP connection
that must answer as a gRPC server does. The driver waits on Ray in steps of :data:`POLL_S` and gives up, naming the
cause and Ray's logs, when no worker starts or no shard makes progress for ``timeout`` seconds. What the caller's signal
handler raises inside one of Ray's C calls (Ray turns it into a ``SystemError``) goes on as itself once the call
returns, so a stop ends the run at any moment: the workers are killed (a local instance is shut down) and their
temporary directories removed. A local instance runs its workers with the driver's interpreter and environment (Ray's
``uv run`` integration, which repacks the working directory for the workers, is off for it). ``ray`` is imported inside
the functions that need it, never when this module is imported.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gencache.artifact.store import Location
from gencache.config.paths import S3Url
from gencache.core.errors import (
    ConfigError,
    GencacheError,
    GenerationError,
    ShardError,
    Stopped,
    StoppedRun,
)
from gencache.core.process import environment_kept, signal_handlers_kept
from gencache.run.plan import Overrides, reshard
from gencache.run.preflight import input_keys, plan_run

if TYPE_CHECKING:
    from gencache.core.progress import Notify, ProgressFactory
    from gencache.data.sources import SourceInfo
    from gencache.run.plan import Plan, Target
from gencache.run.ray_worker import RunTally, ShardRecord, ShardWorker, WorkerSpec, driver_files

#: Seconds of each wait on Ray: how soon a stop, a published shard or a change of progress is seen.
POLL_S = 0.5
#: Shards per worker when ``--shards`` is not given: enough that the last shards, handed to whichever worker is
#: free, leave a short tail (8 keeps 64 simulated workers within 1.05x of the ideal makespan: docs/benchmarks.md).
SHARDS_PER_WORKER = 8
#: Seconds the probe of a cluster's address waits for it to answer.
CONNECT_TIMEOUT_S = 5.0
#: Ray's message for a node whose agents did not start in time (ray issue #65983, a loaded machine), and how often
#: a local start meets it at most.
STARTUP_TIMEOUT = "timed out during startup"
LOCAL_START_ATTEMPTS = 3
#: The first bytes of an HTTP/2 connection (RFC 9113): the client preface and an empty SETTINGS frame.
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


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

    def check(self) -> None:
        for name, value, least in (("shards", self.shards, 1), ("workers", self.workers, 1)):
            if value is not None and (isinstance(value, bool) or value < least):
                raise ConfigError(f"--{name} must be at least {least}, got {value}.")
        if isinstance(self.max_retries, bool) or self.max_retries < 0:
            raise ConfigError(f"--max-retries must be 0 or more, got {self.max_retries}.")
        if not self.worker_gpus > 0:
            raise ConfigError(f"--worker-gpus must be more than 0, got {self.worker_gpus}.")
        if not self.timeout > 0:
            raise ConfigError(f"--ray-timeout must be more than 0 seconds, got {self.timeout}.")


class ShardFailedError(GencacheError):
    """A shard failed for a reason retrying cannot fix (its worker's error, with that error's exit code)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class RayRun:
    """What a Ray run did: the shard base, the cluster it ran on, and a record per shard."""

    output_dir: Location
    address: str
    shards: int
    workers: int
    max_retries: int
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
    options: RayOptions | None = None,
    *,
    shard: str | None = None,
    overrides: Overrides | None = None,
    env: Mapping[str, str] | None = None,
    notify: Notify | None = None,
    progress: ProgressFactory | None = None,
) -> RayRun:
    """Run ``config_path``'s shards on a Ray cluster as ``options`` say (see the module docstring). Raises
    :class:`gencache.GencacheError` subclasses (exit 2 for bad input, before any worker starts); a stop raised by
    the caller's signal handlers goes on with what was published attached. Nothing is printed: ``notify`` and
    ``progress`` as for :func:`gencache.generate`."""
    options = options or RayOptions()
    env = os.environ if env is None else env
    options.check()
    refuse_launched(shard, env)
    where = resolve_address(options.address, env)
    ray = import_ray(local=where.local)
    check_reachable(where)
    # every problem of the config before connecting; no launcher's ranks apply: the driver is not one
    config_path = os.path.abspath(os.fspath(config_path))
    plan = plan_run(config_path, overrides or Overrides(), None, options.shards, {}, True, keep_split=True)
    return _Driver(ray, plan, config_path, overrides or Overrides(), notify or _quiet, progress).execute(where, options)


def import_ray(local: bool = False) -> Any:
    """The ray module, or one line saying how to install it. Importing ray sets ``RAY_CLIENT_MODE`` (read at that
    import only), which is taken back; for a ``local`` instance Ray's ``uv run`` integration is off (read at that
    import too), so that its workers run with the driver's own interpreter and environment."""
    try:
        with environment_kept():
            if local:
                os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
            import ray
    except ImportError:
        raise ConfigError(
            "--ray needs Ray, which is not installed: install the extra (pip install 'gencache[ray]', or uv sync "
            "--extra ray)."
        ) from None
    return ray


def refuse_launched(shard: str | None, env: Mapping[str, str]) -> None:
    """``--ray`` is one driver for the whole run: not one shard (``--shard``) nor one rank of a launcher."""
    if shard is not None:
        raise ShardError(
            f"--ray runs every shard on the cluster; drop --shard {shard} (or drop --ray to generate one shard here)."
        )
    from gencache.run.plan import shard_from_env

    launched = shard_from_env(env)
    if launched is not None:
        raise ShardError(
            f"--ray runs the whole run from one driver, but this process is rank {launched.index} of "
            f"{launched.count} under {launched.origin}; start the driver once, outside torchrun/srun (or drop --ray)."
        )


@dataclass(frozen=True)
class Address:
    """Where ``--ray`` connects: ``value`` as given to ``ray.init`` (``"local"`` starts an instance here), and the
    host and port the probe opens (None for a local instance)."""

    value: str
    host: str | None = None
    port: int | None = None

    @property
    def local(self) -> bool:
        return self.value == "local"


def resolve_address(given: str | None, env: Mapping[str, str]) -> Address:
    """``given`` (an address, ``auto`` or ``local``) or, when None, ``RAY_ADDRESS`` or a local instance."""
    text = (given or "").strip() or env.get("RAY_ADDRESS", "").strip() or "local"
    if text == "local":
        return Address("local")
    if text == "auto":
        found = env.get("RAY_ADDRESS", "").strip() or _latest_cluster()
        if not found or found == "auto":
            raise ConfigError(
                "--ray auto found no running Ray cluster on this machine (RAY_ADDRESS is not set and no `ray start` "
                "cluster is recorded); start one with `ray start --head`, or give its address."
            )
        text = found
    scheme, _, rest = text.rpartition("://")
    if scheme not in ("", "ray"):
        raise ConfigError(f"--ray {text}: use HOST:PORT, ray://HOST:PORT, auto or local.")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--ray {text} is not a Ray address: use HOST:PORT, ray://HOST:PORT, auto or local.")
    return Address(text, host.strip("[]"), int(port))


def _latest_cluster() -> str | None:
    """The address of the cluster ``ray start`` last recorded on this machine (Ray's own lookup), or None."""
    try:
        with environment_kept():  # ray's import sets RAY_CLIENT_MODE (see import_ray)
            from ray._private.services import canonicalize_bootstrap_address

        found: str | None = canonicalize_bootstrap_address("auto")
    except Exception:  # Ray's lookup found nothing readable: there is no cluster to join
        return None
    return found


def check_reachable(address: Address, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """One line, in seconds, when nothing answers at the cluster's address or what answers is not Ray: both Ray's
    cluster port and its client port speak gRPC, whose server answers an HTTP/2 greeting with a SETTINGS frame
    (an HTTP/1 server such as the dashboard answers ``HTTP/1.1 400``)."""
    if address.host is None or address.port is None:
        return
    where = f"--ray {address.value}"
    try:
        with socket.create_connection((address.host, address.port), timeout=timeout) as probe:
            probe.sendall(_HTTP2_HELLO)
            answer = probe.recv(9)
    except OSError as error:
        reason = "timed out" if isinstance(error, TimeoutError) else (error.strerror or str(error))
        raise ConfigError(
            f"{where}: no Ray cluster answers at {address.host}:{address.port} ({reason}); start one "
            "(ray start --head) or check the address."
        ) from None
    if len(answer) < 4 or answer[3] != 4:  # the frame type of SETTINGS
        raise ConfigError(
            f"{where}: what answers at {address.host}:{address.port} is not a Ray cluster (a web server, such as "
            "the dashboard?); give the cluster's GCS port (6379 by default, the port `ray start --head` prints), or "
            "ray://HOST:10001."
        )


def _stop_in(error: BaseException) -> BaseException | None:
    """The stop a signal handler raised, if ``error`` is one or carries one: a handler's exception raised inside
    Ray's C calls (KeyboardInterrupt excepted) comes out as a ``SystemError`` caused by it."""
    if not isinstance(error, Exception):
        return error
    cause = error.__cause__
    if isinstance(error, SystemError) and cause is not None and not isinstance(cause, Exception):
        return cause
    return None


@contextlib.contextmanager
def _stops_as_raised() -> Iterator[None]:
    """A stop raised inside one of Ray's C calls goes on as itself (see :func:`_stop_in`)."""
    try:
        yield
    except SystemError as error:
        stop = _stop_in(error)
        if stop is None:
            raise
        raise stop from None


@contextlib.contextmanager
def connected(ray: Any, address: Address) -> Iterator[None]:
    """Connected to the cluster for the block (a local instance is started and stopped with it). A process
    already connected to Ray uses that connection and stays connected. The signal handlers ``ray.init`` replaces
    come back at once, and the environment variables it sets when the block ends: the library leaves the process
    as it found it."""
    if ray.is_initialized():
        yield
        return
    with environment_kept():  # ray.init sets variables of its own (RAY_AUTH_MODE, PYTHONBREAKPOINT, ...)
        _init(ray, address)
        try:
            yield
        finally:
            ray.shutdown()


def _init(ray: Any, address: Address) -> None:
    """``ray.init`` for ``address``; a local start that hit the raylet's fixed agent timeout is tried again after
    a clean shutdown, up to :data:`LOCAL_START_ATTEMPTS` times; a stop during it shuts down what was started."""
    options: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if address.local:
        options["include_dashboard"] = False
    attempts = LOCAL_START_ATTEMPTS if address.local else 1
    with signal_handlers_kept(signal.SIGTERM, signal.SIGINT):  # ray.init replaces them
        for attempt in range(1, attempts + 1):
            try:
                ray.init(address=address.value, **options)
                return
            except BaseException as error:
                ray.shutdown()
                stop = _stop_in(error)
                if stop is not None:
                    raise stop from None
                if isinstance(error, ConnectionError):
                    raise ConfigError(f"--ray {address.value}: cannot connect ({error}).") from None
                if STARTUP_TIMEOUT in str(error) and attempt < attempts:
                    continue
                what = "start a local Ray instance" if address.local else f"connect to {address.value}"
                raise GenerationError(f"--ray: could not {what}: {str(error).splitlines()[0]}") from None


def _logs(ray: Any) -> str:
    """Where Ray's logs of this run are (a Ray Client driver has no node of its own: the head's default)."""
    node = ray._private.worker._global_node
    return node.get_logs_dir_path() if node is not None else "/tmp/ray/session_latest/logs on the head node"


@dataclass(frozen=True)
class WorkerShape:
    """What each teacher worker asks Ray for, and how many the cluster holds at once."""

    num_gpus: float
    num_cpus: float
    capacity: int

    def options(self) -> dict[str, Any]:
        return {"num_gpus": self.num_gpus, "num_cpus": self.num_cpus}


def worker_shape(device: str, tensor_parallel: int, worker_gpus: float, resources: Mapping[str, float]) -> WorkerShape:
    """A GPU config's worker takes ``worker_gpus`` GPUs per tensor-parallel rank (a fraction lets two workers share
    one GPU) and a CPU config's one CPU slot; a GPU config on a cluster without GPUs is refused here."""
    gpus, cpus = float(resources.get("GPU", 0.0)), float(resources.get("CPU", 0.0))
    if device == "cpu":
        return WorkerShape(0.0, 1.0, max(int(cpus), 1))
    if gpus <= 0:
        raise ConfigError(
            f"model.device is {device!r} but the Ray cluster has no GPUs ({cpus:g} CPUs): add GPU nodes, or set "
            'model.device to "cpu" for a CPU run (--set model.device=\\"cpu\\").'
        )
    per_worker = worker_gpus * tensor_parallel
    if per_worker > 1 and not float(per_worker).is_integer():
        raise ConfigError(
            f"--worker-gpus {worker_gpus} with tensor_parallel_size {tensor_parallel} asks {per_worker:g} GPUs per "
            "worker; a worker takes a fraction of one GPU or whole GPUs."
        )
    return WorkerShape(per_worker, 1.0, max(min(math.floor(gpus / per_worker + 1e-9), int(cpus)), 0))


class _Driver:
    """One Ray run: the plan, the workers, the pool and the records."""

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
        self.run = RayRun(plan.base, "", 0, 0, 0)

    def execute(self, where: Address, options: RayOptions) -> RayRun:
        """The run on the cluster at ``where``; a stop on the way goes on with what was published."""
        started = time.monotonic()
        known = self.plan.targets[0].shard.count if self.plan.targets[0].shard is not None else None
        self.run = RayRun(self.plan.base, where.value, known or 0, 0, options.max_retries)
        try:
            self._found_published()
            if known is None or self.plan.pending:  # else every shard is published: nothing to connect for
                self.say(
                    "status",
                    "starting a local Ray instance"
                    if where.local
                    else f"connecting to the Ray cluster at {where.value}",
                )
                with _stops_as_raised(), connected(self.ray, where):
                    self._connected(options)
        except Stopped as stop:
            done = tuple(str(r.output_dir) for r in sorted(self.run.records, key=lambda r: r.index))
            stop.run = StoppedRun(done, remaining=len(done) < self.run.shards or not self.run.shards)
            raise
        finally:  # the temporary directories of workers that died or were stopped with the run
            self.run.removed += self._clean()
        self.run.seconds = time.monotonic() - started
        return self.run

    def _connected(self, options: RayOptions) -> None:
        """Generate the shards still to publish, the count fixed first when it was not known."""
        from gencache.data.sources import loaded_sources, shared_tables

        config = self.plan.config
        resources = self.ray.cluster_resources()
        engine_options = getattr(config, "engine_options", None)
        tensor_parallel = int(getattr(engine_options, "tensor_parallel_size", 1) or 1)
        shape = worker_shape(config.model.device, tensor_parallel, options.worker_gpus, resources)
        if shape.capacity < 1:
            raise ConfigError(
                f"The Ray cluster ({resources.get('GPU', 0):g} GPUs, {resources.get('CPU', 0):g} CPUs) cannot hold "
                f"one worker of {shape.num_gpus:g} GPUs and {shape.num_cpus:g} CPU; lower --worker-gpus or add nodes."
            )
        count = min(options.workers or shape.capacity, shape.capacity)
        if options.workers is not None and options.workers > shape.capacity:
            self.say(
                "warning", f"the cluster holds {shape.capacity} workers at once; --workers {options.workers} uses that"
            )
        default = not self.run.shards
        with shared_tables():  # the data files are read once for both checks
            if default:  # eight shards per worker, fewer when some shard would own no key
                from gencache.run.plan import full_split

                self.run.shards = full_split(self._phase_one([]), SHARDS_PER_WORKER * count)
                self.plan = reshard(self.plan, self.run.shards)
            keys = self._phase_one(self.plan.pending)
            # with no shared filesystem to assume (a bucket), the config and the data files go to the workers
            sources = loaded_sources() if isinstance(self.plan.base, S3Url) else None
        pending = self.plan.pending
        if not pending:
            return
        self.run.workers = min(count, len(pending))
        launch = {
            "ray": {
                "shards": self.run.shards,
                "default_shards": default,
                "workers": self.run.workers,
                "worker": shape.options(),
                "max_retries": options.max_retries,
            }
        }
        self.say(
            "info",
            f"ray {self.run.address}: {len(pending)} of {self.run.shards} shards to generate "
            f"({'up to ' + str(SHARDS_PER_WORKER) + ' per worker, each with keys' if default else '--shards'}), "
            f"{self.run.workers} workers of {shape.num_gpus:g} GPU and {shape.num_cpus:g} CPU, up to "
            f"{options.max_retries} retries per shard",
        )
        unique = list(dict.fromkeys(keys))
        samples = sum(len(t.shard.select(unique)) for t in pending if t.shard is not None)
        self._dispatch(shape, launch, samples, options, sources)

    def _phase_one(self, targets: list[Target]) -> list[str]:
        """The model-free checks of ``targets``, the shards still to publish (output location, data configs, the
        shard count); every problem raised; the run's keys returned."""
        return input_keys(replace(self.plan, pending=targets))

    def _dispatch(
        self,
        shape: WorkerShape,
        launch: dict[str, Any],
        samples: int,
        options: RayOptions,
        sources: Mapping[str, SourceInfo] | None,
    ) -> None:
        """The tally and the workers created (sent the config and the local data ``sources``, None on a shared
        filesystem), the shards handed out through Ray's pool, every worker killed at the end (and waited for, so
        that a stopped worker's temporary directory can be removed)."""
        from ray.util import ActorPool

        from gencache.core.progress import StagedProgress

        ray, run = self.ray, self.run
        name = f"gencache-tally-{uuid.uuid4().hex}"
        tally = ray.remote(RunTally).options(name=name, num_cpus=0).remote()
        located = {source: info.location for source, info in (sources or {}).items()}
        spec = WorkerSpec(self.config_path, self.overrides, run.shards, os.getcwd(), located, launch, name)
        files = ray.put({} if sources is None else driver_files(self.config_path, sources.values()))
        retries = options.max_retries
        worker = ray.remote(ShardWorker).options(**shape.options(), max_restarts=retries, max_task_retries=retries)
        actors = [worker.remote(spec, files) for _ in range(run.workers)]
        pool: Any = ActorPool(actors)  # typed Any: ray's pool has untyped methods
        for target in self.plan.pending:
            assert target.shard is not None, "a Ray run's targets are shards"
            pool.submit(lambda actor, index: actor.publish.remote(index), target.shard.index)
        bar = StagedProgress(self.progress(samples) if self.progress is not None else None, samples)
        try:
            self._collect(pool, tally, bar, shape, options.timeout)
        finally:
            bar.close()
            for actor in [*actors, tally]:
                ray.kill(actor, no_restart=True)
            gone = [a.pid.options(max_task_retries=0).remote() for a in actors]
            ray.wait(gone, num_returns=len(gone), timeout=CONNECT_TIMEOUT_S)

    def _collect(self, pool: Any, tally: Any, bar: Any, shape: WorkerShape, timeout: float) -> None:
        """Wait for the shards in steps of :data:`POLL_S`, showing the tally's progress; give up after ``timeout``
        seconds without a change."""
        from ray.exceptions import RayActorError

        ray, run = self.ray, self.run
        total = len(self.plan.pending)
        alive, done, lost = run.workers, 0, []
        shown: tuple[int, int, dict[int, int]] | None = None  # None until the tally first answers
        asked = tally.snapshot.remote()
        changed = time.monotonic()
        bar.start(bar.total)
        while pool.has_next():
            try:
                record = pool.get_next_unordered(timeout=POLL_S)
            except TimeoutError:
                record = None
            except RayActorError as error:  # a worker died more often than its retries allow: Ray gave it up
                alive -= 1
                lost.append(str(error).splitlines()[0])
                record = None
            if record is not None:
                self._record(record)
                done += 1
                changed = time.monotonic()
            final = not pool.has_next()
            if final:  # a snapshot asked now counts every shard
                asked = tally.snapshot.remote()
            if final or ray.wait([asked], timeout=0)[0]:
                snapshot = ray.get(asked)
                asked = tally.snapshot.remote()
                before = shown or (0, 0, {})
                if snapshot != shown:
                    bar.advance(snapshot[0] - before[0], snapshot[1] - before[1])
                    shown, changed = snapshot, time.monotonic()
            retries = sum(count - 1 for count in (shown or (0, 0, {}))[2].values())
            bar.stage(f"shards {len(self.plan.published) + done}/{run.shards}, workers {alive}, retries {retries}")
            if time.monotonic() - changed > timeout:
                raise GenerationError(self._stalled(shape, timeout, shown))
        missing = total - done
        if missing:
            indices = sorted({t.shard.index for t in self.plan.pending if t.shard} - {r.index for r in run.records})
            raise GenerationError(
                f"shards {', '.join(f'{i:05d}' for i in indices)} of {run.shards} were not published: their workers "
                f"died more than --max-retries ({run.max_retries}) times ({lost[-1] if lost else 'no worker left'}); "
                "the published shards stay: rerun the same command to generate the rest."
            )

    def _stalled(self, shape: WorkerShape, timeout: float, tally: tuple[int, int, dict[int, int]] | None) -> str:
        """Why nothing happened for ``timeout`` seconds (by what the ``tally`` last said, None when it never
        answered: the tally asks for no resources, only a worker process), and where Ray's logs are."""
        logs = f"Ray's logs: {_logs(self.ray)}; --ray-timeout sets the wait"
        if tally is None:
            return (
                f"no worker started in {timeout:g} s: Ray could not start worker processes (not even the run's "
                f"tally, which asks for no resources; a runtime environment that fails?); {logs}."
            )
        if not tally[2]:
            return (
                f"no worker started in {timeout:g} s: the cluster never had {shape.num_gpus:g} GPU and "
                f"{shape.num_cpus:g} CPU free for one (other jobs hold them?); {logs}."
            )
        return f"no shard made progress for {timeout:g} s (a teacher that loads for longer?); {logs}."

    def _record(self, record: ShardRecord) -> None:
        """Check a worker's record: a failure ends the run; a published shard must be of this run."""
        from gencache.run.plan import check_published

        where = f"shard {record.index}/{self.run.shards}"
        if record.status == "failed":
            raise ShardFailedError(f"{where} failed on worker {record.worker}: {record.error}", record.exit_code or 1)
        check_published(record.output_dir, self.plan.digest)
        self.run.records.append(record)
        self.say(
            "info",
            f"published {record.output_dir} ({where}, {record.entries} entries, {record.tokens} tokens, worker "
            f"{record.worker}, attempt {record.attempts})"
            if record.status == "published"
            else f"{where} was published by an earlier attempt and verifies: {record.output_dir}",
        )

    def _found_published(self) -> None:
        """Record the shards published before this run (skipped) and remove the leftovers of its dead or stopped
        writers, saying so."""
        for path in self.plan.published:
            index = next(t.shard.index for t in self.plan.targets if t.output_dir == path and t.shard is not None)
            self.run.records.append(ShardRecord(index, path, "skipped"))
            self.say("info", f"already published and verified: {path}")
        self.run.removed += self._clean()
        for removed in self.run.removed:
            self.say("info", f"removed {removed}, left by a stopped or dead writer of this run")

    def _clean(self) -> list[str]:
        """Remove what the dead writers of this run's shards left: their temporary directories (their lock is
        free), or on a bucket their uploads and uncommitted objects (their lock is stale)."""
        from gencache.artifact.publish import clean
        from gencache.artifact.upload import clean as clean_prefix

        parent, outputs = self.plan.base.parent, {t.output_dir.name for t in self.plan.targets}
        if isinstance(parent, S3Url):
            return clean_prefix(parent, outputs)
        return [str(path) for path in clean(parent, outputs)] if parent.is_dir() else []
