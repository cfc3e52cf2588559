"""What ``gencache generate`` prints beyond its run's own messages: the dry run's report, its JSON
(``--dry-run --json``: every check and problem) and the raw prompt (``--show-prompt N --raw``), each on stdout; one
``error:`` line per problem and how many there were, on stderr. The typer command is in :mod:`gencache.cli.app`.
"""

from __future__ import annotations

from typing import Any

import typer

from gencache.cli.console import echo_json, printable
from gencache.core.errors import GencacheError


class Notices:
    """The run's messages on stderr, through a console made (and rich imported) with the first one: a command
    that fails its input checks prints its error lines without it."""

    def __init__(self) -> None:
        self._console: Any = None

    def console(self) -> Any:
        if self._console is None:
            from gencache.cli.console import make_console

            self._console = make_console(stderr=True)
        return self._console

    def __call__(self, level: str, text: str) -> None:
        from gencache.cli.render import render_notice

        render_notice(self.console(), level, text)


def problems_json(code: int, problems: list[Any] | None, error: GencacheError | None = None) -> dict[str, Any]:
    """What ``--dry-run --json`` prints when the checks could not run (an invalid config): every problem."""
    from gencache.core.errors import Problem

    found = error.problem if error is not None else None
    listed = problems if problems is not None else [found or Problem("config", "config", error or GencacheError())]
    return {"exit_code": code, "problems": [problem.to_json() for problem in listed], "checks": []}


def dry_run_output(result: Any, *, raw: bool, as_json: bool) -> None:
    """The dry run's report (or its JSON, or the raw prompt) on stdout, so that ``> file`` keeps it; one ``error:``
    line per problem, and how many, on stderr with every other message."""
    from gencache.cli.console import make_console
    from gencache.cli.render import render_dry_run

    if as_json:
        report = problems_json(result.exit_code, result.problems)
        report["checks"] = [{"name": c.name, "status": c.status, "detail": c.detail} for c in result.checks]
        echo_json(report)
    elif not raw:
        render_dry_run(result, make_console())
    for error in result.errors:
        typer.echo(printable(f"error: {error}"), err=True)
    if result.errors and not raw:
        count = len(result.errors)
        typer.echo(
            f"the dry run found {count} problem{'s' if count > 1 else ''}; generate would exit {result.exit_code}",
            err=True,
        )
    if raw:
        if result.prompt is not None:
            echo_json(raw_prompt(result.prompt, result.prompt_index or 0))
        raise typer.Exit(result.exit_code or (0 if result.prompt is not None else 2))
    raise typer.Exit(result.exit_code)


def raw_prompt(sample: Any, index: int) -> dict[str, Any]:
    """What ``--show-prompt N --raw`` prints: the exact text and ids the teacher would get."""
    return {
        "index": index,
        "key": sample.key,
        "data_config_index": sample.data_config_index,
        "sample_index": sample.sample_index,
        "prompt": sample.prompt_text,
        "input_ids": None if sample.input_ids is None else list(sample.input_ids),
    }
