"""How the CLI shows the results the library returns: the dry-run report, a rendered prompt, run messages, the
inspect tables and the verify progress bar.

Only the CLI (and the demo) call this module; the library returns data and never prints.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from gencache.artifact.reader import ProgressCallback
    from gencache.artifact.report import VerifyProgressFactory
    from gencache.data.samples import Sample
    from gencache.run.audit import AuditReport
    from gencache.run.pipeline import DryRun

_STATUS = {"ok": "[green]ok[/]", "failed": "[red]FAILED[/]", "skipped": "[yellow]skipped[/]"}


def render_notice(console: Console, level: str, text: str) -> None:
    """One run message: warnings in yellow."""
    if level == "warning":
        console.print(f"[yellow]warning:[/yellow] {escape(text)}", highlight=False)
    else:
        console.print(escape(text), highlight=False)


def _data_table(report: DryRun) -> Table | None:
    found = report.preflight
    config = found.config
    if config is None:  # an invalid config is raised, never reported
        return None
    table = Table(title=f"gencache dry run: {report.output_dir}", title_justify="left")
    columns = ("#", "dataset", "split", "template", "samples", "unique", "duplicates", "prompt chars min/med/max")
    for column in columns:
        table.add_column(column, justify="right" if column in ("#", "samples", "unique", "duplicates") else "left")
    samples = found.samples
    if samples is not None:
        table.add_column("prompt tokens min/med/max")
        for summary, data_config in zip(samples.summaries, config.data_configs, strict=True):
            table.add_row(
                str(summary.index), summary.dataset_name, data_config.split, data_config.template,
                str(summary.samples), str(summary.unique), str(summary.duplicates),
                "{} / {} / {}".format(*summary.prompt_chars),
                "{} / {} / {}".format(*summary.prompt_tokens) if summary.prompt_tokens else "-",
            )  # fmt: skip
        return table
    if found.sample_counts is None:
        return None
    for index, (count, data_config) in enumerate(zip(found.sample_counts, config.data_configs, strict=True)):
        shown = str(count) if count >= 0 else "?"
        table.add_row(
            str(index), data_config.dataset_name, data_config.split, data_config.template, shown, "?", "?", "?"
        )
    return table


def render_dry_run(report: DryRun, console: Console) -> None:
    """The dry-run report: the data configs, every check with its outcome, the plan and what was not computed."""
    found = report.preflight
    table = _data_table(report)
    if table is not None:
        console.print(table)
    checks = Table(title="checks (the same ones generate makes before loading weights)", title_justify="left")
    for column in ("check", "status", "detail"):
        checks.add_column(column)
    for check in found.checks:
        checks.add_row(check.name, _STATUS.get(check.status, check.status), escape(check.detail))
    console.print(checks)
    samples = found.samples
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
    if found.capacity:
        console.print(f"header budget: {max(found.capacity.values()):,} bytes (largest artifact)", highlight=False)
    if found.not_computed:
        console.print(f"[yellow]not computed:[/yellow] {escape('; '.join(found.not_computed))}", highlight=False)
    if report.prompt is not None:
        render_sample_prompt(report.prompt, report.prompt_index or 0, console)
    elif report.prompt_index is not None:
        console.print(f"[yellow]prompt {report.prompt_index}: not rendered[/yellow] (the samples could not be built)")
    if not found.errors:  # otherwise the caller prints each problem and then how many there are
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


# -- inspect and verify ---------------------------------------------------------------------------------
def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _artifact_table(report: dict[str, Any]) -> Table:
    table = Table(title=escape(report["path"]), show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    tok = report["tokenizer"]
    lengths = report["token_length"]
    shard = report["shard"]
    rows = [
        ("format", str(report["format_version"])),
        ("teacher", escape(report["teacher"])),
        ("tokenizer", escape(report["tokenizer_path"])),
        (
            "tokenizer state",
            f"padding {tok['padding_side']}, pad id {tok['pad_token_id']}, eos id {tok['eos_token_id']}",
        ),
        ("dtype", report["dtype"]),
        ("entries", f"{report['entries']:,}"),
        ("sequences", f"{report['sequences']:,}"),
        ("tokens", f"{report['tokens']:,}"),
        (
            "token length",
            f"min {lengths['min']}, median {lengths['median']:g}, max {lengths['max']}" if lengths else "-",
        ),
        ("finish reasons", ", ".join(f"{k} {v:,}" for k, v in report["finish_reasons"].items())),
        (
            "duplicates",
            f"{report['duplicates']:,}"
            + (
                f" ([yellow]{report['conflicting_prompts']:,} rendered different prompts; the first was generated[/])"
                if report.get("conflicting_prompts")
                else ""
            ),
        ),
        *_data_config_rows(report),
        (
            "shard",
            f"{shard['index']} of {shard['count']} (run {shard['run_digest'][:12]})" if shard else "none",
        ),
        ("engine", escape(report.get("engine") or "not recorded")),
        ("determinism", _determinism_block(report.get("determinism"))),
        (
            "payload",
            f"{_size(report['payload_bytes'])}, header {report['header']['used']:,} of "
            f"{report['header']['capacity']:,} bytes",
        ),
    ]
    for field, value in rows:
        table.add_row(field, value)
    return table


def _on(value: Any) -> str:
    return {True: "on", False: "off", None: "unknown"}.get(value, escape(str(value)))


def _determinism_block(facts: dict[str, Any] | None) -> str:
    """What decides whether the run's tokens can change between runs, one fact per line."""
    if facts is None:
        return "not recorded"
    sampling = facts.get("sampling")
    gpu = facts.get("gpu_name")
    lines = [
        f"sampling: {escape(sampling['scope'] if isinstance(sampling, dict) else str(sampling or 'not recorded'))}",
        f"batch-invariant kernels {_on(facts.get('batch_invariant'))}, torch deterministic algorithms "
        f"{_on(facts.get('torch_deterministic_algorithms'))}, CUBLAS_WORKSPACE_CONFIG "
        f"{escape(str(facts.get('cublas_workspace_config') or 'unset'))}",
        f"prefix caching {_on(facts.get('prefix_caching'))}, chunked prefill {_on(facts.get('chunked_prefill'))}, "
        f"tensor parallel {facts.get('tensor_parallel_size')}, attention "
        f"{escape(str(facts.get('attention_backend') or 'unknown'))}",
        f"GPU {escape(gpu)} (compute capability {facts.get('gpu_compute_capability')})" if gpu else "GPU none",
    ]
    return "\n".join(lines)


