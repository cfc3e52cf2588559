"""Reaching a Ray cluster for ``generate --ray``: the refusals made before anything starts, the connection, and
the resources each teacher worker asks for.

Everything here that can refuse a run does so in seconds and before the teacher loads: ``--ray`` under a launcher's
ranks or with ``--shard``, ray not installed, an address that is not one, or one where nothing answers (a TCP
connection with a short timeout, made before Ray's own client, which waits minutes for an unreachable cluster).
``ray`` is imported inside the functions that need it, never when this module is imported.
"""

from __future__ import annotations

import contextlib
import math
import signal
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gencache.core.errors import ConfigError, GenerationError, ShardError
from gencache.core.process import environment_kept, signal_handlers_kept

#: Seconds the reachability check waits for the cluster's port to answer.
CONNECT_TIMEOUT_S = 5.0
#: Ray's message for a node whose agents did not start in time, and how often a local start meets it at most.
STARTUP_TIMEOUT = "timed out during startup"
LOCAL_START_ATTEMPTS = 3
#: Shards per worker when ``--shards`` is not given: enough that the last shards, handed to whichever worker is
#: free, leave a short tail (8 keeps 64 simulated workers within 1.05x of the ideal makespan: docs/benchmarks.md).
SHARDS_PER_WORKER = 8


def import_ray() -> Any:
    """The ray module, or one line saying how to install it. Importing ray sets ``RAY_CLIENT_MODE`` (read at that
    import only), which is taken back."""
    try:
        with environment_kept():
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
    from gencache.run.sharding import shard_from_env

    launched = shard_from_env(env)
    if launched is not None:
        raise ShardError(
            f"--ray runs the whole run from one driver, but this process is rank {launched.index} of "
            f"{launched.count} under {launched.origin}; start the driver once, outside torchrun/srun (or drop --ray)."
        )


@dataclass(frozen=True)
class Address:
    """Where ``--ray`` connects: ``value`` as given to ``ray.init`` (``"local"`` starts an instance here), and the
    host and port the reachability check opens (None for a local instance)."""

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
        from ray._private.services import canonicalize_bootstrap_address

        found: str | None = canonicalize_bootstrap_address("auto")
    except Exception:  # Ray's lookup found nothing readable: there is no cluster to join
        return None
    return found


def check_reachable(address: Address, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Open and close a TCP connection to the cluster's address, or one line saying nothing answers there."""
    if address.host is None or address.port is None:
        return
    try:
        with socket.create_connection((address.host, address.port), timeout=timeout):
            pass
    except OSError as error:
        reason = "timed out" if isinstance(error, TimeoutError) else (error.strerror or str(error))
        raise ConfigError(
            f"--ray {address.value}: no Ray cluster answers at {address.host}:{address.port} ({reason}); start one "
            "(ray start --head) or check the address."
        ) from None


@contextlib.contextmanager
def connected(ray: Any, address: Address) -> Iterator[bool]:
    """Connected to the cluster for the block (a local instance is started and stopped with it); yields whether
    this call connected. A process already connected to Ray uses that connection and stays connected. The signal
    handlers ``ray.init`` replaces come back at once, and the environment variables it sets when the block ends:
    the library leaves the process as it found it."""
    if ray.is_initialized():
        yield False
        return
    with environment_kept():  # ray.init sets variables of its own (RAY_AUTH_MODE, PYTHONBREAKPOINT, ...)
        _init(ray, address)
        try:
            yield True
        finally:
            ray.shutdown()


def _init(ray: Any, address: Address) -> None:
    """``ray.init`` for ``address``; a local start that hit the raylet's fixed 15 s agent timeout (ray issue
    #65983, a loaded machine) is tried again after a clean shutdown, up to :data:`LOCAL_START_ATTEMPTS` times."""
    options: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if address.local:
        options["include_dashboard"] = False
    attempts = LOCAL_START_ATTEMPTS if address.local else 1
    with signal_handlers_kept(signal.SIGTERM, signal.SIGINT):  # ray.init replaces them
        for attempt in range(1, attempts + 1):
            try:
                ray.init(address=address.value, **options)
                return
            except ConnectionError as error:
                raise ConfigError(f"--ray {address.value}: cannot connect ({error}).") from None
            except Exception as error:
                ray.shutdown()
                if STARTUP_TIMEOUT in str(error) and attempt < attempts:
                    continue
                what = "start a local Ray instance" if address.local else f"connect to {address.value}"
                raise GenerationError(f"--ray: could not {what}: {str(error).splitlines()[0]}") from None


@dataclass(frozen=True)
class WorkerShape:
    """What each teacher worker asks Ray for, and how many the cluster holds at once."""

    num_gpus: float
    num_cpus: float
    capacity: int

    def options(self) -> dict[str, Any]:
        return {"num_gpus": self.num_gpus, "num_cpus": self.num_cpus}

    def to_json(self) -> dict[str, Any]:
        return {"num_gpus": self.num_gpus, "num_cpus": self.num_cpus}


def worker_shape(device: str, tensor_parallel: int, worker_gpus: float, resources: Mapping[str, float]) -> WorkerShape:
    """A GPU config's worker takes ``worker_gpus`` GPUs per tensor-parallel rank (a fraction lets two workers share
    one GPU) and a CPU config's one CPU slot; a GPU config on a cluster without GPUs is refused here."""
    if not worker_gpus > 0:
        raise ConfigError(f"--worker-gpus must be more than 0, got {worker_gpus}.")
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
