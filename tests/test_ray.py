"""`gencache generate --ray` on a real local Ray cluster (two CPU workers, the tiny teacher): the shard base equals
`--shards N` in one process and the unsharded run key for key, greedy and sampled (on the continuous engine);
a worker killed with SIGKILL in the middle of a shard is replaced and its shard generated again; a driver killed
mid-run is resumed by the same command; workers that cannot see the driver's directory publish to a bucket from the
files the driver sends; each refusal is one line and exit 2 before anything loads."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import gencache
from gencache.artifact.names import shard_dir_name
from gencache.artifact.reader import CacheReader, read_resolved_config
from gencache.cli.app import run as cli_run
from gencache.cli.render import RunProgress
from gencache.data.recipes import sample_source
from gencache.run.plan import Overrides
from gencache.run.ray import RayOptions, generate_on_ray
from support.config_factory import config_dict, hotpot_qa, musique
from support.ray_helpers import WORKER_ENV, cluster_without, entry_digests, temporary_directories
from support.s3 import S3Env
from test_shards_run import write_config as shards_run_config

SHARDS = 6
SAMPLING = {"max_new_tokens": 6, "do_sample": True, "temperature": 1.3, "top_k": 20, "num_return_sequences": 2}


def write_config(
    tmp_path: Path, teacher: Path, generation: dict[str, Any] | None = None, engine: str = "transformers"
) -> Path:
    """``--shards``'s test config (six MuSiQue and six HotpotQA samples: every one of six shards owns keys), with
    ``generation`` as its generation settings when given, on ``engine``."""
    config = shards_run_config(tmp_path, teacher)
    document = json.loads(config.read_text(encoding="utf-8"))
    document["engine"] = engine
    if generation is not None:
        document["model"]["generation_kwargs"] = generation
    config.write_text(json.dumps(document), encoding="utf-8")
    return config


def cli(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``gencache generate CONFIG ARGS`` in its own process (a driver of its own)."""
    return subprocess.Popen(
        [sys.executable, "-m", "gencache", "generate", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=config.parent,
    )


def shard_path(base: Path, index: int) -> Path:
    return Path(shard_dir_name(str(base), index, SHARDS))


@pytest.mark.parametrize(
    ("generation", "engine"),
    [(None, "transformers"), (SAMPLING, "transformers-continuous")],
    ids=["greedy", "sampled-continuous"],
)
def test_ray_base_equals_one_process_and_unsharded(
    tmp_path: Path,
    tiny_teacher_dir: Path,
    ray_cluster: str,
    generation: dict[str, Any] | None,
    engine: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = write_config(tmp_path, tiny_teacher_dir, generation, engine=engine)
    base = tmp_path / "out"
    if generation is None:  # the library, with the run's one progress display
        shown = io.StringIO()
        result = generate_on_ray(
            config,
            RayOptions(ray_cluster, SHARDS, 2),
            progress=lambda total: RunProgress(total, stream=shown),
        )
        assert result.output_dir == base and result.shards == SHARDS and result.workers == 2
        assert sorted(result.published) == [shard_path(base, i) for i in range(SHARDS)]
        assert all(record.attempts == 1 and record.worker for record in result.records)
        last = shown.getvalue().strip().splitlines()[-1]
        assert f"[shards {SHARDS}/{SHARDS}, workers 2, retries 0]" in last and "12/12 samples (100.0%)" in last
    else:  # the command: the table per shard on stderr, the shard base on stdout
        assert cli_run(["generate", str(config), "--ray", ray_cluster, "--shards", str(SHARDS), "--workers", "2"]) == 0
        printed = capsys.readouterr()
        assert printed.out.strip() == str(base)
        assert f"{SHARDS} shards published, 0 already published (skipped), 0 retries, 2 workers" in printed.err
    assert cli_run(["verify", str(base)]) == 0
    one_process = gencache.generate(config, shards=SHARDS, output_dir=tmp_path / "one")
    assert entry_digests(base) == entry_digests(one_process)  # which equals the unsharded run's (test_sampling)
    for index in range(SHARDS):  # the same keys in each shard as the one-process run's
        shard = json.loads((shard_path(base, index) / "manifest.json").read_text(encoding="utf-8"))
        theirs = json.loads((shard_path(tmp_path / "one", index) / "manifest.json").read_text(encoding="utf-8"))
        assert shard["entries"] == theirs["entries"] and shard["summary"] == theirs["summary"]
        resolved = json.loads((shard_path(base, index) / "resolved_config.json").read_text(encoding="utf-8"))
        assert resolved["launch"]["ray"]["shards"] == SHARDS and resolved["launch"]["ray"]["workers"] == 2
    assert temporary_directories(tmp_path) == []


def wait_for(condition: Any, what: str, timeout: float = 300.0) -> Any:
    """Poll ``condition`` every 20 ms until it returns something true (a test's own deadline, not a measurement)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def building(parent: Path) -> list[str]:
    """The temporary directories of shard builds in progress under ``parent`` (not their lock files)."""
    return [
        name for name in temporary_directories(parent) if name.startswith(".out-shard-") and not name.endswith(".lock")
    ]


def test_a_killed_driver_s_command_run_again_generates_the_rest_replacing_a_worker_killed_mid_shard(
    tmp_path: Path, tiny_teacher_dir: Path, ray_cluster: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The driver killed once a shard is published leaves an incomplete base; the same command generates the rest,
    and a worker killed with SIGKILL in the middle of one of those shards is replaced and its shard generated
    again."""
    slow = {"max_new_tokens": 96, "min_new_tokens": 96}  # long enough shards to kill the driver and a worker mid-run
    config = write_config(tmp_path, tiny_teacher_dir, slow)
    base = tmp_path / "out"
    args = ["--ray", ray_cluster, "--shards", str(SHARDS), "--workers", "2", "--json"]
    driver = cli(config, *args)
    wait_for(lambda: any(shard_path(base, i).exists() for i in range(SHARDS)), "a published shard")
    driver.kill()
    driver.communicate(timeout=60)
    done = [shard_path(base, i) for i in range(SHARDS) if shard_path(base, i).exists()]
    assert 0 < len(done) < SHARDS, "the driver was killed mid-run"
    assert cli_run(["inspect", str(base)]) == 1  # the incomplete base names its missing shards
    assert "missing" in capsys.readouterr().out
    time.sleep(1.0)  # the killed driver's workers go with it; a straggler's publish is refused by the rename
    left = set(building(tmp_path))  # the killed workers' directories (the rerun removes them)
    rerun = cli(config, *args)
    name = wait_for(lambda: [n for n in building(tmp_path) if n not in left], "a shard's temporary directory")[0]
    os.kill(int(name.rsplit("-", 2)[1]), signal.SIGKILL)  # .NAME.gencache-HOST-PID-HEX: the worker writing it
    stdout, stderr = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, stderr
    summary = json.loads(stdout)
    records = {Path(r["output_dir"]): r for r in summary["per_shard"]}
    assert sorted(records) == [shard_path(base, i) for i in range(SHARDS)]
    skipped = {path for path, record in records.items() if record["status"] == "skipped"}
    assert skipped >= set(done) and summary["skipped"] == len(skipped)
    assert all(record["status"] == "published" for path, record in records.items() if path not in skipped)
    killed = base.parent / name[1:].split(".gencache-")[0]
    assert records[killed]["attempts"] == 2 and summary["retries"] == 1
    assert temporary_directories(tmp_path) == []  # the dead workers' directories were removed, never published
    assert cli_run(["verify", str(base)]) == 0
    reference = gencache.generate(config, shards=SHARDS, output_dir=tmp_path / "one")
    assert entry_digests(base) == entry_digests(reference)


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--ray", "--shard", "0/2"], {}, "drop --shard 0/2"),
        (["--ray"], {"WORLD_SIZE": "2", "RANK": "1"}, "rank 1 of 2 under torchrun"),
        (["--ray"], {"SLURM_NTASKS": "4", "SLURM_PROCID": "0"}, "rank 0 of 4 under slurm"),
        (["--ray", "127.0.0.1:{port}"], {}, "no Ray cluster answers at 127.0.0.1:{port}"),
        (["--ray", "not-an-address"], {}, "is not a Ray address"),
        (["--ray", "--workers", "0"], {}, "--workers must be at least 1"),
    ],
    ids=["shard", "torchrun", "slurm", "unreachable", "malformed", "workers"],
)
def test_each_refusal_is_one_line_exit_2_and_nothing_published(
    tmp_path: Path, tiny_teacher_dir: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    port = str(free_port())
    driver = cli(config, *[a.replace("{port}", port) for a in args], env=os.environ | env)
    _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message.replace("{port}", port) in lines[0]
    assert sorted(os.listdir(tmp_path)) == ["config.json"]


def test_ray_not_installed_is_one_line_exit_2(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    code = (
        "import sys; sys.modules['ray'] = None  # as if ray were not installed: importing it raises ImportError\n"
        "from gencache.cli.app import run\n"
        f"sys.exit(run(['generate', {str(config)!r}, '--ray']))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--ray needs Ray, which is not installed" in lines[0]
    assert sorted(os.listdir(tmp_path)) == ["config.json"]


def test_a_bare_ray_option_reads_as_no_address(capsys: pytest.CaptureFixture[str]) -> None:
    """A bare ``--ray`` before another option or the config file takes no address; a word after it does."""
    from gencache.cli.app import run as cli_run

    for args in (["config.json", "--ray", "--dry-run"], ["--ray", "config.json", "--dry-run"]):
        assert cli_run(["generate", *args]) == 2
        assert "drop --ray for the dry run" in capsys.readouterr().err
    assert cli_run(["generate", "--ray", "auto"]) == 2  # auto is the address: CONFIG.json is missing
    assert "Missing argument 'CONFIG.json'" in capsys.readouterr().err


def test_a_cuda_config_on_a_cluster_without_gpus_is_refused_before_any_worker(
    tmp_path: Path, tiny_teacher_dir: Path, ray_cluster: str
) -> None:
    from gencache.core.errors import ConfigError

    config = write_config(tmp_path, tiny_teacher_dir)
    cuda = Overrides(sets=('model.device="cuda"',))
    with pytest.raises(ConfigError, match="the Ray cluster has no GPUs"):
        generate_on_ray(config, RayOptions(ray_cluster, SHARDS), overrides=cuda)
    assert sorted(os.listdir(tmp_path)) == ["config.json"]


def test_addresses_resolve_as_documented() -> None:
    from gencache.core.errors import ConfigError
    from gencache.run.ray_cluster import resolve_address

    assert resolve_address(None, {}) == "local"
    assert resolve_address(None, {"RAY_ADDRESS": "10.0.0.1:6379"}) == "10.0.0.1:6379"
    assert resolve_address("auto", {"RAY_ADDRESS": "head:6379"}) == "head:6379"
    assert resolve_address("ray://head:10001", {}) == "ray://head:10001"
    for bad in ("head", "head:port", "http://head:1", "head:70000"):
        with pytest.raises(ConfigError):
            resolve_address(bad, {})


def test_a_worker_takes_its_share_of_a_gpu_or_one_cpu() -> None:
    from gencache.core.errors import ConfigError
    from gencache.run.ray import RayOptions, worker_shape

    one_gpu = {"GPU": 1.0, "CPU": 16.0}
    assert worker_shape("cuda", 1, 0.5, one_gpu) == (0.5, 2)  # two workers share the H200
    assert worker_shape("cuda", 1, 1.0, {"GPU": 8.0, "CPU": 64.0}) == (1.0, 8)
    assert worker_shape("cuda", 4, 1.0, {"GPU": 8.0, "CPU": 64.0}) == (4.0, 2)  # vLLM's tensor-parallel size
    assert worker_shape("cpu", 1, 1.0, {"CPU": 2.0}) == (0.0, 2)
    with pytest.raises(ConfigError, match="no GPUs"):
        worker_shape("auto", 1, 1.0, {"CPU": 8.0})
    with pytest.raises(ConfigError, match="--worker-gpus"):
        RayOptions(worker_gpus=0.0)


def test_a_shard_that_cannot_succeed_ends_the_run_with_its_error_named_once(
    tmp_path: Path, tiny_teacher_dir: Path, ray_cluster: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, tiny_teacher_dir, {"max_new_tokens": 10**6})  # past the teacher's positions
    args = ["--ray", ray_cluster, "--shards", str(SHARDS), "--workers", "2", "--max-retries", "1"]
    assert cli_run(["generate", str(config), *args]) == 2
    stderr = capsys.readouterr().err
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "failed on worker" in errors[0] and "max_new_tokens" in errors[0], stderr
    assert not any(shard_path(tmp_path / "out", i).exists() for i in range(SHARDS))
    assert temporary_directories(tmp_path) == []


def test_without_an_address_a_local_instance_under_uv_run_runs_the_shards_and_the_process_is_left_as_found(
    tmp_path: Path, tiny_teacher_dir: Path
) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    code = f"""
import json, os, signal, sys
import gencache
environment, handlers = dict(os.environ), [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)]
base = gencache.generate({str(config)!r}, ray=gencache.RayOptions(workers=1), shards=2)
import ray
print(json.dumps({{
    "base": str(base),
    "connected": ray.is_initialized(),
    "environment": dict(os.environ) == environment,
    "handlers": [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)] == handlers,
}}))
"""
    # started as `uv run` starts it: Ray's uv integration would start the workers with `uv run` (here a `uv` that
    # cannot start anything) in a packed copy of the working directory; a local instance runs them as the driver
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uv").write_text("#!/bin/sh\nexit 1\n", encoding="utf-8")
    (bin_dir / "uv").chmod(0o755)
    (tmp_path / "run").write_text("import subprocess, sys\nsys.exit(subprocess.call(sys.argv[1:]))\n")
    env = {name: value for name, value in os.environ.items() if not name.startswith("RAY_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    result = subprocess.run(
        ["uv", "run", sys.executable, "-c", code],
        executable=sys.executable,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found == {"base": str(tmp_path / "out"), "connected": False, "environment": True, "handlers": True}
    assert cli_run(["verify", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == [
        shard_dir_name("out", 0, 2),
        shard_dir_name("out", 1, 2),
    ]


def test_an_http_server_at_the_address_is_one_line_exit_2(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    """The dashboard's port (an HTTP server) given as the cluster's: refused in seconds, not Ray's minutes."""
    import http.server
    import threading

    config = write_config(tmp_path, tiny_teacher_dir)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        driver = cli(config, "--ray", f"localhost:{server.server_address[1]}")
        _, stderr = driver.communicate(timeout=120)
    finally:
        server.shutdown()
    assert driver.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a Ray cluster" in lines[0], stderr


def test_a_cluster_that_never_grants_a_worker_ends_the_run_after_the_timeout(
    tmp_path: Path, tiny_teacher_dir: Path, ray_cluster: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    from gencache.run.ray import RunTally

    config = write_config(tmp_path, tiny_teacher_dir)
    holder = ray.remote(RunTally).options(num_cpus=2).remote()  # another actor holds every CPU of the cluster
    ray.get(holder.snapshot.remote())
    try:
        code = cli_run(["generate", str(config), "--ray", ray_cluster, "--shards", "2", "--ray-timeout", "3"])
    finally:
        ray.kill(holder)
    stderr = capsys.readouterr().err
    assert code == 1, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "no worker started in 3 s" in errors[0] and "Ray's logs: " in errors[0], stderr
    assert temporary_directories(tmp_path) == []


def test_the_default_count_and_the_refusal_leave_no_shard_empty(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gencache.artifact.names import shard_of
    from gencache.run.plan import full_split

    keys = [f"{i:064x}" for i in (3, 10, 17, 24, 5, 12, 19)]  # seven keys of which the 7-way split leaves 3 empty
    assert len({shard_of(k, 7) for k in keys}) < 7
    count = full_split(keys, 16)
    assert count < 7 and len({shard_of(k, count) for k in keys}) == count
    assert full_split([], 16) == 1
    config = write_config(tmp_path, tiny_teacher_dir)  # twelve unique keys
    assert cli_run(["generate", str(config), "--shards", "16", "--dry-run"]) == 2
    stderr = capsys.readouterr().err
    named = int(stderr.split("use at most ")[1].split()[0])
    base = gencache.generate(config, shards=named)
    published = [Path(shard_dir_name(str(base), index, named)) for index in range(named)]
    assert all(json.loads((p / "manifest.json").read_text())["entries"] for p in published)


#: A driver whose ``ray.init`` is stopped by the signal ``argv[1]`` a moment after it began (while it connects).
STOPPED_WHILE_CONNECTING = """
import os, sys, threading
import ray
init = ray.init
def connecting(*args, **kwargs):
    threading.Timer(0.2, os.kill, (os.getpid(), int(sys.argv[1]))).start()
    return init(*args, **kwargs)
ray.init = connecting
from gencache.cli import main
main(sys.argv[2:])
"""


class Driver:
    """A ``generate --ray`` driver in its own process whose stderr lines are read as they come (``connecting``: a
    signal stops it while ``ray.init`` runs)."""

    def __init__(
        self, config: Path, args: list[str], env: dict[str, str] | None = None, connecting: int | None = None
    ) -> None:
        import queue
        import threading

        if connecting is None:
            self.process = cli(config, *args, env=env)
        else:
            self.process = subprocess.Popen(
                [sys.executable, "-c", STOPPED_WHILE_CONNECTING, str(connecting), "generate", str(config), *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=config.parent,
            )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.stdout: list[str] = []
        assert self.process.stderr is not None and self.process.stdout is not None
        errors, output = self.process.stderr, self.process.stdout

        def read() -> None:
            for line in errors:
                self.lines.put(line.rstrip("\n"))
            self.lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        self.reader = threading.Thread(target=lambda: self.stdout.extend(output), daemon=True)
        self.reader.start()

    def wait_for_line(self, text: str, timeout: float = 300.0) -> None:
        """Read the driver's stderr up to the first line that starts with ``text``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            if line is None:
                raise AssertionError(f"the driver ended before {text!r}: {self.seen}")
            self.seen.append(line)
            if line.startswith(text):
                return
        raise AssertionError(f"no line starting with {text!r}: {self.seen}")

    def finish(self, timeout: float = 600.0) -> tuple[int, str, list[str]]:
        code = self.process.wait(timeout=timeout)
        self.reader.join(timeout=60)
        while (line := self.lines.get(timeout=60)) is not None:
            self.seen.append(line)
        return code, "".join(self.stdout), self.seen


@pytest.mark.slow
def test_a_stopped_ray_run_resumes_with_the_same_command_to_the_one_process_artifact(
    tmp_path: Path, tiny_teacher_dir: Path, ray_cluster: str
) -> None:
    """SIGINT and SIGTERM while connecting (where ``ray.init`` replaces both handlers), SIGTERM while the workers
    start and SIGINT in the middle of a shard: each stop is one line and 130/143 without Ray's own output, leaves
    no temporary directory behind, and the same command (no --shards: the default count, then the started split's)
    goes on until the base equals ``--shards N`` in one process, every shard owning keys."""
    slow = {"max_new_tokens": 48, "min_new_tokens": 48}
    config = write_config(tmp_path, tiny_teacher_dir, slow)
    base = tmp_path / "out"
    args = ["--ray", ray_cluster, "--workers", "2", "--json"]
    moments = [
        (None, signal.SIGINT),  # while connecting
        (None, signal.SIGTERM),
        ("ray ", signal.SIGTERM),  # "ray ADDRESS: N of M shards to generate": while the workers start
        ("published ", signal.SIGINT),  # in the middle of the next shard
    ]
    for moment, signum in moments:
        driver = Driver(config, args, connecting=signum if moment is None else None)
        if moment is not None:
            driver.wait_for_line(moment)
            driver.process.send_signal(signum)
        code, _, lines = driver.finish(timeout=120)
        assert code == 128 + signum, lines
        assert lines[-1].startswith(f"Terminated by {signal.Signals(signum).name}"), lines
        assert not any("internal error" in line or "Traceback" in line for line in lines), lines
        assert not any(line.startswith("[20") or "Token authentication" in line for line in lines), lines  # Ray's
        assert building(tmp_path) == [], lines
    code, stdout, lines = Driver(config, args).finish()
    assert code == 0, lines
    summary = json.loads(stdout)
    count = summary["shards"]
    assert summary["published"] + summary["skipped"] == count and summary["skipped"] >= 1
    assert all(record["entries"] > 0 for record in summary["per_shard"] if record["status"] != "skipped")
    assert cli_run(["verify", str(base)]) == 0
    reference = gencache.generate(config, shards=count, output_dir=tmp_path / "one")
    assert entry_digests(base) == entry_digests(reference)
    assert temporary_directories(tmp_path) == []
    code, stdout, lines = Driver(config, args[:-1]).finish()  # once more, the table: every shard is published
    assert code == 0 and stdout.strip() == str(base), lines
    assert f"0 shards published, {count} already published (skipped)" in lines[-1], lines


@pytest.mark.slow
def test_a_local_instance_stops_with_its_driver(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    """SIGTERM while the workers of a local instance start: exit 143 in one line, and every process of the
    instance (raylet, GCS, workers) is gone with the driver."""
    import psutil

    config = write_config(tmp_path, tiny_teacher_dir)
    env = {name: value for name, value in os.environ.items() if not name.startswith("RAY_")}
    driver = Driver(config, ["--ray", "local", "--shards", "2"], env)
    driver.wait_for_line("ray local: ")
    instance = psutil.Process(driver.process.pid).children(recursive=True)
    driver.process.send_signal(signal.SIGTERM)
    code, _, lines = driver.finish(timeout=120)
    assert code == 143 and lines[-1].startswith("Terminated by SIGTERM"), lines
    assert instance, "the driver started a local instance"
    _, alive = psutil.wait_procs(instance, timeout=60)
    assert alive == [], [p.cmdline() for p in alive]


@pytest.mark.slow
def test_workers_that_cannot_start_end_the_run_after_the_timeout_naming_the_cause(
    tmp_path: Path, tiny_teacher_dir: Path
) -> None:
    """The newcomer's `uv run` driver, with Ray's uv integration asked for explicitly: every worker process is
    started through a `uv` that fails, and the driver ends after --ray-timeout with one line naming the cause and
    Ray's logs, exit 1."""
    config = write_config(tmp_path, tiny_teacher_dir)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uv").write_text("#!/bin/sh\nexit 1\n", encoding="utf-8")
    (bin_dir / "uv").chmod(0o755)
    (tmp_path / "run").write_text("import subprocess, sys\nsys.exit(subprocess.call(sys.argv[1:]))\n")
    env = {name: value for name, value in os.environ.items() if not name.startswith("RAY_")}
    env |= {"PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "1"}
    argv = ["generate", str(config), "--ray", "local", "--shards", "2", "--ray-timeout", "5"]
    result = subprocess.run(
        ["uv", "run", sys.executable, "-m", "gencache", *argv],
        executable=sys.executable,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "no worker started in 5 s: Ray could not start worker processes" in errors[0]
    assert "Ray's logs: /" in errors[0] and not any(line.startswith("[20") for line in result.stderr.splitlines())


def test_workers_that_cannot_see_the_driver_directory_publish_to_a_bucket_and_a_rerun_resumes(
    tmp_path: Path, tiny_teacher_dir: Path, s3_env: S3Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver's config, its ``_default.json`` and its data (named relative to the driver's working directory)
    live in a directory that the cluster's nodes lack (a Ray head in a mount namespace of its own, where the
    directory is an empty tmpfs): the workers plan from what the driver sends, publish both shards to the bucket
    equal key for key to ``--shards 2`` in one process, recording the driver's paths and digests; the same command
    again generates nothing."""
    home = tmp_path / "driver" / "home"  # the driver's working directory: the nodes have no tmp_path/driver/home
    for name in ("musique", "hotpot_qa"):
        shutil.copytree(sample_source(name), home / "data" / name)
    sources = [musique(source="data/musique"), hotpot_qa(source="data/hotpot_qa")]  # hotpot_qa's in fullwiki/
    document = config_dict(home, tiny_teacher_dir, data_configs=sources)
    (home / "_default.json").write_text(json.dumps({"gen_batch_size": document.pop("gen_batch_size")}))
    (home / "config.json").write_text(json.dumps(document), encoding="utf-8")
    url = s3_env.url("runs/out")
    env = {name: value for name, value in os.environ.items() if not name.startswith("RAY_")}
    env |= WORKER_ENV | {"RAY_AUTH_MODE": "disabled"}  # AWS_* from s3_env: what every node's pod spec would set
    with cluster_without(home.parent, env) as address:
        argv = [sys.executable, "-m", "gencache", "generate", "config.json", "--ray", address, "--shards", "2"]
        argv += ["--output-dir", url, "--json"]
        runs = [subprocess.run(argv, capture_output=True, text=True, env=env, cwd=home, timeout=600) for _ in range(2)]
    first, again = runs
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["published"] == 2
    assert again.returncode == 0, again.stderr
    assert (json.loads(again.stdout)["published"], json.loads(again.stdout)["skipped"]) == (0, 2)
    assert len(s3_env.keys("runs/")) == 6 and s3_env.uploads() == []  # two whole shards, nothing else
    monkeypatch.chdir(home)  # the relative sources, as the driver read them
    one = gencache.generate(home / "config.json", shards=2, output_dir=tmp_path / "one")
    for index in range(2):
        ours = CacheReader(shard_dir_name(url, index, 2), cache_dir=tmp_path / "cache")
        theirs = CacheReader(shard_dir_name(str(one), index, 2))
        assert list(ours) == list(theirs) and len(ours)
        for key in theirs:
            assert ours[key].texts == theirs[key].texts
            assert [s.tolist() for s in ours[key].sequences] == [s.tolist() for s in theirs[key].sequences]
        recorded, expected = (read_resolved_config(reader.path) for reader in (ours, theirs))
        assert recorded["sources"] == expected["sources"]  # the driver's paths and their digests
        assert recorded["sources"][0]["location"] == str(home / "data" / "musique")
        assert recorded["working_directory"] == str(home)  # where the driver read the relative paths
