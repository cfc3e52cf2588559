"""``gencache score`` and ``gencache report``: the commands over :func:`gencache.run.score.score` and
:func:`gencache.run.score.write_report` (options, the score table, the JSON, the lines printed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from gencache.artifact.report import classify_path
from gencache.cli.console import echo_json, make_console
from gencache.cli.quiet import quiet_libraries
from gencache.core.errors import ConfigError, InputPathError
from gencache.data.answers import METRICS

if TYPE_CHECKING:
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
        raise InputPathError(not_artifact.error)
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