def _counts(items: list[dict[str, int]] | None) -> str:
    """Counts per data config: ``#0: 3 samples, 3 unique; #1: ...`` (``-`` when there are none)."""
    if items is None:
        return "not recorded"
    return "; ".join(f"#{d['index']}: {d['samples']:,} samples, {d['unique']:,} unique" for d in items) or "-"


def _data_config_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """An artifact's counts per data config: a shard's own (as its run recorded them) and its whole run's."""
    if report["shard"] is None:
        return [("data configs", _counts(report["data_configs"]))]
    return [
        ("data configs (shard)", _counts(report.get("shard_data_configs"))),
        ("data configs (run)", _counts(report["data_configs"])),
    ]


def _sharded_table(report: dict[str, Any]) -> Table:
    info = report["shards"]
    table = Table(title=f"{escape(report['path'])} ({info['count']} shards)", title_justify="left")
    for column in ("shard", "status", "entries", "sequences", "tokens", "data configs"):
        table.add_column(column, justify="left" if column in ("shard", "status", "data configs") else "right")
    by_index = {i: r for i, r in zip(info["present"], report["artifacts"], strict=True)}
    for index in range(info["count"]):
        name = f"{index:05d}"
        shard_report = by_index.get(name)
        if shard_report is None:
            table.add_row(name, "[red]missing[/]", "", "", "", "")
        elif shard_report["kind"] == "error":
            table.add_row(name, "[red]unreadable[/] (FAIL line below)", "", "", "", "")
        else:
            if name in info["other_run"]:
                status = "[yellow]other run[/]"
            elif name in info["mislabeled"]:
                status = "[yellow]misnamed[/]"
            else:
                status = "[green]ok[/]"
            table.add_row(
                name,
                status,
                f"{shard_report['entries']:,}",
                f"{shard_report['sequences']:,}",
                f"{shard_report['tokens']:,}",
                _counts(shard_report.get("shard_data_configs")),
            )
    totals = report["totals"]
    table.add_row(
        "total",
        "",
        f"{totals['entries']:,}",
        f"{totals['sequences']:,}",
        f"{totals['tokens']:,}",
        _counts(totals.get("data_configs")),
    )
    return table


def render_inspect(report: dict[str, Any], console: Console, err: Console | None = None) -> None:
    """Print an :func:`inspect_report` as rich tables; a path that is not an artifact is one ``error:`` line on
    ``err`` (the same console when not given)."""
    from gencache.artifact.report import BAD_INPUT_KINDS

    err = err or console
    for artifact in report["artifacts"]:
        if artifact["kind"] in BAD_INPUT_KINDS:
            err.print(f"error: {artifact['error']}", highlight=False, markup=False)
        elif artifact["kind"] == "error":
            path, error = artifact["path"], artifact["error"]
            shown = error if error.startswith(path) else f"{path}: {error}"
            err.print(f"FAIL {shown}", highlight=False, markup=False)
        elif artifact["kind"] == "sharded":
            console.print(_sharded_table(artifact))
            info = artifact["shards"]
            for problem in info["problems"]:
                console.print(f"[red]problem[/]: {escape(problem)}", highlight=False)
            for shard_report in artifact["artifacts"]:  # one whole line each, like verify's
                if shard_report["kind"] == "error":
                    err.print(f"FAIL {shard_report['error']}", highlight=False, markup=False)
            for shard_report in artifact["artifacts"]:  # every shard in detail, not only the first
                if shard_report["kind"] == "artifact":
                    console.print(_artifact_table(shard_report))
        else:
            console.print(_artifact_table(artifact))
    overlap = report["overlap"]
    if overlap is not None:
        table = Table(title="overlap", title_justify="left")
        for column in ("a", "b", "shared keys", "conflicting keys"):
            table.add_column(column)
        for pair in overlap["pairs"]:
            conflicting = str(pair["conflicting"])
            if pair["conflicting_keys"]:
                conflicting += f" (e.g. {pair['conflicting_keys'][0][:16]}…)"
            table.add_row(escape(pair["a"]), escape(pair["b"]), f"{pair['shared']:,}", conflicting)
        console.print(table)
        provenance = overlap["provenance"]
        if overlap["differing"]:
            provenance += f" ({', '.join(overlap['differing'])})"
        console.print(f"provenance: {provenance}; union of keys: {overlap['union']:,}")


# -- verify -------------------------------------------------------------------------------------------------


def verify_progress(console: Console) -> VerifyProgressFactory:
    """A progress factory for :func:`gencache.artifact.report.verify_results`: one transient bar per artifact."""

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


__all__ = [
    "render_dry_run",
    "render_inspect",
    "render_notice",
    "render_sample_prompt",
    "verify_progress",
]


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
