"""`gencache clean`: a temporary directory is dead when its writer's lock is free (whatever PID namespace wrote
it), a directory without a lock file is no writer's and is kept (the rename probe's scratch directories aside,
judged by their pid), and concurrent cleaners all succeed."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gencache.artifact.publish import clean, host_tag, lock_path
from gencache.artifact.writer import ArtifactBuild
from gencache.cli.app import run as cli_run

PROVENANCE = {
    "model_path": "teacher",
    "tokenizer_path": "teacher",
    "dtype": "float32",
    "tokenizer": {"padding_side": "left", "pad_token_id": 0, "eos_token_id": 1},
}
DEAD_PID = 4_000_000  # above any pid_max: no process of this host has it


def temp_dir(parent: Path, pid: int, token: str, *, locked: bool) -> Path:
    path = parent / f".out.gencache-{host_tag()}-{pid}-{token}"
    path.mkdir()
    (path / "cache.safetensors").write_bytes(b"x" * 64)
    if locked:
        lock_path(path).write_bytes(b"")
    return path


def test_a_locked_directory_is_kept_even_when_its_pid_is_not_on_this_host(tmp_path: Path) -> None:
    # A writer in another PID namespace with the same host name: its pid means nothing here, its lock does.
    live = temp_dir(tmp_path, DEAD_PID, "0000aaaa", locked=True)
    holder = os.open(lock_path(live), os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        assert clean(tmp_path) == []
        assert live.is_dir()
    finally:
        os.close(holder)  # the writer dies: the kernel drops its lock
    assert clean(tmp_path) == [live]
    assert os.listdir(tmp_path) == []


def test_the_live_lock_of_a_real_build_protects_it(tmp_path: Path) -> None:
    with ArtifactBuild(tmp_path / "out", provenance=PROVENANCE, header_capacity=256) as build:
        assert build.temp_dir is not None and lock_path(build.temp_dir).exists()
        assert clean(tmp_path) == []
        assert build.temp_dir.is_dir()
    assert os.listdir(tmp_path) == []  # left without publishing: directory and lock file are gone


def test_a_directory_without_a_lock_file_is_kept_whatever_its_pid(tmp_path: Path) -> None:
    dead = temp_dir(tmp_path, DEAD_PID, "0000bbbb", locked=False)
    alive = temp_dir(tmp_path, os.getpid(), "0000cccc", locked=False)
    assert clean(tmp_path) == []
    assert dead.is_dir() and alive.is_dir()


def test_the_rename_probe_s_scratch_directories_of_dead_processes_of_this_host_are_removed(tmp_path: Path) -> None:
    dead = tmp_path / f".probe.rename-probe-a.gencache-{host_tag()}-{DEAD_PID}-0000bbbb"
    alive = tmp_path / f".probe.rename-probe-b.gencache-{host_tag()}-{os.getpid()}-0000cccc"
    other_host = tmp_path / f".probe.rename-probe-c.gencache-elsewhere-{DEAD_PID}-0000dddd"
    for path in (dead, alive, other_host):
        path.mkdir()
    assert clean(tmp_path, outputs={"out"}) == [dead]  # a run's clean of its own outputs takes them too
    assert alive.is_dir() and other_host.is_dir()


def test_a_stale_lock_file_without_its_directory_is_removed(tmp_path: Path) -> None:
    stale = lock_path(tmp_path / f".out.gencache-{host_tag()}-{DEAD_PID}-0000eeee")
    stale.write_bytes(b"")
    (tmp_path / "unrelated.lock").write_bytes(b"")
    assert clean(tmp_path) == []
    assert sorted(os.listdir(tmp_path)) == ["unrelated.lock"]


def test_three_concurrent_cleaners_all_succeed(tmp_path: Path) -> None:
    dirs = [temp_dir(tmp_path, DEAD_PID, f"{i:08x}", locked=True) for i in range(60)]
    for path in dirs:  # enough files that the removals overlap
        for n in range(30):
            (path / f"f{n}").write_bytes(b"")
    command = [sys.executable, "-m", "gencache", "clean", str(tmp_path)]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [(*proc.communicate(timeout=120), proc.returncode) for proc in procs]
    for _, err, code in results:
        assert code == 0, err
        assert err == ""
    removed = [line for out, _, _ in results for line in out.splitlines() if line.startswith("removed ")]
    # every directory is reported by exactly one cleaner: the one holding its lock
    assert sorted(removed) == sorted(f"removed {p}" for p in dirs)
    assert os.listdir(tmp_path) == []


def test_clean_of_a_missing_parent_is_bad_input(tmp_path: Path) -> None:
    assert cli_run(["clean", str(tmp_path / "missing")]) == 2


def test_a_complete_artifact_with_a_temporary_looking_name_is_never_removed(tmp_path: Path) -> None:
    # A user's output_dir may look like a leftover; a directory holding every artifact file is never one.
    looks_temporary = tmp_path / f".x.gencache-{host_tag()}-{DEAD_PID}-0123abcd"
    looks_temporary.mkdir()
    for name in ("cache.safetensors", "manifest.json", "resolved_config.json"):
        (looks_temporary / name).write_bytes(b"{}")
    assert clean(tmp_path) == []
    assert sorted(os.listdir(looks_temporary)) == ["cache.safetensors", "manifest.json", "resolved_config.json"]


def test_generate_refuses_an_output_dir_named_like_a_temporary_directory(tmp_path: Path) -> None:
    from gencache.artifact.publish import check_output_path
    from gencache.core.errors import ConfigError

    with pytest.raises(ConfigError, match="gencache temporary directory"):
        check_output_path(tmp_path / f".x.gencache-{host_tag()}-123-0123abcd")
    for too_long in (tmp_path / ("n" * 256), tmp_path / ("n" * 240), tmp_path.joinpath(*["d" * 100] * 42)):
        with pytest.raises(ConfigError, match=r"is too long.*choose a shorter path"):
            check_output_path(too_long)


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs that the test fills and then remounts read-only (needs root, as CI has)."""
    mount = tmp_path / "ro"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)]).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_clean_on_a_read_only_file_system_says_what_it_could_not_remove(
    read_only_mount: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    leftover = temp_dir(read_only_mount, DEAD_PID, "0000ffff", locked=True)
    subprocess.run(["mount", "-o", "remount,ro", str(read_only_mount)], check=True)
    assert cli_run(["clean", str(read_only_mount)]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "could not remove 1 temporary directory" in err and str(leftover) in err
    assert leftover.is_dir()


def test_a_run_cleans_only_its_own_outputs_leftovers(tmp_path: Path) -> None:
    mine = tmp_path / f".out-shard-00001-of-00004.gencache-{host_tag()}-{DEAD_PID}-0000cccc"
    mine.mkdir()
    lock_path(mine).write_bytes(b"")
    theirs = temp_dir(tmp_path, DEAD_PID, "0000dddd", locked=True)  # another run's (output "out"), dead too
    assert clean(tmp_path, outputs={"out-shard-00001-of-00004", "out-shard-00002-of-00004"}) == [mine]
    assert not lock_path(mine).exists() and theirs.is_dir() and lock_path(theirs).exists()
    assert clean(tmp_path) == [theirs]
