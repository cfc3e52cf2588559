"""The command line, a thin layer over :mod:`gencache.run` and :mod:`gencache.artifact`: :func:`main` (the
entry point: the signal handlers first, then the app), ``app`` (the typer commands and the one table from errors to
exit codes), ``signals`` and ``quiet`` (what the command line owns of the process: the signal handlers, and the
quieting of other libraries), ``read`` (``inspect`` and ``verify``), ``generate``, ``ray_run`` and ``audit`` (what
those commands print), ``quality`` (``score`` and ``report``), ``render`` (the dry run, messages, verify's bar and the
audit drawn on the console), ``inspect_view`` (``inspect``'s tables), ``demo`` and ``init``. The only code that
prints.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    """The ``gencache`` console script, ``python -m gencache`` and ``run_generation_cache.py``: the signal
    handlers go in first (:mod:`gencache.cli.signals`, standard library only), so a Ctrl-C or SIGTERM while typer,
    rich and the commands import is already one line and 130/143; then :func:`gencache.cli.app.main` runs
    ``argv`` (``sys.argv[1:]`` when None)."""
    from gencache.cli import signals
    from gencache.core.errors import Stopped

    signals.install()
    try:
        from gencache.cli.app import main as app_main
    except Stopped as stop:
        signals.exit_now(stop)
    app_main(argv)
