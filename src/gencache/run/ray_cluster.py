"""Connecting ``generate --ray`` to a cluster: importing Ray, the address (given, ``RAY_ADDRESS`` or a local
instance), probing it within a bounded wait, ``ray.init`` with the process's signal handlers and environment kept,
and how many workers of which shape the cluster holds."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
from collections.abc import Iterator, Mapping
from typing import Any

from gencache.core.errors import ConfigError, GenerationError
from gencache.core.process import environment_kept, signal_handlers_kept

#: Seconds the probe of a cluster's address waits for it to answer.
CONNECT_TIMEOUT_S = 5.0
#: Ray's message for a node whose agents did not start in time (ray issue #65983, a loaded machine), and how often
#: a local start meets it at most.
STARTUP_TIMEOUT = "timed out during startup"
LOCAL_START_ATTEMPTS = 3
#: The first bytes of an HTTP/2 connection (RFC 9113): the client preface and an empty SETTINGS frame.
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


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
            "--ray needs Ray, which is not installed: pip install 'gencache[ray]' (or uv sync --extra ray)."
        ) from None
    return ray


def resolve_address(given: str | None, env: Mapping[str, str]) -> str:
    """The address for ``ray.init``: ``given`` (an address, ``auto`` or ``local``) or, when None, ``RAY_ADDRESS`` or
    ``local`` (an instance started here)."""
    text = (given or "").strip() or env.get("RAY_ADDRESS", "").strip() or "local"
    if text == "auto":  # RAY_ADDRESS, else the cluster `ray start` last recorded here (Ray's own lookup)
        text = env.get("RAY_ADDRESS", "").strip()
        with environment_kept(), contextlib.suppress(Exception):  # importing ray sets RAY_CLIENT_MODE
            from ray._private.services import canonicalize_bootstrap_address

            text = text or canonicalize_bootstrap_address("auto") or ""
        if not text:
            raise ConfigError(
                "--ray auto found no running Ray cluster on this machine (RAY_ADDRESS is not set and no `ray start` "
                "cluster is recorded); start one with `ray start --head`, or give its address."
            )
    scheme, _, rest = text.rpartition("://")
    host, _, port = rest.rpartition(":")
    if text != "local" and (scheme not in ("", "ray") or not host or not port.isdigit() or not 0 < int(port) < 65536):
        raise ConfigError(f"--ray {text} is not a Ray address: use HOST:PORT, ray://HOST:PORT, auto or local.")
    return text


def check_reachable(address: str) -> None:
    """One line, in seconds, when nothing answers at the cluster's address or what answers is not Ray: both Ray's
    cluster port and its client port speak gRPC, whose server answers an HTTP/2 greeting with a SETTINGS frame
    (an HTTP/1 server such as the dashboard answers ``HTTP/1.1 400``)."""
    if address == "local":
        return
    host, _, port = address.rpartition("://")[2].rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S) as probe:
            probe.sendall(_HTTP2_HELLO)
            answer = probe.recv(9)
    except OSError as error:
        reason = "timed out" if isinstance(error, TimeoutError) else (error.strerror or str(error))
        raise ConfigError(
            f"--ray {address}: no Ray cluster answers at {host}:{port} ({reason}); start one or check the address."
        ) from None
    if len(answer) < 4 or answer[3] != 4:  # the frame type of SETTINGS
        raise ConfigError(
            f"--ray {address}: what answers at {host}:{port} is not a Ray cluster (the dashboard?); give its GCS port "
            "(6379 by default, as `ray start --head` prints) or ray://HOST:10001."
        )


def _stop_in(error: BaseException) -> BaseException | None:
    """The stop a signal handler raised, if ``error`` is one or carries one: raised inside Ray's C calls, it comes
    out as a ``SystemError`` caused by it."""
    if not isinstance(error, Exception):
        return error
    cause = error.__cause__
    if isinstance(error, SystemError) and cause is not None and not isinstance(cause, Exception):
        return cause
    return None


@contextlib.contextmanager
def connected(ray: Any, address: str) -> Iterator[None]:
    """Connected to the cluster for the block (a local instance is started and stopped with it; a process already
    connected keeps its connection), with the signal handlers ``ray.init`` replaces back at once and the variables it
    sets when the block ends. A local start that hit the raylet's fixed agent timeout is tried again; a stop raised
    inside one of Ray's C calls goes on as itself."""
    attempts, dashboard = (LOCAL_START_ATTEMPTS, {"include_dashboard": False}) if address == "local" else (1, {})
    try:
        if ray.is_initialized():
            yield
            return
        with environment_kept():  # ray.init sets variables of its own (RAY_AUTH_MODE, PYTHONBREAKPOINT, ...)
            for attempt in range(1, attempts + 1):
                try:
                    with signal_handlers_kept(signal.SIGTERM, signal.SIGINT):  # ray.init replaces them
                        ray.init(address=address, log_to_driver=False, configure_logging=False, **dashboard)
                    break
                except BaseException as error:
                    ray.shutdown()  # what a failed or stopped start started
                    if _stop_in(error) is not None:
                        raise
                    if isinstance(error, ConnectionError):
                        raise ConfigError(f"--ray {address}: cannot connect ({error}).") from None
                    if STARTUP_TIMEOUT not in str(error) or attempt == attempts:
                        what = "start a local Ray instance" if address == "local" else f"connect to {address}"
                        raise GenerationError(f"--ray: could not {what}: {str(error).splitlines()[0]}") from None
            try:
                yield
            finally:
                ray.shutdown()
    except SystemError as error:
        stop = _stop_in(error)
        if stop is None:
            raise
        raise stop from None


def worker_shape(
    device: str, tensor_parallel: int, worker_gpus: float, resources: Mapping[str, float]
) -> tuple[float, int]:
    """The GPUs each worker asks Ray for (with one CPU), and how many workers the cluster holds at once: a GPU
    config's worker takes ``worker_gpus`` GPUs per tensor-parallel rank, a CPU config's none."""
    gpus, cpus = float(resources.get("GPU", 0.0)), float(resources.get("CPU", 0.0))
    if device == "cpu":
        return 0.0, max(int(cpus), 1)
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
    return per_worker, max(min(math.floor(gpus / per_worker + 1e-9), int(cpus)), 0)
