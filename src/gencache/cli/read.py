"""``gencache inspect`` and ``gencache verify``: the commands that read artifacts, without the command-line framework.

Both run no model and import neither torch, transformers nor datasets, nor typer: :mod:`gencache.cli.app`'s ``inspect``
and ``verify`` commands call these functions, and so does the console script (:mod:`gencache.cli.entry`) for a plain
``inspect``/``verify`` command line, so both paths print the same lines and exit with the same codes.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["inspect_command", "printable_line", "verify_command"]


def printable_line(text: str) -> str:
    """``text`` with what the terminal cannot encode (lone surrogates from a damaged file) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _print_json(value: Any) -> None:
    print(printable_line(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)), flush=True)


def inspect_command(dirs: Sequence[str | os.PathLike[str]], *, as_json: bool = False) -> int:
    """Print the inspect report of ``dirs`` (tables, or JSON on stdout); return inspect's exit code.

    Tables go to a stream that is not a terminal as plain text without importing rich
    (:func:`gencache.cli.inspect_view.write_plain`), to a terminal through rich: the same characters either way.
    """
    from gencache.artifact.report import inspect_report
    from gencache.cli.inspect_view import inspect_blocks, write_plain

    report = inspect_report(dirs)
    if as_json:
        _print_json(report.to_json())
    else:
        blocks = inspect_blocks(report)
        if not write_plain(blocks, sys.stdout, sys.stderr):
            from gencache.cli.render import print_blocks
            from gencache.core.progress import make_console

            print_blocks(blocks, make_console(), make_console(stderr=True))
    return report.exit_code


@contextmanager
def _verify_bar(name: str, total: int) -> Iterator[Any]:
    """verify's progress bar for one large artifact, on a terminal (rich is imported only when one is shown)."""
    from gencache.cli.render import verify_progress
    from gencache.core.progress import make_console

    with verify_progress(make_console(stderr=True))(name, total) as advance:
        yield advance


def verify_command(dirs: Sequence[str | os.PathLike[str]], *, as_json: bool = False) -> int:
    """Verify ``dirs``, print ``OK``/``FAIL`` lines (or JSON) on stdout; return verify's exit code (2 when a path
    is not an artifact, 1 on any problem)."""
    from gencache.artifact.report import verify_report
    from gencache.core.progress import is_terminal

    show_progress = is_terminal(sys.stderr) and not as_json
    report = verify_report(dirs, progress=_verify_bar if show_progress else None)
    if as_json:
        _print_json(report.to_json())
    else:
        for line in report.lines():
            print(printable_line(line))
        sys.stdout.flush()
    return report.exit_code
