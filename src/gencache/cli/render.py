"""Everything the command line prints, and the only quieting of other libraries (inspect's tables hold every
recorded value as a rich :class:`~rich.text.Text`, never parsed as markup or emoji)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import IO, TYPE_CHECKING, Any
from unittest import mock

import typer
from rich import box, filesize
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Column, Table
from rich.text import Text

from gencache.artifact.report import InspectReport
from gencache.core.errors import Problem

if TYPE_CHECKING:
    from gencache.artifact.reader import ProgressCallback
    from gencache.run.audit import AuditReport
    from gencache.run.preflight import Check, Preflight
    from gencache.run.ray import RayRun
    from gencache.run.score import ScoreReport

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the gencache package
_QUIET = {"TORCH_CPP_LOG_LEVEL": "ERROR", "VLLM_LOGGING_LEVEL": "ERROR"}


def make_console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """The console every CLI message goes through: text is never hard-wrapped (a message is one line) nor
    highlighted; on a terminal tables fit the terminal, elsewhere they keep every column whole (grep and paste work)."""
    console = Console(file=file, stderr=stderr, soft_wrap=True, highlight=False)
    if not console.is_terminal:
        console.width = 10_000
    return console


def printable(text: str) -> str:
    """``text`` with anything the terminal cannot encode (lone surrogates from a damaged file) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def echo_json(value: Any) -> None:
    typer.echo(printable(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)))


def duration(seconds: float | None) -> str:
    return "-:--:--" if seconds is None else str(timedelta(seconds=round(seconds)))


@contextlib.contextmanager
def quiet_libraries(verbose: bool = False, warn: Callable[[str], None] | None = None) -> Iterator[None]:
    """Unless ``verbose`` or ``GENCACHE_DEBUG=1``, for the block: no log record of WARNING or below
    (``logging.disable``, which a library that resets its loggers' levels does not undo), no tqdm bar (even one asked
    for with ``disable=False``, as vLLM's), torch's and vLLM's log levels at ERROR (for child processes too). Python
    warnings go to ``warn`` (one line each; dropped when None), a third-party library's only when not quiet."""
    quiet = not verbose and os.environ.get("GENCACHE_DEBUG") != "1"

    def show(message: Warning | str, category: type[Warning], filename: str, *args: Any, **kwargs: Any) -> None:
        if warn is not None and (not quiet or os.path.abspath(filename).startswith(_PACKAGE)):
            warn(printable(" ".join(str(message).split())))

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(warnings, "showwarning", show))
        if quiet:
            stack.enter_context(mock.patch.dict(os.environ, {k: os.environ.get(k, v) for k, v in _QUIET.items()}))
            import tqdm.std

            original = tqdm.std.tqdm.__init__

            def no_bar(self: Any, *args: Any, **kwargs: Any) -> None:  # also one asked for with disable=False
                original(self, *args, **{**kwargs, "disable": True})

            stack.enter_context(mock.patch.object(tqdm.std.tqdm, "__init__", no_bar))
            stack.callback(logging.disable, logging.root.manager.disable)
            logging.disable(logging.WARNING)
        yield


class RunProgress:
    """A run's progress (:class:`gencache.core.progress.Progress`) on stderr (or ``stream``): rich's live bar on a
    terminal; elsewhere, for a log, the same figures as one plain line at the start, at most one every 10 seconds
    and one at the end."""

    def __init__(self, total: int, *, stream: IO[str] | None = None) -> None:
        self.console = make_console(stderr=True, file=stream)
        self.live = self.console.is_terminal
        self.total, self.done, self.tokens, self.stage, self.shown = total, 0, 0, "generate", 0.0
        self.started: float | None = None
        columns = (TextColumn("[bold]{task.fields[stage]}"), BarColumn(), TextColumn("{task.description}"))
        self.bar = Progress(*columns, console=self.console, disable=not self.live)
        self.task = self.bar.add_task("", total=total, stage="generate")

    def set_label(self, label: str) -> None:
        self.stage = f"generate [{label}]"
        self._show(line=False)

    def start(self, total_samples: int) -> None:
        self.total, self.started = total_samples, time.monotonic()
        self.bar.start()
        self._show(line=True)

    def advance(self, samples: int, tokens: int) -> None:
        self.done += samples
        self.tokens += tokens
        self._show(line=time.monotonic() - self.shown >= 10.0)

    def close(self) -> None:
        if self.started is not None:
            self._show(line=True)
            self.bar.stop()
            self.started = None

    def _show(self, *, line: bool) -> None:
        elapsed = 0.0 if self.started is None else time.monotonic() - self.started
        eta = (self.total - self.done) * elapsed / self.done if self.done and elapsed > 0 else None
        percent = 100.0 * self.done / self.total if self.total else 100.0
        rate = self.tokens / elapsed if elapsed > 0 else 0.0
        figures = (
            f"{self.done}/{self.total} samples ({percent:.1f}%), {self.tokens} tokens, {rate:.1f} tok/s, "
            f"elapsed {duration(elapsed)}, ETA {duration(eta)}"
        )
        self.bar.update(self.task, completed=self.done, total=self.total, description=figures, stage=self.stage)
        if line and not self.live and self.started is not None:
            self.console.print(f"gencache: {self.stage}: {figures}", markup=False)
            self.shown = time.monotonic()


