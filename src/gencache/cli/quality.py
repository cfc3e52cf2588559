"""``gencache score``, ``gencache report`` and ``gencache audit``: the commands over :func:`gencache.run.score.score`,
:func:`gencache.run.score.write_report` and :func:`gencache.run.audit.audit` (options, tables, JSON, the lines
printed); torch and transformers load inside the commands only."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gencache.artifact.publish import publish_file
from gencache.artifact.report import classify_path
from gencache.cli.console import RunProgress, echo_json, make_console, printable
from gencache.cli.quiet import quiet_libraries
from gencache.config.names import ALL_ENGINES, DTYPES
from gencache.config.paths import check_output_name
from gencache.core.errors import ConfigError, InputPathError
from gencache.data.answers import METRICS

if TYPE_CHECKING:
    from gencache.run.audit import AuditReport
    from gencache.run.score import ScoreReport

_STYLES = {"bad": "bold red", "warn": "yellow", "good": "green"}

ArtifactArgument = Annotated[
    str,
    typer.Argument(
        metavar="ARTIFACT", help="A published artifact (a directory or an s3:// URL), one shard, or a shard base."
    ),
]
_Patterns = Annotated[
    list[str] | None,
    typer.Option(
        "--answer-pattern",
        metavar="I=REGEX",
        help="Cut data config I's answers with REGEX (its group named answer, else its group, else the match) "
        "instead of its rule (repeatable).",
    ),
]
#: ``--data-root`` and ``--source``, as ``export``, ``score`` and ``report`` take them (and ``audit`` ARTIFACT).
DataRootOption = Annotated[
    Path | None,
    typer.Option(
        "--data-root",
        metavar="DIR",
        help="Look for the recorded local dataset sources under DIR (by their last path component).",
    ),
]
SourceOption = Annotated[
    list[str] | None,
    typer.Option("--source", metavar="I=PATH", help="Read data config I from PATH instead (repeatable)."),
]


def _by_index(option: str, texts: list[str] | None) -> dict[int, str]:
    """``--source I=PATH`` or ``--answer-pattern I=REGEX`` options as a mapping from data config index I."""
    chosen: dict[int, str] = {}
    for text in texts or ():
        index, sep, value = text.partition("=")
        if not sep or not index.strip().isdigit() or not value:
            shape = "I=PATH" if option == "--source" else "I=REGEX"
            raise ConfigError(f"{option} must look like {shape} (data config index I), got {text!r}.")
        chosen[int(index)] = value
    return chosen


def checked_sources(artifact: str, sources: list[str] | None) -> dict[int, str]:
    """``--source I=PATH`` options as a mapping, once ``artifact`` is known to be an artifact."""
    not_artifact = classify_path(artifact)
    if not_artifact is not None:
        raise InputPathError(not_artifact["error"])
    return _by_index("--source", sources)


def render_scores(report: ScoreReport, console: Console) -> None:
    """The verdict, the worst signs first, then the scores of each data config and of the whole run: one row per
    finish reason, without metric columns when no answer has a gold reference; numbers are never wrapped."""
    for level, text in report.verdict:
        console.print(f"[{_STYLES[level]}]{level}:[/] {text}", highlight=False)
    console.print(f"scores of {report.artifact}", highlight=False)
    metrics = METRICS if report.overall.scored else ()
    for group in (*report.groups, report.overall):
        title = (
            group.label
            if group is report.overall
            else f"{group.label}: answer rule {group.rule}; headline {group.headline}"
        )
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
        table.add_column("finish", no_wrap=True)
        for name in ("answers", "unscored", *metrics):
            table.add_column(name, justify="right", no_wrap=True)
        for label, part in [("all", group), *group.by_finish_reason.items()]:
            means = ["–" if part.means[name] is None else f"{part.means[name]:.3f}" for name in metrics]
            table.add_row(label, str(part.answers), str(part.unscored), *means)
        console.print(table)


def score_command(
    artifact: ArtifactArgument,
    as_json: Annotated[bool, typer.Option("--json", help="Print the scores as JSON.")] = False,
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="FILE", help="Also write one row per answer to FILE (.jsonl or .parquet)."),
    ] = None,
    answer_pattern: _Patterns = None,
    data_root: DataRootOption = None,
    source: SourceOption = None,
) -> None:
    """Score every stored answer against its sample's reference (exact match, token F1, contains) and print a
    verdict (answers cut at max_new_tokens, empty answers, the score against the gold, answers without gold), then
    the means per data config and finish reason. Works from the artifact alone (the references come from the samples
    rebuilt from the recorded sources); nothing is written into the artifact."""
    from gencache.run.score import score  # the config models (pydantic): not for --help

    chosen = checked_sources(artifact, source)
    with quiet_libraries(False):
        report = score(
            artifact,
            out=out,
            answer_patterns=_by_index("--answer-pattern", answer_pattern),
            data_root=data_root,
            sources=chosen,
        )
    if as_json:
        echo_json(report.as_json())
        return
    render_scores(report, make_console())
    if report.out is not None:
        typer.echo(f"wrote {len(report.answers)} scores to {report.out}")


def report_command(
    artifact: ArtifactArgument,
    out: Annotated[Path, typer.Option("--out", metavar="FILE", help="The HTML file to write (must not exist).")],
    audit: Annotated[
        Path | None,
        typer.Option("--audit", metavar="FILE", help="Add the audit report gencache audit --report wrote."),
    ] = None,
    answer_pattern: _Patterns = None,
    data_root: DataRootOption = None,
    source: SourceOption = None,
) -> None:
    """Write one self-contained HTML page about the run (opens offline): the verdict first, provenance and
    determinism settings, scores, per data config the answer lengths by finish reason, prompt against answer
    length, the score distribution and the worst examples, and an audit's result when given. Charts need
    matplotlib (the report extra)."""
    from gencache.run.score import CHARTS_MISSING, write_report

    chosen, patterns = checked_sources(artifact, source), _by_index("--answer-pattern", answer_pattern)
    with quiet_libraries(False):
        result = write_report(artifact, out, audit=audit, answer_patterns=patterns, data_root=data_root, sources=chosen)
    if not result.charts:
        typer.echo(f"note: {CHARTS_MISSING}", err=True)
    typer.echo(
        f"wrote {result.out} ({result.size} bytes, {result.data_configs} data configs, {result.answers} answers)"
    )


def render_audit(report: AuditReport, console: Console) -> None:
    """One line per audited key (equal, or where each differing sequence first diverges and its finish reasons),
    then the summary: keys audited, equal, differing, the first-divergence positions and the time per key."""
    for key in report.keys:
        if key.equal:
            console.print(f"equal    {key.key}  ({len(key.sequences)} sequence(s))", highlight=False)
            continue
        for sequence in (sequence for sequence in key.sequences if not sequence.equal):
            where = f"first differs at token {sequence.first_difference}"
            if sequence.first_difference is None:
                where = "finish reason only"
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


def audit_command(
    artifact: ArtifactArgument,
    samples: Annotated[
        int, typer.Option("--samples", metavar="N", help="Audit N keys drawn with --seed (default 32).")
    ] = 32,
    all_keys: Annotated[bool, typer.Option("--all", help="Audit every key.")] = False,
    keys: Annotated[
        list[str] | None,
        typer.Option("--keys", metavar="KEY[,KEY...]", help="Audit these keys (repeatable, or comma-separated)."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", metavar="N", help="Seed of the key selection.")] = 0,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            metavar="NAME",
            help='Engine to regenerate with (default "transformers"; "vllm" for a run that sampled with vLLM, whose '
            "sampler only vLLM reproduces).",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            metavar="PATH",
            help="Teacher to regenerate with (default: the run's model_path); a tokenizer that came with the run's "
            "teacher comes with it.",
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option("--tokenizer", metavar="PATH", help="Tokenizer (default: the run's, or the one with --model)."),
    ] = None,
    device: Annotated[
        str | None, typer.Option("--device", metavar="DEVICE", help="Device (default: the run's model.device).")
    ] = None,
    dtype: Annotated[
        str | None, typer.Option("--dtype", metavar="DTYPE", help="Weights dtype (default: the run's model.dtype).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON report.")] = False,
    report: Annotated[
        Path | None, typer.Option("--report", metavar="FILE", help="Also write the JSON report to FILE.")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Let library log lines through.")] = False,
) -> None:
    """Regenerate stored answers one prompt at a time and compare them token for token with the cache (exit 0 when
    every audited key is equal, 1 when any differs, 2 for bad input). Nothing is written into the artifact."""
    from gencache.config.messages import unknown_name
    from gencache.run.audit import audit

    checked_sources(artifact, None)
    if engine is not None and engine not in ALL_ENGINES:
        raise ConfigError(f"--engine: {unknown_name('engine', engine, ALL_ENGINES)}.")
    if dtype is not None and dtype not in DTYPES:
        raise ConfigError(f"--dtype: {dtype!r} is not one of {', '.join(DTYPES)}.")
    target = None
    if report is not None:  # made absolute; never inside the artifact (immutable) nor under a non-directory
        check_output_name(str(report), "--report")
        target = Path(os.path.abspath(os.path.expanduser(report)))
        base = Path(os.path.abspath(os.path.expanduser(artifact)))
        if target == base or base in target.parents:
            raise ConfigError(f"--report {report}: an artifact is immutable; write the report outside {artifact}.")
        if not target.parent.is_dir():
            raise ConfigError(f"--report {report}: {target.parent} is not a directory.")
    given = [key.strip() for text in keys or () for key in text.split(",") if key.strip()] if keys else None
    show_progress = make_console(stderr=True).is_terminal and not as_json
    with quiet_libraries(verbose):
        result = audit(
            artifact,
            samples=samples,
            all_keys=all_keys,
            keys=given,
            seed=seed,
            engine=engine,
            model_path=model,
            tokenizer_path=tokenizer,
            device=device,
            dtype=dtype,
            progress=RunProgress if show_progress else None,
        )
    document = json.dumps(result.to_json(), indent=2, ensure_ascii=False, sort_keys=True)
    if target is not None:  # never half a report
        publish_file(target, lambda handle: handle.write(f"{document}\n".encode()))
    if as_json:
        typer.echo(printable(document))
    else:
        render_audit(result, make_console())
    raise typer.Exit(result.exit_code)
