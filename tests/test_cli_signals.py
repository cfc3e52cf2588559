"""The command line owns the signals: a stop at any moment of a command is one line and 130/143, also when a
library swallowed it on the way, and the handlers the caller had come back after the command.

When a signal lands while an object's ``__del__`` runs (the garbage collector can run one at any moment), Python
prints "Exception ignored in ..." and goes on: the stop the handler raised is lost. The command line delivers it
again, so it stops the code that goes on. A stop a library's bare ``except`` swallowed ends the command when it
starts or returns.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gencache.cli import signals
from gencache.cli.app import run as cli_run
from gencache.core.errors import Stopped

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SignalsOnCollection:
    """An object that sends ``signum`` to this process while it is being collected, as a signal that happens to
    land inside some library's ``__del__`` does."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def __del__(self) -> None:
        signal.raise_signal(self.signum)


def swallow_in_del(signum: int) -> None:
    """Deliver ``signum`` inside a ``__del__``: the handler's exception is dropped by Python."""
    victim = SignalsOnCollection(signum)
    del victim  # the last reference: __del__ runs here, the raise is "ignored"


def swallow_in_bare_except(signum: int) -> None:
    with contextlib.suppress(BaseException):  # what a library's bare except around an optional import does
        signal.raise_signal(signum)


def busy(seconds: float) -> None:
    """Python code that goes on after the swallowed stop (where the redelivered signal lands)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_swallowed_in_a_del_is_delivered_again_to_the_code_that_goes_on(signum: int) -> None:
    with signals.owned(), pytest.raises(Stopped) as stopped:
        swallow_in_del(signum)  # had the raise not been swallowed, this line would not return
        busy(10)
    assert stopped.value.exit_code == (130 if signum == signal.SIGINT else 143)
    assert stopped.value.message == f"Terminated by {signal.Signals(signum).name}; nothing was published."


@pytest.mark.parametrize("command", ["generate", "verify", "clean"])
def test_a_stop_swallowed_before_a_command_ends_it_at_once_and_not_the_next(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = {"generate": [str(tmp_path / "config.json")], "verify": [str(tmp_path)], "clean": [str(tmp_path)]}
    with signals.owned():
        swallow_in_bare_except(signal.SIGINT)
        assert cli_run([command, *args[command]]) == 130
    assert capsys.readouterr().err.splitlines() == ["Terminated by SIGINT; nothing was published."]
    assert os.listdir(tmp_path) == []
    assert cli_run(["clean", str(tmp_path)]) == 0  # the stop belonged to the command it ended


def test_a_command_gives_back_the_handlers_it_found(tmp_path: Path) -> None:
    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    hook = sys.unraisablehook
    assert cli_run(["clean", str(tmp_path)]) == 0
    assert {signum: signal.getsignal(signum) for signum in STOP_SIGNALS} == before
    assert sys.unraisablehook is hook


def test_ctrl_c_caught_after_it_left_exec_d_code_still_exits_with_the_command_s_code(tmp_path: Path) -> None:
    """CPython 3.11 remembers a bare ``KeyboardInterrupt`` leaving code run by ``exec`` of a string (dataclasses
    does that while transformers imports) and, under ``python -m``, kills the process by SIGINT at exit although
    the command caught it: the command line's SIGINT raises :class:`Stopped`, no ``KeyboardInterrupt``, and the
    command's exit code survives."""
    (tmp_path / "ctrl_c_in_exec.py").write_text(
        "import sys\n"
        "from gencache.cli import signals\n"
        "from gencache.core.errors import Stopped\n"
        "signals.install()\n"
        "try:\n"
        "    exec('import os, signal\\nos.kill(os.getpid(), signal.SIGINT)\\nfor _ in range(10**6): pass')\n"
        "except Stopped as stop:\n"
        "    sys.exit(stop.exit_code)\n"
        "sys.exit(3)  # the signal never came\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "ctrl_c_in_exec"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 130, result.stderr