_STYLES = {"bad": "bold red", "warn": "yellow", "good": "green"}
_STATUS = {"ok": "[green]ok[/]", "failed": "[red]FAILED[/]", "skipped": "[yellow]skipped[/]"}


def render_notice(console: Console, level: str, text: str) -> None:
    """One run message: warnings in yellow; a status (what a slow step is doing) dimmed, on a terminal only."""
    if level == "warning":
        console.print(f"[yellow]warning:[/yellow] {escape(text)}")
    elif level != "status":
        console.print(escape(text))
    elif console.is_terminal:
        console.print(f"[dim]{escape(text)} ...[/dim]")


def render_dry_run(report: Preflight, console: Console) -> None:
    config, samples, counts = report.config, report.samples, report.sample_counts
    assert config is not None  # an invalid config is raised, never reported
    table = Table(title=f"gencache dry run: {report.output_dir}", title_justify="left")
    columns = ("#", "dataset", "split", "template", "samples", "unique", "duplicates", "prompt chars min/med/max")
    tokens_column = () if samples is None else ("prompt tokens min/med/max",)
    for column in (*columns, *tokens_column):
        table.add_column(column, justify="right" if column in ("#", "samples", "unique", "duplicates") else "left")
    for index, (count, data) in enumerate(zip(counts, config.data_configs, strict=True)):
        cells = (str(index), data.dataset_name, data.split, data.template)
        if samples is None:  # a count is unknown (-1) until the tokenizer counted tokens
            table.add_row(*cells, str(count) if count >= 0 else "?", "?", "?", "?")
            continue
        summary = samples.summaries[index]
        tokens = "{} / {} / {}".format(*summary.prompt_tokens) if summary.prompt_tokens else "-"
        prompt_chars = "{} / {} / {}".format(*summary.prompt_chars)
        table.add_row(*cells, *map(str, (summary.samples, summary.unique, summary.duplicates)), prompt_chars, tokens)
    console.print(table)
    title = "checks (the same ones generate makes before loading weights)"
    checks = Table("check", "status", "detail", title=title, title_justify="left")
    for check in report.checks:
        checks.add_row(check.name, _STATUS.get(check.status, check.status), escape(check.detail))
    console.print(checks)
    if samples is not None:
        console.print(
            f"samples: {len(samples)}   unique keys: {len(samples.unique)}   duplicates: {samples.duplicates}"
        )
        if samples.conflicting_prompts:
            conflicting = f"{len(samples.conflicting_prompts)} duplicated keys rendered different prompts"
            render_notice(console, "warning", f"{conflicting}; the first occurrence's prompt is generated for all.")
    for path in report.published:
        console.print(f"already published and verified (skipped): {escape(str(path))}")
    for target in report.targets:
        if (spec := target.shard) is not None:
            shard = f"shard {spec.index}/{spec.count} ({spec.origin})"
            console.print(f"{shard}: {len(target.keys)} keys -> {escape(str(target.output_dir))}")
    if report.capacity:
        console.print(f"header budget: {max(report.capacity.values()):,} bytes (largest artifact)")
    if report.not_computed:
        console.print(f"[yellow]not computed:[/yellow] {escape('; '.join(report.not_computed))}")
    sample = report.prompt
    if sample is not None:  # where it came from, each part and the token count
        tokens = "unknown (no tokenizer)" if sample.input_ids is None else str(len(sample.input_ids))
        console.print(
            f"[bold]prompt {report.prompt_index or 0}[/bold]: data_configs[{sample.data_config_index}] sample "
            f"{sample.sample_index}, key {sample.key}, {tokens} tokens"
        )
        sizes = [end - start for _, start, end in (sample.spans or ())]
        for position, part in enumerate(sample.parts):
            size = f", {sizes[position]} tokens" if position < len(sizes) else ""
            console.print(f"[bold]-- part {position} ({type(part).__name__}{size}) --[/bold]")
            console.print(escape(part.text), markup=True)
    elif report.prompt_index is not None:
        console.print(f"[yellow]prompt {report.prompt_index}: not rendered[/yellow] (the samples could not be built)")
    if not report.errors:  # otherwise the caller prints each problem and then how many there are
        console.print("[green]every check passed[/]: generate would start loading the teacher")


