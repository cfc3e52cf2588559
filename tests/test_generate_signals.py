"""`gencache generate` killed or interrupted at each phase never leaves a partial output directory.

The child runs the command line with :mod:`support.phase_hooks` installed: it writes each phase name to a pipe and
then blocks until the test lets it go on, so a kill lands exactly in that phase.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gencache.artifact.publish import clean
from support.config_factory import config_dict, musique
from support.config_factory import write_config as factory_config
from support.phase_hooks import ENV as PHASE_ENV

TIMEOUT = 120
HOOKED = Path(__file__).parent / "support" / "phase_hooks.py"  # the command line, stoppable at each phase
#: every test here runs a whole `python -m gencache generate` child (torch imported, the teacher loaded)
pytestmark = pytest.mark.slow


def write_config(tmp_path: Path, teacher: Path) -> Path:
    """Six MuSiQue samples, 8 new tokens: long enough to be killed mid-run."""
    model = config_dict(tmp_path, teacher)["model"] | {"generation_kwargs": {"max_new_tokens": 8}}
    return factory_config(tmp_path, teacher, name="config.json", model=model, data_configs=[musique(num_samples=6)])


def assert_killed_run_leaves_only_a_temporary_directory(tmp_path: Path, expected: int) -> None:
    """After a kill -9: no output, ``expected`` temporary directories (their lock files beside them do not count),
    and `gencache clean` removes them and their locks, leaving only the config."""
    assert not os.path.lexists(tmp_path / "out")
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".out.gencache-") and p.suffix != ".lock"]
    assert len(leftovers) == expected
    assert clean(tmp_path) == leftovers
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


class Child:
    """A ``gencache generate`` process paused at every phase."""

    def __init__(self, config: Path, args: list[str] | None = None) -> None:
        self.phases_r, phases_w = os.pipe()
        go_r, self.go_w = os.pipe()
        env = {**os.environ, PHASE_ENV: f"{phases_w}:{go_r}"}
        self.proc = subprocess.Popen(
            [sys.executable, str(HOOKED), "generate", str(config), *(args or [])],
            env=env,
            pass_fds=(phases_w, go_r),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(phases_w)
        os.close(go_r)
        self.reader = os.fdopen(self.phases_r, "r")
        self.seen: list[str] = []
        self.stderr = ""

    def run_until(self, phase: str, occurrence: int = 1) -> None:
        """Let the child go on until it reports ``phase`` for the ``occurrence``-th time (and is paused there)."""
        count = 0
        while True:
            line = self.reader.readline()
            if not line:
                raise AssertionError(f"child ended before {phase!r}; saw {self.seen}: {self.proc.stderr.read()!r}")  # type: ignore[union-attr]
            name = line.strip()
            self.seen.append(name)
            if name == phase:
                count += 1
                if count == occurrence:
                    return
            os.write(self.go_w, b"g")

    def release(self) -> None:
        with contextlib.suppress(BrokenPipeError):
            os.write(self.go_w, b"g" * 64)

    def finish(self) -> int:
        """Let the child run to its end; its exit status."""
        try:
            while line := self.reader.readline():
                self.seen.append(line.strip())
                os.write(self.go_w, b"g")
        except BrokenPipeError:
            pass
        code = self.proc.wait(timeout=TIMEOUT)
        self.stderr = self.proc.stderr.read().decode() if self.proc.stderr else ""
        if self.proc.stderr:
            self.proc.stderr.close()
        self.reader.close()
        os.close(self.go_w)
        return code


@pytest.mark.parametrize(
    ("phase", "occurrence"),
    [("model_loaded", 1), ("appended", 3)],  # the writer's later phases: test_crash.py, in a lighter child
)
def test_kill_9_leaves_no_partial_output(tmp_path: Path, tiny_teacher_dir: Path, phase: str, occurrence: int) -> None:
    child = Child(write_config(tmp_path, tiny_teacher_dir))
    child.run_until(phase, occurrence)
    child.proc.send_signal(signal.SIGKILL)
    assert child.finish() == -signal.SIGKILL
    assert_killed_run_leaves_only_a_temporary_directory(tmp_path, 0 if phase == "model_loaded" else 1)


@pytest.mark.parametrize("signum", [signal.SIGTERM])  # SIGINT: test_engines_signals.py (one handler takes both)
def test_interrupt_mid_generation_removes_the_temporary_directory(
    tmp_path: Path, tiny_teacher_dir: Path, signum: int
) -> None:
    child = Child(write_config(tmp_path, tiny_teacher_dir))
    child.run_until("appended", 2)
    child.proc.send_signal(signum)
    child.release()
    code = child.finish()
    assert code == (130 if signum == signal.SIGINT else 143)
    assert "nothing was published" in child.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_sigterm_while_the_model_loads_is_one_line_and_exit_143(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    child = Child(write_config(tmp_path, tiny_teacher_dir))
    child.run_until("model_loaded")
    child.proc.send_signal(signal.SIGTERM)
    child.release()
    assert child.finish() == 143
    assert "Terminated by SIGTERM before generation started; nothing was published." in child.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
