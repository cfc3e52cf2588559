"""Kill -9 at every phase, SIGTERM/SIGINT, a file-size limit, racing writers, an empty directory appearing at the
output path: in a child process writing a real artifact, stopped at each moment by the wrappers that
:mod:`support.phase_hooks` installs in it."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from gencache.artifact.header import header_capacity
from gencache.artifact.names import LENGTH_PREFIX_BYTES
from gencache.artifact.publish import clean
from gencache.artifact.reader import CacheReader, verify
from gencache.core.errors import FormatError
from support.phase_hooks import ENV as PHASE_ENV
from support.storage_helpers import CHILD, PYTHON, child_env, make_entries

ENTRIES = 6
LENGTH = 40


class Child:
    """A writer child whose phases are reported on a pipe and which waits for a byte before going on."""

    def __init__(self, output: Path, *args: str, entries: int = ENTRIES, length: int = LENGTH, wait: bool = True):
        self.phase_read, phase_write = os.pipe()
        go_read, self.go_write = os.pipe()
        hook = f"{phase_write}:{go_read}" if wait else str(phase_write)
        self.process = subprocess.Popen(
            [PYTHON, str(CHILD), "build", str(output), str(entries), str(length), *args],
            pass_fds=(phase_write, go_read),
            env=child_env(**{PHASE_ENV: hook}),
            cwd=CHILD.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        os.close(phase_write)
        os.close(go_read)
        self.phases = os.fdopen(self.phase_read, "r", buffering=1)
        self.seen: dict[str, int] = {}

    def run_to(self, phase: str, occurrence: int = 1) -> None:
        """Let the child run until it reports ``phase`` for the ``occurrence``-th time; it then waits."""
        for line in self.phases:
            name = line.strip()
            self.seen[name] = self.seen.get(name, 0) + 1
            if name == phase and self.seen[name] == occurrence:
                return
            os.write(self.go_write, b"x")
        _out, err = self.process.communicate()
        raise AssertionError(f"child exited ({self.process.returncode}) before {phase} #{occurrence}: {err.decode()}")

    def release(self) -> None:
        """Let the child run to its end without waiting at phases."""
        os.write(self.go_write, b"x" * 64)

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        with contextlib.suppress(BrokenPipeError):
            self.release()
        out, err = self.process.communicate(timeout=timeout)
        self.close()
        return self.process.returncode, out.decode(), err.decode()

    def kill(self, signum: int = signal.SIGKILL) -> int:
        self.process.send_signal(signum)
        if signum == signal.SIGKILL:
            self.process.wait(timeout=30)
            self.process.communicate()
            self.close()
            return self.process.returncode
        return self.finish()[0]

    def close(self) -> None:
        for close in (self.phases.close, lambda: os.close(self.go_write)):
            with contextlib.suppress(OSError):
                close()


def temp_dirs(parent: Path) -> list[str]:
    """Temporary directories (their ``.lock`` files beside them are not counted; clean removes them too)."""
    return sorted(name for name in os.listdir(parent) if ".gencache-" in name and not name.endswith(".lock"))


def assert_no_output_or_valid(output: Path) -> None:
    if os.path.lexists(output):
        assert verify(output) == [], f"{output} exists but does not verify"
        assert len(CacheReader(output)) == ENTRIES


KILL_PHASES = [
    ("temp_created", 1),
    ("appended", 1),
    ("appended", 3),
    ("appended", ENTRIES),
    ("header_written", 1),
    ("manifest_written", 1),
    ("resolved_written", 1),
    ("renamed", 1),
    ("published", 1),
]


@pytest.mark.parametrize(("phase", "occurrence"), KILL_PHASES)
def test_kill_9_at_each_phase_leaves_nothing_or_a_valid_artifact(tmp_path: Path, phase: str, occurrence: int) -> None:
    # once per phase: the child is paused at the phase when it is killed, so a repeat is the same kill again
    output = tmp_path / "out"
    child = Child(output)
    child.run_to(phase, occurrence)
    assert child.kill() == -signal.SIGKILL
    published = phase in ("renamed", "published")
    assert os.path.lexists(output) == published
    assert_no_output_or_valid(output)
    leftovers = temp_dirs(tmp_path)
    assert len(leftovers) == (0 if published else 1)
    for name in leftovers:  # a loader refuses what was never published, however far the writer got
        with pytest.raises(FormatError):
            CacheReader(tmp_path / name)
    assert [p.name for p in clean(tmp_path)] == leftovers
    assert temp_dirs(tmp_path) == []
    assert sorted(os.listdir(tmp_path)) == (["out"] if published else [])


def test_kill_9_at_random_moments(tmp_path: Path) -> None:
    entries = 1500
    calibration = Child(tmp_path / "calibration", entries=entries, wait=False)
    assert calibration.phases.readline().strip() == "temp_created"
    began = time.perf_counter()
    code, _, err = calibration.finish()
    assert code == 0, err
    duration = max(time.perf_counter() - began, 0.01)
    assert verify(tmp_path / "calibration") == []
    rng = random.Random(1234)
    outcomes = []
    for attempt in range(10):
        output = tmp_path / f"out{attempt}"
        child = Child(output, entries=entries, wait=False)
        assert child.phases.readline().strip() == "temp_created"
        time.sleep(rng.uniform(0, duration * 1.2))
        child.process.kill()
        child.process.wait(timeout=30)
        child.process.communicate()
        child.close()
        if os.path.lexists(output):
            assert verify(output) == []
            assert len(CacheReader(output)) == entries
            outcomes.append("published")
        else:
            outcomes.append("absent")
        clean(tmp_path)
        assert temp_dirs(tmp_path) == []
    assert len(outcomes) == 10


@pytest.mark.parametrize(("phase", "occurrence"), [("temp_created", 1), ("appended", 2), ("header_written", 1)])
def test_sigterm_removes_the_temporary_directory(tmp_path: Path, phase: str, occurrence: int) -> None:
    output = tmp_path / "out"
    child = Child(output)
    child.run_to(phase, occurrence)
    assert len(temp_dirs(tmp_path)) == 1
    assert child.kill(signal.SIGTERM) == 143
    assert os.listdir(tmp_path) == []


def test_sigint_removes_the_temporary_directory(tmp_path: Path) -> None:
    child = Child(tmp_path / "out")
    child.run_to("appended", 3)
    assert child.kill(signal.SIGINT) == 130
    assert os.listdir(tmp_path) == []


def test_sigterm_right_after_the_rename_leaves_the_complete_output(tmp_path: Path) -> None:
    output = tmp_path / "out"
    child = Child(output)
    child.run_to("renamed")
    child.process.send_signal(signal.SIGTERM)
    code, _, _ = child.finish()
    assert code == 143
    assert verify(output) == []
    assert os.listdir(tmp_path) == ["out"]


def _sizes(count: int, length: int) -> tuple[int, list[int]]:
    entries = make_entries(count, length=length)
    capacity = header_capacity(count, 1, length + 2)
    return LENGTH_PREFIX_BYTES + capacity, [sum(len(p) for p in e.payload()) for e in entries]


def test_file_size_limit_during_append_fails_clearly_and_publishes_nothing(tmp_path: Path) -> None:
    start, sizes = _sizes(10, 500)
    limit = start + sum(sizes[:3]) + sizes[3] // 2
    output = tmp_path / "out"
    result = subprocess.run(
        [PYTHON, str(CHILD), "build", str(output), "10", "500", "--fsize", str(limit)],
        env=child_env(),
        cwd=CHILD.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    message = result.stderr.strip()
    assert message.count("\n") == 0
    assert "EFBIG" in message and "ulimit -f" in message and "Nothing was published" in message
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("mode", ["renameat2", "rename"])
def test_two_writers_racing_to_one_output_exactly_one_publishes(tmp_path: Path, mode: str) -> None:
    output = tmp_path / "out"
    children = [Child(output, "--rename-mode", mode) for _ in range(2)]
    for child in children:
        child.run_to("resolved_written")
    for child in children:
        child.release()
    results = [child.finish() for child in children]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, _, err in results if code == 2)
    assert "already exists" in loser or "appeared while generating" in loser
    assert verify(output) == []
    assert os.listdir(tmp_path) == ["out"]


@pytest.mark.parametrize("mode", ["renameat2", "rename"])
def test_an_empty_directory_created_at_the_output_mid_run_is_not_replaced(tmp_path: Path, mode: str) -> None:
    output = tmp_path / "out"
    child = Child(output, "--rename-mode", mode)
    child.run_to("appended", 2)
    output.mkdir()
    code, _, err = child.finish()
    assert code == 2, err
    assert "appeared while generating" in err or "already exists" in err
    assert os.listdir(output) == []
    assert os.listdir(tmp_path) == ["out"]


def test_the_writer_core_does_not_import_torch() -> None:
    code = (
        "import sys, gencache.artifact.writer, gencache.artifact.header, gencache.artifact.manifest; "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    result = subprocess.run([PYTHON, "-c", code], env=child_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, "gencache.artifact.writer imported torch (keep gencache/__init__.py lazy)"
