"""``gencache inspect`` and ``gencache verify``: the commands that read artifacts.

Both run no model and import neither torch, transformers nor datasets: :mod:`gencache.cli.app`'s ``inspect`` and
``verify`` commands call these functions, which print the report (tables, ``OK``/``FAIL`` lines or JSON) and return
the command's exit code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import typer

from gencache.cli.console import printable


def _echo_json(value: Any) -> None:
    typer.echo(printable(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)))


def inspect_command(dirs: Sequence[str | os.PathLike[str]], *, as_json: bool = False) -> int:
    """Print the inspect report of ``dirs`` (tables through rich, or JSON on stdout); return inspect's exit code."""
    from gencache.artifact.report import inspect_report

    report = inspect_report(dirs)
    if as_json:
        _echo_json(report.to_json())
    else:
        from gencache.cli.console import make_console
        from gencache.cli.inspect_view import render_inspect

        render_inspect(report, make_console(), make_console(stderr=True))
    return report.exit_code


@contextmanager
def _verify_bar(name: str, total: int) -> Iterator[Any]:
    """verify's progress bar for one large artifact, on a terminal."""
    from gencache.cli.console import make_console
    from gencache.cli.render import verify_progress

    with verify_progress(make_console(stderr=True))(name, total) as advance:
        yield advance


def verify_command(dirs: Sequence[str | os.PathLike[str]], *, as_json: bool = False) -> int:
    """Verify ``dirs``, print ``OK``/``FAIL`` lines (or JSON) on stdout; return verify's exit code (2 when a path
    is not an artifact, 1 on any problem)."""
    from gencache.artifact.report import verify_report
    from gencache.cli.console import make_console

    show_progress = make_console(stderr=True).is_terminal and not as_json
    report = verify_report(dirs, progress=_verify_bar if show_progress else None)
    if as_json:
        _echo_json(report.to_json())
    else:
        for line in report.lines():
            typer.echo(printable(line))
    return report.exit_code
