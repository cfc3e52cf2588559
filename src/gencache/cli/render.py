"""How the CLI shows the results the library returns: the dry-run report, a rendered prompt, run messages, the
verify progress bar and the audit, through rich (inspect's tables are :mod:`gencache.cli.inspect_view`'s).

Only the CLI (and the demo) call this module; the library returns data and never prints.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from gencache.artifact.reader import ProgressCallback
    from gencache.artifact.report import VerifyProgressFactory
    from gencache.data.samples import Sample
    from gencache.run.audit import AuditReport
    from gencache.run.preflight import Preflight
    from gencache.run.ray import RayRun

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
    config = report.config
    if config is None:  # an invalid config is raised, never reported
        return None
    table = Table(title=f"gencache dry run: {report.output_dir}", title_justify="left")
    columns = ("#", "dataset", "split", "template", "samples", "unique", "duplicates", "prompt chars min/med/max")
    for column in columns:
        table.add_column(column, justify="right" if column in ("#", "samples", "unique", "duplicates") else "left")
    samples = report.samples
    if samples is not None:
        table.add_column("prompt tokens min/med/max")
        for summary, data_config in zip(samples.summaries, config.data_configs, strict=True):
            table.add_row(
                str(summary.index),
                summary.dataset_name,
                data_config.split,
                data_config.template,
                str(summary.samples),
                str(summary.unique),
                str(summary.duplicates),
                "{} / {} / {}".format(*summary.prompt_chars),
                "{} / {} / {}".format(*summary.prompt_tokens) if summary.prompt_tokens else "-",
            )
        return table
    if report.sample_counts is None:
        return None
    for index, (count, data_config) in enumerate(zip(report.sample_counts, config.data_configs, strict=True)):
        shown = str(count) if count >= 0 else "?"
        table.add_row(
            str(index), data_config.dataset_name, data_config.split, data_config.template, shown, "?", "?", "?"
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
    if report.prompt is not None:
        render_sample_prompt(report.prompt, report.prompt_index or 0, console)
    elif report.prompt_index is not None:
        console.print(f"[yellow]prompt {report.prompt_index}: not rendered[/yellow] (the samples could not be built)")
    if not report.errors:  # otherwise the caller prints each problem and then how many there are
        console.print("[green]every check passed[/]: generate would start loading the teacher")


def render_sample_prompt(sample: Sample, index: int, console: Console) -> None:
    """Sample ``index``'s rendered prompt: where it came from, each part and the token count."""
    tokens = "unknown (no tokenizer)" if sample.input_ids is None else str(len(sample.input_ids))
    console.print(
        f"[bold]prompt {index}[/bold]: data_configs[{sample.data_config_index}] sample {sample.sample_index}, "
        f"key {sample.key}, {tokens} tokens",
        highlight=False,
    )
    counts = [end - start for _, start, end in (sample.spans or ())]
    for position, part in enumerate(sample.parts):
        kind = type(part).__name__
        count = f", {counts[position]} tokens" if position < len(counts) else ""
        console.print(f"[bold]-- part {position} ({kind}{count}) --[/bold]", highlight=False)
        console.print(escape(part.text), highlight=False, markup=True)


# -- verify -------------------------------------------------------------------------------------------------


def verify_progress(console: Console) -> VerifyProgressFactory:
    """A progress factory for :func:`gencache.artifact.report.verify_report`: one transient bar per artifact."""

    @contextmanager
    def bar_for(name: str, total: int) -> Iterator[ProgressCallback]:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

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


def render_audit(report: AuditReport, console: Console) -> None:
    """One line per audited key (equal, or where each differing sequence first diverges and its finish reasons),
    then the summary: keys audited, equal, differing, the first-divergence positions and the time per key."""
    for key in report.keys:
        if key.equal:
            console.print(f"equal    {key.key}  ({len(key.sequences)} sequence(s))", highlight=False)
            continue
        for sequence in key.sequences:
            if sequence.equal:
                continue
            where = (
                "finish reason only"
                if sequence.first_difference is None
                else (f"first differs at token {sequence.first_difference}")
            )
            console.print(
                f"DIFFERS  {key.key}  sequence {sequence.index}: {where} (stored {sequence.stored_length} tokens, "
                f"{sequence.stored_finish}; regenerated {sequence.regenerated_length} tokens, "
                f"{sequence.regenerated_finish})",
                highlight=False,
            )
    divergence = ", ".join(f"{position} ({count})" for position, count in report.divergence().items())
    per_key = report.seconds / len(report.keys) if report.keys else 0.0
    console.print(
        escape(
            f"audited {len(report.keys)} of {report.total_keys} keys ({report.selection}) with {report.engine} on "
            f"{report.device} in {report.dtype}, {'sampled' if report.sampled else 'greedy'}: {report.equal} equal, "
            f"{report.differing} differing"
            + (f"; first divergence at token (keys): {divergence}" if divergence else "")
            + f"; {per_key:.3f} s per key"
        ),
        highlight=False,
    )


def render_ray_summary(run: RayRun, console: Console) -> None:
    """A Ray run's summary: one row per shard (status, worker, wall time and the part of it its worker spent
    loading, attempts, entries, tokens), then the totals: shards published and skipped, retries, workers and the
    run's wall time."""
    table = Table(title=f"gencache --ray: {run.output_dir}", title_justify="left")
    for column in ("shard", "status", "worker", "seconds", "of which load", "attempts", "entries", "tokens"):
        table.add_column(column, justify="left" if column in ("status", "worker") else "right")
    for record in sorted(run.records, key=lambda r: r.index):
        table.add_row(
            f"{record.index}/{run.shards}",
            record.status,
            escape(record.worker or "-"),
            f"{record.seconds:.2f}",
            f"{record.load_seconds:.2f}",
            str(record.attempts),
            str(record.entries),
            str(record.tokens),
        )
    console.print(table)
    console.print(
        f"{len(run.published)} shards published, {len(run.skipped)} already published (skipped), {run.retries} "
        f"retries, {run.workers} workers, {run.seconds:.1f}s",
        highlight=False,
    )