@contextlib.contextmanager
def verify_progress(name: str, total: int) -> Iterator[ProgressCallback]:
    """One transient bar on stderr per artifact that :func:`gencache.artifact.report.verify_report` re-hashes."""
    columns = (TextColumn("verifying {task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=make_console(stderr=True), transient=True) as bar:
        task = bar.add_task(name, total=total)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def problems_json(code: int, problems: list[Problem], checks: Sequence[Check] = ()) -> dict[str, Any]:
    """What ``--dry-run --json`` prints: the exit code, every problem and the checks."""
    checks_json = [dataclasses.asdict(check) for check in checks]
    return {"exit_code": code, "problems": [problem.to_json() for problem in problems], "checks": checks_json}


def dry_run_output(result: Preflight, *, raw: bool, as_json: bool) -> None:
    """The dry run's report (or its JSON, or the raw prompt) on stdout, so that ``> file`` keeps it; one ``error:``
    line per problem, and how many, on stderr with every other message."""
    if as_json:
        echo_json(problems_json(result.exit_code, result.problems, result.checks))
    elif not raw:
        render_dry_run(result, make_console())
    for error in result.errors:
        typer.echo(printable(f"error: {error}"), err=True)
    if (count := len(result.errors)) and not raw:
        typer.echo(
            f"the dry run found {count} problem{'s' if count > 1 else ''}; generate would exit {result.exit_code}",
            err=True,
        )
    sample = result.prompt
    if raw and sample is not None:  # the exact text and ids the teacher would get
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
    raise typer.Exit(result.exit_code or (2 if raw and sample is None else 0))


def _on(value: Any) -> str:
    return {True: "on", False: "off", None: "unknown"}.get(value, str(value))


def _determinism_block(facts: Mapping[str, Any] | None) -> str:
    """What decides whether the run's tokens can change between runs, one fact per line."""
    if facts is None:
        return "not recorded"
    sampling, gpu = facts.get("sampling"), facts.get("gpu_name")
    lines = [
        f"sampling: {sampling['scope'] if isinstance(sampling, dict) else str(sampling or 'not recorded')}",
        f"batch-invariant kernels {_on(facts.get('batch_invariant'))}, torch deterministic algorithms "
        f"{_on(facts.get('torch_deterministic_algorithms'))}, CUBLAS_WORKSPACE_CONFIG "
        f"{facts.get('cublas_workspace_config') or 'unset'}",
        f"prefix caching {_on(facts.get('prefix_caching'))}, chunked prefill {_on(facts.get('chunked_prefill'))}, "
        f"tensor parallel {facts.get('tensor_parallel_size')}, attention {facts.get('attention_backend') or 'unknown'}",
        f"GPU {gpu} (compute capability {facts.get('gpu_compute_capability')})" if gpu else "GPU none",
    ]
    return "\n".join(lines)


def _counts(items: Sequence[Mapping[str, int]] | None) -> str:
    """Counts per data config: ``#0: 3 samples, 3 unique; #1: ...`` (``-`` when there are none)."""
    if items is None:
        return "not recorded"
    return "; ".join(f"#{d['index']}: {d['samples']:,} samples, {d['unique']:,} unique" for d in items) or "-"


def _artifact_table(report: dict[str, Any]) -> Table:
    tok, lengths, shard, header = report["tokenizer"], report["token_length"], report["shard"], report["header"]
    length = f"min {lengths['min']}, median {lengths['median']:g}, max {lengths['max']}" if lengths else "-"
    header_use = f"header {header['used']:,} of {header['capacity']:,} bytes"
    state = f"padding {tok['padding_side']}, pad id {tok['pad_token_id']}, eos id {tok['eos_token_id']}"
    duplicates = Text(f"{report['duplicates']:,}")
    if report["conflicting_prompts"]:
        conflicting = f"{report['conflicting_prompts']:,} rendered different prompts; the first was generated"
        duplicates = Text.assemble(f"{report['duplicates']:,} (", (conflicting, "yellow"), ")")
    if shard is None:
        data_configs = [("data configs", _counts(report["data_configs"]))]
    else:  # a shard's own counts (as its run recorded them) and its whole run's
        data_configs = [
            ("data configs (shard)", _counts(report["shard_data_configs"])),
            ("data configs (run)", _counts(report["data_configs"])),
        ]
    rows: list[tuple[str, str | Text]] = [
        ("format", str(report["format_version"])),
        ("teacher", report["teacher"]),
        ("tokenizer", report["tokenizer_path"]),
        ("tokenizer state", state),
        ("dtype", report["dtype"]),
        ("entries", f"{report['entries']:,}"),
        ("sequences", f"{report['sequences']:,}"),
        ("tokens", f"{report['tokens']:,}"),
        ("token length", length),
        ("finish reasons", ", ".join(f"{k} {v:,}" for k, v in report["finish_reasons"].items())),
        ("duplicates", duplicates),
        *data_configs,
        ("shard", f"{shard['index']} of {shard['count']} (run {shard['run_digest'][:12]})" if shard else "none"),
        ("engine", report["engine"] or "not recorded"),
        ("determinism", _determinism_block(report["determinism"])),
        ("payload", f"{filesize.decimal(report['payload_bytes'])}, {header_use}"),
    ]
    table = Table(
        Column("field", style="bold"), "value", title=Text(report["path"]), title_justify="left", show_header=False
    )
    for field, value in rows:
        table.add_row(Text(field), Text(value) if isinstance(value, str) else value)
    return table


def _sharded_table(report: dict[str, Any]) -> Table:
    info = report["shards"]
    by_index = dict(zip(info["present"], report["artifacts"], strict=True))
    table = Table(title=Text(f"{report['path']} ({info['count']} shards)"), title_justify="left")
    for name in ("shard", "status", "entries", "sequences", "tokens", "data configs"):
        table.add_column(name, justify="left" if name in ("shard", "status", "data configs") else "right")
    for index in range(info["count"]):
        name = f"{index:05d}"
        shard = by_index.get(name)
        if shard is None:
            table.add_row(Text(name), Text("missing", "red"))
        elif shard["kind"] == "error":
            table.add_row(Text(name), Text.assemble(("unreadable", "red"), " (FAIL line below)"))
        else:
            other = "other run" if name in info["other_run"] else "misnamed" if name in info["mislabeled"] else ""
            status = Text(other, "yellow") if other else Text("ok", "green")
            counts = (f"{shard['entries']:,}", f"{shard['sequences']:,}", f"{shard['tokens']:,}")
            table.add_row(Text(name), status, *map(Text, counts), Text(_counts(shard["shard_data_configs"])))
    totals = report["totals"]
    counts = (f"{totals['entries']:,}", f"{totals['sequences']:,}", f"{totals['tokens']:,}")
    table.add_row(Text("total"), Text(""), *map(Text, counts), Text(_counts(totals["data_configs"])))
    return table


def render_inspect(report: InspectReport, console: Console, err: Console | None = None) -> None:
    """``gencache inspect``'s tables on ``console``, its ``error:`` and ``FAIL`` lines on ``err``."""
    err = err or console
    artifacts = list(report.artifacts)
    while artifacts:
        artifact = artifacts.pop(0)
        path, kind, error = artifact["path"], artifact["kind"], artifact.get("error", "")
        if kind == "error":
            err.print(Text(f"FAIL {error if error.startswith(path) else f'{path}: {error}'}"))
        elif kind == "sharded":
            console.print(_sharded_table(artifact))
            for problem in artifact["shards"]["problems"]:
                console.print(Text.assemble(("problem", "red"), f": {problem}"))
            artifacts[:0] = artifact["artifacts"]  # next, every shard in detail; an unreadable one in one line
        elif kind == "artifact":
            console.print(_artifact_table(artifact))
        else:  # not an artifact
            err.print(Text(f"error: {error}"))
    if (overlap := report.overlap) is not None:
        table = Table("a", "b", "shared keys", "conflicting keys", title=Text("overlap"), title_justify="left")
        for pair in overlap["pairs"]:
            keys = pair["conflicting_keys"]
            example = f" (e.g. {keys[0][:16]}…)" if keys else ""
            cells = (pair["a"], pair["b"], f"{pair['shared']:,}", f"{pair['conflicting']}{example}")
            table.add_row(*map(Text, cells))
        console.print(table)
        differing = overlap["differing"]
        provenance = overlap["provenance"] + (f" ({', '.join(differing)})" if differing else "")
        line = f"provenance: {provenance}; union of keys: {overlap['union']:,}"
        console.print(line, markup=False, emoji=False, highlight=True)


def render_scores(report: ScoreReport, console: Console) -> None:
    """The verdict, the worst signs first, then the scores of each data config and of the whole run: one row per
    finish reason, without metric columns when no answer has a gold reference; numbers are never wrapped."""
    for level, text in report.verdict:
        console.print(f"[{_STYLES[level]}]{level}:[/] {text}")
    console.print(f"scores of {report.artifact}")
    metrics = tuple(report.overall.means) if report.overall.scored else ()
    for group in (*report.groups, report.overall):
        title = f"{group.label}: answer rule {group.rule}; headline {group.headline}"
        title = group.label if group is report.overall else title
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
        table.add_column("finish", no_wrap=True)
        for name in ("answers", "unscored", *metrics):
            table.add_column(name, justify="right", no_wrap=True)
        for label, part in [("all", group), *group.by_finish_reason.items()]:
            means = ["–" if part.means[name] is None else f"{part.means[name]:.3f}" for name in metrics]
            table.add_row(label, str(part.answers), str(part.unscored), *means)
        console.print(table)


def render_audit(report: AuditReport, console: Console) -> None:
    """One line per audited key (equal, or where each differing sequence first diverges and its finish reasons),
    then the summary: keys audited, equal, differing, the first-divergence positions and the time per key."""
    for key in report.keys:
        if key.equal:
            console.print(f"equal    {key.key}  ({len(key.sequences)} sequence(s))")
            continue
        for sequence in (sequence for sequence in key.sequences if not sequence.equal):
            at = sequence.first_difference
            where = "finish reason only" if at is None else f"first differs at token {at}"
            console.print(
                f"DIFFERS  {key.key}  sequence {sequence.index}: {where} (stored {sequence.stored_length} tokens, "
                f"{sequence.stored_finish}; regenerated {sequence.regenerated_length} tokens, "
                f"{sequence.regenerated_finish})"
            )
    divergence = ", ".join(f"{position} ({count})" for position, count in report.divergence().items())
    per_key = report.seconds / len(report.keys) if report.keys else 0.0
    console.print(
        f"audited {len(report.keys)} of {report.total_keys} keys ({report.selection}) with {report.engine} on "
        f"{report.device} in {report.dtype}, {'sampled' if report.sampled else 'greedy'}: {report.equal} equal, "
        f"{report.differing} differing"
        + (f"; first divergence at token (keys): {divergence}" if divergence else "")
        + f"; {per_key:.3f} s per key",
        markup=False,
    )


def render_ray(result: RayRun, console: Console) -> None:
    table = Table(title=f"gencache --ray: {result.output_dir}", title_justify="left")
    for column in ("shard", "status", "worker", "seconds", "of which load", "attempts", "entries", "tokens"):
        table.add_column(column, justify="left" if column in ("status", "worker") else "right")
    for r in sorted(result.records, key=lambda r: r.index):
        numbers = (f"{r.seconds:.2f}", f"{r.load_seconds:.2f}", *map(str, (r.attempts, r.entries, r.tokens)))
        table.add_row(f"{r.index}/{result.shards}", r.status, escape(r.worker or "-"), *numbers)
    console.print(table)
    console.print(
        f"{len(result.published)} shards published, {len(result.skipped)} already published (skipped), "
        f"{result.retries} retries, {result.workers} workers, {result.seconds:.1f}s"
    )
