"""A signal whose exception is swallowed on the way still stops the build before anything is published.

When a signal lands while an object's ``__del__`` runs (the garbage collector can run one at any moment), Python
prints "Exception ignored in ..." and goes on: the stop the handler raised is lost. The run's guard keeps the
signal and raises it again where the work goes on: before a build starts, at each entry, before the rename.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gencache.artifact.signals import SignalGuard
from gencache.artifact.writer import ArtifactBuild
from gencache.core.errors import Terminated
from support.storage_helpers import PROVENANCE, RESOLVED, make_entries

# The dropped exception is what Python reports as unraisable: that is the situation under test.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


class SignalsOnCollection:
    """An object that sends ``signum`` to this process while it is being collected, as a signal that happens to
    land inside some library's ``__del__`` does."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def __del__(self) -> None:
        signal.raise_signal(self.signum)


@pytest.fixture
def guard() -> Iterator[SignalGuard]:
    guard = SignalGuard()
    guard.install()
    try:
        yield guard
    finally:
        guard.restore(redeliver=False)


def swallow(signum: int) -> None:
    """Deliver ``signum`` inside a ``__del__``: the guard's exception is printed and dropped by Python."""
    victim = SignalsOnCollection(signum)
    del victim  # the last reference: __del__ runs here, the raise is "ignored"


def test_a_swallowed_signal_is_raised_again_at_the_next_check(guard: SignalGuard) -> None:
    swallow(signal.SIGTERM)  # had the raise not been swallowed, this line would not return
    with pytest.raises(Terminated, match="Terminated by SIGTERM; nothing was published"):
        guard.raise_pending()
    with pytest.raises(Terminated):  # and at every check after, until the work has stopped
        guard.raise_pending()


def test_a_signal_swallowed_before_the_build_starts_creates_nothing(guard: SignalGuard, tmp_path: Path) -> None:
    swallow(signal.SIGINT)
    with (
        pytest.raises(KeyboardInterrupt),
        ArtifactBuild(tmp_path / "out", provenance=PROVENANCE, header_capacity=256, signals=guard),
    ):
        pytest.fail("the build must not start after a signal")
    assert os.listdir(tmp_path) == []


def test_a_signal_swallowed_before_the_rename_publishes_nothing(guard: SignalGuard, tmp_path: Path) -> None:
    with (
        pytest.raises(Terminated),
        ArtifactBuild(tmp_path / "out", provenance=PROVENANCE, header_capacity=1024, signals=guard) as build,
    ):
        for entry in make_entries(2):
            build.writer.add(entry.key, entry.payload(), entry.texts, entry.finish_reasons)
        build.writer.finalize(resolved_config=RESOLVED, summary={})
        swallow(signal.SIGTERM)
        build.publish()
    assert os.listdir(tmp_path) == []  # no output, and the temporary directory is gone


def test_a_guard_with_no_signal_lets_the_build_publish(guard: SignalGuard, tmp_path: Path) -> None:
    with ArtifactBuild(tmp_path / "out", provenance=PROVENANCE, header_capacity=1024, signals=guard) as build:
        for entry in make_entries(2):
            build.writer.add(entry.key, entry.payload(), entry.texts, entry.finish_reasons)
        build.writer.finalize(resolved_config=RESOLVED, summary={})
        guard.raise_pending()
        build.publish()
    assert os.listdir(tmp_path) == ["out"]


def test_ctrl_c_caught_after_it_left_exec_d_code_still_exits_with_the_command_s_code(tmp_path: Path) -> None:
    """CPython 3.11 remembers a bare ``KeyboardInterrupt`` leaving code run by ``exec`` of a string (dataclasses
    does that while transformers imports) and, under ``python -m``, kills the process by SIGINT at exit although
    the command caught it: the guard's SIGINT is :class:`Interrupted`, and the command's exit code survives."""
    (tmp_path / "ctrl_c_in_exec.py").write_text(
        "import sys\n"
        "from gencache.artifact.signals import SignalGuard\n"
        "SignalGuard().install()\n"
        "try:\n"
        "    exec('import os, signal\\nos.kill(os.getpid(), signal.SIGINT)\\nfor _ in range(10**6): pass')\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
        "sys.exit(3)  # the signal never came\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "ctrl_c_in_exec"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 130, result.stderr
