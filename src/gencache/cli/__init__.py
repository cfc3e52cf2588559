"""The command line, a thin layer over :mod:`gencache.run` and :mod:`gencache.artifact`, and the only code that
prints: ``app`` (the typer commands and the one table from errors to exit codes), ``signals`` and ``quiet`` (what
the command line owns of the process), ``console`` (consoles and the progress bar), the commands' output
(``read``, ``generate``, ``ray_run``, ``audit``, ``quality``, ``render``, ``inspect_view``), ``demo`` and ``init``.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    """The ``gencache`` console script, ``python -m gencache`` and ``run_generation_cache.py``. Until the command
    line's own handlers take over, a Ctrl-C or SIGTERM ends the process at once with the line of a stop before
    anything ran (:func:`_stop_before_start`: nothing but built-in modules), so a stop while typer, rich and the
    commands import is one line too; then :func:`gencache.cli.app.main` runs ``argv``."""
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
    """The line of :func:`gencache.core.errors.stop_message` for a stop before anything ran (written here: that
    module may not be imported yet), and its exit code."""
    import _signal
    import os

    name = {_signal.SIGHUP: "SIGHUP", _signal.SIGINT: "SIGINT", _signal.SIGTERM: "SIGTERM"}[signum]
    try:
        os.write(2, f"Terminated by {name}; nothing was published.\n".encode())
    finally:
        os._exit(130 if name == "SIGINT" else 143)
