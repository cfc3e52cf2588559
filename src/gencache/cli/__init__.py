"""The command line, a thin layer over :mod:`gencache.run` and :mod:`gencache.artifact`: :func:`main` (the
entry point: a provisional stop handler, the signal handlers, then the app), ``app`` (the typer commands and the
one table from errors to exit codes), ``signals`` and ``quiet`` (what the command line owns of the process: the
signal handlers, and the quieting of other libraries), ``read`` (``inspect`` and ``verify``), ``generate``,
``ray_run`` and ``audit`` (what those commands print), ``quality`` (``score`` and ``report``), ``render`` (the dry
run, messages, verify's bar and the audit drawn on the console), ``inspect_view`` (``inspect``'s tables), ``demo``
and ``init``. The only code that prints.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    """The ``gencache`` console script, ``python -m gencache`` and ``run_generation_cache.py``: a provisional
    handler first (:func:`_stop_before_start`, nothing but built-in modules), so a Ctrl-C or SIGTERM while even the
    signal module imports is one line and 130/143; then the real handlers (:mod:`gencache.cli.signals`), so one
    while typer, rich and the commands import is one line too; then :func:`gencache.cli.app.main` runs ``argv``
    (``sys.argv[1:]`` when None)."""
    import _signal

    try:
        for signum in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
            if _signal.getsignal(signum) is not _signal.SIG_IGN:
                _signal.signal(signum, _stop_before_start)
    except ValueError:  # not the main thread: signals are its own (signals.install does nothing either)
        pass

    from gencache.cli import signals
    from gencache.core.errors import Stopped

    signals.install()
    try:
        from gencache.cli.app import main as app_main
    except Stopped as stop:
        signals.exit_now(stop)
    app_main(argv)


def _stop_before_start(signum: int, frame: object) -> None:
    """The stop line of :func:`gencache.core.errors.stop_message` for a stop before anything ran (written here:
    that module is not imported yet), and its exit code."""
    import _signal
    import os

    name = {_signal.SIGHUP: "SIGHUP", _signal.SIGINT: "SIGINT", _signal.SIGTERM: "SIGTERM"}[signum]
    try:
        os.write(2, f"Terminated by {name}; nothing was published.\n".encode())
    finally:
        os._exit(130 if name == "SIGINT" else 143)
