"""A real local Ray cluster for the tests, and what they read of a shard base.

The raylet gives its agents a fixed 15 s to start and aborts with "The current node timed out during startup" when
they are late (ray issue #65983), which a loaded two-core machine can miss. :func:`start_cluster` therefore starts
one small instance (few CPUs, no dashboard, one torch thread per worker through the job's ``runtime_env``), and
retries a start that timed out, with a clean shutdown between the tries. One cluster serves every Ray test of the
session (the ``ray_cluster`` fixture of ``conftest.py``); :func:`cluster_without` starts one whose nodes lack a
directory, as the nodes of a cluster without a shared filesystem lack the driver's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from gencache.core.process import signal_handlers_kept

#: What each worker process of the test cluster gets: one thread for torch, the libraries offline.
WORKER_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def start_cluster(num_cpus: int = 2, attempts: int = 4) -> str:
    """Start a local Ray instance connected to this process (as few processes as Ray allows: no dashboard, no
    GPUs, ``num_cpus`` slots); return its address (other drivers connect to it). A start that timed out is tried
    again after a clean shutdown; the last failure names the attempts."""
    import ray

    from gencache.run.ray_cluster import STARTUP_TIMEOUT

    with signal_handlers_kept(signal.SIGTERM, signal.SIGINT):  # ray.init replaces them; other tests expect theirs
        for attempt in range(1, attempts + 1):
            try:
                context = ray.init(
                    address="local",
                    num_cpus=num_cpus,
                    num_gpus=0,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                    runtime_env={"env_vars": WORKER_ENV},
                )
            except Exception as error:
                ray.shutdown()
                if STARTUP_TIMEOUT not in str(error):
                    raise
                if attempt == attempts:
                    raise AssertionError(
                        f"the test Ray cluster did not start in {attempts} attempts (the raylet's agents missed its "
                        f"fixed 15 s on this loaded machine): {str(error).splitlines()[0]}"
                    ) from error
                continue
            address: str = context.address_info["gcs_address"]
            return address
    raise AssertionError("unreachable: the last attempt returns or raises")


#: The shell that starts a Ray head in its own mount namespace over an empty tmpfs at "$1", on port "$2".
_HEAD_WITHOUT = (
    'mount -t tmpfs gencache-hidden "$1" && exec "$3" -m ray.scripts.scripts start --head --block --port "$2" '
    "--num-cpus 2 --num-gpus 0 --include-dashboard false --disable-usage-stats"
)


@contextlib.contextmanager
def cluster_without(hidden: Path, env: Mapping[str, str], attempts: int = 4) -> Iterator[str]:
    """A Ray head (2 CPUs) in a mount namespace of its own, where ``hidden`` is an empty tmpfs: the processes it
    starts, its workers among them, cannot see what the test keeps there, as a node of a cluster without a shared
    filesystem cannot see the driver's directory. Its address for the block (its processes get ``env`` and the
    working directory above ``hidden``); a start that timed out is tried again; stopped when the block ends."""
    flags = ["--mount"] if os.geteuid() == 0 else ["--map-root-user", "--mount"]
    if subprocess.run(["unshare", *flags, "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("this machine gives no process a mount namespace of its own (unshare --mount)")
    log = hidden.parent / f"{hidden.name}-ray-head.log"
    for attempt in range(1, attempts + 1):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        with log.open("w") as out:
            head = subprocess.Popen(
                ["unshare", *flags, "sh", "-c", _HEAD_WITHOUT, "sh", str(hidden), str(port), sys.executable],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=hidden.parent,
                start_new_session=True,
            )
        while head.poll() is None and "Ray runtime started" not in log.read_text():
            time.sleep(0.5)
        if head.poll() is None:
            break
        if "timed out during startup" not in log.read_text() or attempt == attempts:
            raise AssertionError(f"the Ray head without {hidden} did not start: {log.read_text()[-2000:]}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        head.terminate()  # Ray drains the node for up to 30 s, then stops every process it started
        try:
            head.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()


def entry_digests(base: Path) -> dict[str, str]:
    """Every key's content digest over the shard directories of ``base`` (or the artifact ``base`` itself)."""
    from gencache.artifact.shards import expand_output

    digests: dict[str, str] = {}
    for directory in expand_output(base)[0]:
        manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
        for key, entry in manifest["entries"].items():
            assert key not in digests, f"{key} is in two shards"
            digests[key] = entry["content_digest"]
    return digests


def temporary_directories(parent: Path) -> list[str]:
    """The gencache temporary directories (and their lock files) left in ``parent``."""
    return sorted(name for name in os.listdir(parent) if ".gencache-" in name)
