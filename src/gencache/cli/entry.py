"""The ``gencache`` console script (and ``python -m gencache``).

A plain ``inspect`` or ``verify`` command line (``[--json] DIR...``) runs :mod:`gencache.cli.read` directly, without
loading the command-line framework: typer, and the pydantic it builds its parsers with, cost more than reading a
small artifact. Every other command line, ``--help`` and any other option included, goes to :mod:`gencache.cli.app`,
whose ``inspect`` and ``verify`` call the same functions.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main", "simple_command"]

_COMMANDS = ("inspect", "verify")


def simple_command(argv: Sequence[str]) -> tuple[str, list[str], bool] | None:
    """``(command, dirs, as_json)`` when ``argv`` is ``inspect`` or ``verify`` with only ``--json`` and paths (at
    least one, none starting with ``-``); None for anything else (the full command line parses it)."""
    if len(argv) < 2 or argv[0] not in _COMMANDS:
        return None
    flags = [arg for arg in argv[1:] if arg.startswith("-")]
    dirs = [arg for arg in argv[1:] if not arg.startswith("-")]
    if any(flag != "--json" for flag in flags) or not dirs:
        return None
    return argv[0], dirs, bool(flags)


def _run_simple(command: str, dirs: list[str], as_json: bool) -> int:
    """One simple reading command, its failures mapped to one line and an exit code as :mod:`gencache.cli.app` does."""
    from gencache.cli.read import inspect_command, printable_line, verify_command
    from gencache.core.errors import GencacheError

    paths = [Path(item) for item in dirs]
    try:
        return (inspect_command if command == "inspect" else verify_command)(paths, as_json=as_json)
    except GencacheError as exc:
        _debug_traceback()
        print(printable_line(f"error: {exc}"), file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        _debug_traceback()
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: one line, the traceback one variable away
        _debug_traceback()
        print(
            f"internal error: {type(exc).__name__}: {exc} (rerun with GENCACHE_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


def _debug_traceback() -> None:
    if os.environ.get("GENCACHE_DEBUG") == "1":
        import traceback

        traceback.print_exc()


def main() -> None:
    """The ``gencache`` console script: a simple ``inspect``/``verify`` here, everything else in gencache.cli.app."""
    from gencache.cli import signals
    from gencache.core.errors import Stopped

    signals.install()  # from here on a signal is one line and 130/143, while the modules import too
    try:
        simple = simple_command(sys.argv[1:])
        if simple is None:
            from gencache.cli.app import main as full_main

            full_main()
            return
        code = _run_simple(*simple)
        signals.raise_pending()  # a stop a library swallowed on the way still ends it with its line and code
    except Stopped as stop:
        signals.exit_now(stop)
    sys.exit(code)
