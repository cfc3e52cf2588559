"""The command line, a thin layer over :mod:`gencache.run` and :mod:`gencache.artifact`, and the only code that
prints or owns the process (signals, library output)."""

from __future__ import annotations

import contextlib
import os
import signal


def main(argv: list[str] | None = None) -> None:
    """The ``gencache`` console script: :func:`gencache.cli.app.main`, a stop while it imports one line too."""
    with contextlib.suppress(ValueError):  # not the main thread: signals are its own
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, _stop_before_start)
    from gencache.cli.app import main as app_main

    app_main(argv)


def _stop_before_start(signum: int, frame: object) -> None:
    """The line and exit code of a stop before anything ran (:mod:`gencache.core.errors` may not be imported yet)."""
    try:
        os.write(2, f"Terminated by {signal.Signals(signum).name}; nothing was published.\n".encode())
    finally:
        os._exit(130 if signum == signal.SIGINT else 143)
