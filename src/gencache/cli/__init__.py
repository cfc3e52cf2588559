"""The command line, a thin layer over :mod:`gencache.run` and :mod:`gencache.artifact`, and the only code that
prints or owns the process (signals, library output)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    """The ``gencache`` console script: :func:`gencache.cli.app.main`, a stop while it imports one line too."""
    import _signal

    try:
        for signum in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
            if _signal.getsignal(signum) is not _signal.SIG_IGN:
                _signal.signal(signum, _stop_before_start)
    except ValueError:  # not the main thread: signals are its own
        pass

    from gencache.cli.app import main as app_main

    app_main(argv)


def _stop_before_start(signum: int, frame: object) -> None:
    """The line and exit code of a stop before anything ran (:mod:`gencache.core.errors` may not be imported yet)."""
    import _signal
    import os

    name = {_signal.SIGHUP: "SIGHUP", _signal.SIGINT: "SIGINT", _signal.SIGTERM: "SIGTERM"}[signum]
    try:
        os.write(2, f"Terminated by {name}; nothing was published.\n".encode())
    finally:
        os._exit(130 if name == "SIGINT" else 143)
