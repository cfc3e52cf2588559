"""How the CLI shows what the library returns: run messages, the dry run's report (or its JSON, or the raw prompt),
the verify progress bar and the audit (inspect's tables are :mod:`gencache.cli.inspect_view`'s)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from gencache.cli.console import echo_json, make_console, printable
from gencache.core.errors import Problem

if TYPE_CHECKING:
    from gencache.artifact.reader import ProgressCallback
    from gencache.artifact.report import VerifyProgressFactory
    from gencache.run.preflight import Preflight

_STATUS = {"ok": "[green]ok[/]", "failed": "[red]FAILED[/]", "skipped": "[yellow]skipped[/]"}


def render_notice(console: Console, level: str, text: str) -> None:
    """One run message: warnings in yellow; a status (what a slow step is doing) dimmed, on a terminal only, so
    that a piped run's output is its results and errors."""
    if level == "status":
        if console.is_terminal:
            console.print(f"[dim]{escape(text)} ...[/dim]", highlight=False)
    elif level == "warning":
        console.print(f"[yellow]warning:[/yellow] {escape(text)}", highlight=False)
    else:
        console.print(escape(text), highlight=False)


def _data_table(report: Preflight) -> Table | None:
    config, samples, counts = report.config, report.samples, report.sample_counts
    assert config is not None  # an invalid config is raised, never reported
    if samples is None and counts is None:
        return None
    table = Table(title=f"gencache dry run: {report.output_dir}", title_justify="left")
    columns = ("#", "dataset", "split", "template", "samples", "unique", "duplicates", "prompt chars min/med/max")
    for column in columns:
        table.add_column(column, justify="right" if column in ("#", "samples", "unique", "duplicates") else "left")
    if samples is None:
        for index, (count, data) in enumerate(zip(counts or (), config.data_configs, strict=True)):
            shown = str(count) if count >= 0 else "?"
            table.add_row(str(index), data.dataset_name, data.split, data.template, shown, "?", "?", "?")
        return table
    table.add_column("prompt tokens min/med/max")
    for summary, data in zip(samples.summaries, config.data_configs, strict=True):
        values = (summary.index, summary.dataset_name, data.split, data.template, summary.samples, summary.unique)
        table.add_row(
            *map(str, (*values, summary.duplicates)),
            "{} / {} / {}".format(*summary.prompt_chars),
            "{} / {} / {}".format(*summary.prompt_tokens) if summary.prompt_tokens else "-",
        )
    return table


def render_dry_run(report: Preflight, console: Console) -> None:
    """The dry-run report: the data configs, every check with its outcome, the plan and what was not computed."""
    table = _data_table(report)
    if table is not None:
        console.print(table)
    checks = Table(title="checks (the same ones generate makes before loading weights)", title_justify="left")
    for column in ("check", "status", "detail"):
        checks.add_column(column)
    for check in report.checks:
        checks.add_row(check.name, _STATUS.get(check.status, check.status), escape(check.detail))
    console.print(checks)
    samples = report.samples
    if samples is not None:
        console.print(
            f"samples: {len(samples)}   unique keys: {len(samples.unique)}   duplicates: {samples.duplicates}",
            highlight=False,
        )
        if samples.conflicting_prompts:
            render_notice(
                console,
                "warning",
                f"{len(samples.conflicting_prompts)} duplicated keys rendered different prompts; the first "
                "occurrence's prompt is generated for all.",
            )
    for path in report.published:
        console.print(f"already published and verified (skipped): {escape(str(path))}", highlight=False)
    for target in report.targets:
        if target.shard is not None:
            console.print(
                f"shard {target.shard.index}/{target.shard.count} ({target.shard.origin}): {len(target.keys)} keys "
                f"-> {escape(str(target.output_dir))}",
                highlight=False,
            )
    if report.capacity:
        console.print(f"header budget: {max(report.capacity.values()):,} bytes (largest artifact)", highlight=False)
    if report.not_computed:
        console.print(f"[yellow]not computed:[/yellow] {escape('; '.join(report.not_computed))}", highlight=False)
    sample = report.prompt
    if sample is not None:  # where it came from, each part and the token count
        tokens = "unknown (no tokenizer)" if sample.input_ids is None else str(len(sample.input_ids))
        console.print(
            f"[bold]prompt {report.prompt_index or 0}[/bold]: data_configs[{sample.data_config_index}] sample "
            f"{sample.sample_index}, key {sample.key}, {tokens} tokens",
            highlight=False,
        )
        counts = [end - start for _, start, end in (sample.spans or ())]
        for position, part in enumerate(sample.parts):
            count = f", {counts[position]} tokens" if position < len(counts) else ""
            console.print(f"[bold]-- part {position} ({type(part).__name__}{count}) --[/bold]", highlight=False)
            console.print(escape(part.text), highlight=False, markup=True)
    elif report.prompt_index is not None:
        console.print(f"[yellow]prompt {report.prompt_index}: not rendered[/yellow] (the samples could not be built)")
    if not report.errors:  # otherwise the caller prints each problem and then how many there are
        console.print("[green]every check passed[/]: generate would start loading the teacher")


def verify_progress(console: Console) -> VerifyProgressFactory:
    """A progress factory for :func:`gencache.artifact.report.verify_report`: one transient bar per artifact."""

    @contextmanager
    def bar_for(name: str, total: int) -> Iterator[ProgressCallback]:
        with Progress(
            TextColumn("verifying {task.description}"),
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task(name, total=total)

            def advance(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            yield advance

    return bar_for


def problems_json(code: int, problems: list[Problem]) -> dict[str, Any]:
    """What ``--dry-run --json`` prints: the exit code and every problem (the caller adds the checks)."""
    return {"exit_code": code, "problems": [problem.to_json() for problem in problems], "checks": []}


def dry_run_output(result: Preflight, *, raw: bool, as_json: bool) -> None:
    """The dry run's report (or its JSON, or the raw prompt) on stdout, so that ``> file`` keeps it; one ``error:``
    line per problem, and how many, on stderr with every other message."""
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
        sample = result.prompt
        if sample is not None:  # the exact text and ids the teacher would get
            echo_json(
                {
                    "index": result.prompt_index or 0,
                    "key": sample.key,
                    "data_config_index": sample.data_config_index,
                    "sample_index": sample.sample_index,
                    "prompt": sample.prompt_text,
                    "input_ids": None if sample.input_ids is None else list(sample.input_ids),
                }
            )
        raise typer.Exit(result.exit_code or (0 if sample is not None else 2))
    raise typer.Exit(result.exit_code)
