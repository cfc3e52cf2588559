"""The command line owns the signals: a stop is one line and 130/143, and the handlers the caller had come back
after the command."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from gencache.cli.app import run as cli_run

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def test_a_command_gives_back_the_handlers_it_found(tmp_path: Path) -> None:
    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    assert cli_run(["clean", str(tmp_path)]) == 0
    assert {signum: signal.getsignal(signum) for signum in STOP_SIGNALS} == before


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
