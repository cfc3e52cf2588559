"""The ``gencache`` command line: a thin layer over the library that maps errors to one line and an exit code.
Heavy modules (torch, transformers, datasets) are imported inside the commands, never by ``gencache --help``."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gencache.cli import signals
from gencache.cli.console import RunProgress, echo_json, make_console, printable
from gencache.cli.quality import (
    DataRootOption,
    SourceOption,
    audit_command,
    checked_sources,
    report_command,
    score_command,
)
from gencache.cli.quiet import quiet_libraries
from gencache.cli.ray_run import GenerateCommand
from gencache.cli.render import dry_run_output, problems_json, render_notice, verify_progress
from gencache.core.errors import ConfigError, GencacheError, InputProblems, Problem, Stopped
from gencache.core.version import __version__

app = typer.Typer(
    name="gencache",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gencache {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """Build, inspect and verify immutable teacher-generation caches for knowledge distillation."""


@app.command(cls=GenerateCommand)
def generate(
    config: Annotated[
        Path,
        typer.Argument(metavar="CONFIG.json", help="The run's JSON config (a sibling _default.json is merged in)."),
    ],
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="PATH=VALUE",
            help="Override one config field by its dotted path with a JSON value (repeatable), e.g. "
            "--set model.generation_kwargs.max_new_tokens=64.",
        ),
    ] = None,
    output_dir: Annotated[str | None, typer.Option("--output-dir", metavar="DIR", help="Override output_dir.")] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", metavar="N", help="Cap every data config's num_samples at N (a prefix of the full run)."
        ),
    ] = None,
    shards: Annotated[
        int | None,
        typer.Option(
            "--shards",
            metavar="N",
            help="Run all N shards in this process (with --ray: on the cluster), publishing each when done; rerun "
            "after a crash to generate only the shards that are not published yet.",
        ),
    ] = None,
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard",
            metavar="I/N",
            help="Generate shard I/N only (I zero-based); set automatically under torchrun/SLURM.",
        ),
    ] = None,
    skip_published: Annotated[
        bool,
        typer.Option(
            "--skip-published",
            help="Exit 0 when this shard is already published, verifies and is of the same run.",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Make every check generate makes before loading weights, report them and exit with generate's code.",
        ),
    ] = False,
    show_prompt: Annotated[
        int | None,
        typer.Option(
            "--show-prompt",
            metavar="N",
            help="With the dry run: print sample N's rendered prompt (zero-based), its parts and token count.",
        ),
    ] = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help="With --show-prompt: print only a JSON object with the exact prompt text and its token ids on "
            "stdout (no report).",
        ),
    ] = False,
    json_: Annotated[
        bool,
        typer.Option(
            "--json",
            help="With the dry run: print the checks and every problem (check, location, message) as JSON on stdout; "
            "with --ray: the run's summary per shard.",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Let other libraries' log lines, warnings and progress bars (hub, datasets, vLLM) through.",
        ),
    ] = False,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="[ADDRESS]",
            help="Run the shards on a Ray cluster, each handed to whichever teacher worker is free: ADDRESS is "
            "HOST:PORT or ray://HOST:PORT, auto is the cluster `ray start` runs here, none is RAY_ADDRESS or else a "
            "local Ray instance (give --ray after CONFIG.json).",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            metavar="K",
            help="With --ray: at most K teacher workers (default: as many as the cluster holds).",
        ),
    ] = None,
    worker_gpus: Annotated[
        float | None,
        typer.Option(
            "--worker-gpus", metavar="F", help="With --ray: GPUs per worker, default 1 (0.5: two workers share a GPU)."
        ),
    ] = None,
    max_retries: Annotated[
        int | None,
        typer.Option(
            "--max-retries", metavar="R", help="With --ray: generate a dead worker's shard again at most R times (3)."
        ),
    ] = None,
    ray_timeout: Annotated[
        float | None,
        typer.Option(
            "--ray-timeout",
            metavar="S",
            help="With --ray: give up when no worker starts, or no shard makes progress, for S seconds (600).",
        ),
    ] = None,
) -> None:
    """Run the teacher over every sample of CONFIG and publish one immutable artifact directory (or N shards)."""
    from gencache.run.api import dry_run as dry_run_cache
    from gencache.run.api import generate as generate_cache

    if raw and show_prompt is None:
        raise ConfigError("--raw goes with --show-prompt N; add --show-prompt.")
    if json_ and not (dry_run or show_prompt is not None or ray is not None):
        raise ConfigError("--json goes with --dry-run or --ray; add one of them.")
    console = make_console(stderr=True)
    notify = functools.partial(render_notice, console)
    with quiet_libraries(verbose, warn=lambda text: notify("warning", text)):
        if any(given is not None for given in (ray, workers, worker_gpus, max_retries, ray_timeout)):
            from gencache.cli.ray_run import generate_on_ray_command, ray_options
            from gencache.run.plan import Overrides

            generate_on_ray_command(
                config,
                ray_options(ray, dry_run, show_prompt, workers, worker_gpus, max_retries, ray_timeout, shards),
                as_json=json_,
                verbose=verbose,
                console=console,
                notify=notify,
                progress=RunProgress,
                overrides=Overrides(tuple(set_ or ()), output_dir, limit),
                shard=shard,
            )
            return
        changes: dict[str, Any] = {"overrides": list(set_ or ()), "output_dir": output_dir, "limit": limit}
        changes |= {"shard": shard, "shards": shards, "skip_published": skip_published}
        try:
            if dry_run or show_prompt is not None:  # --show-prompt alone only looks: the output is not checked
                report = dry_run_cache(config, **changes, show_prompt=show_prompt, check_output=dry_run)
            else:
                result = generate_cache(config, **changes, notify=notify, progress=RunProgress)
        except GencacheError as error:
            if not json_:
                raise
            found = [error.problem or Problem("config", "config", error)]
            echo_json(problems_json(error.exit_code, error.problems if isinstance(error, InputProblems) else found))
            raise typer.Exit(error.exit_code) from None
    if dry_run or show_prompt is not None:
        dry_run_output(report, raw=raw, as_json=json_)
    signals.note_published([result])  # a stop from here on says it is published
    typer.echo(str(result))


_Dirs = Annotated[
    list[str],
    typer.Argument(metavar="DIR", help="Artifact directories or s3:// URLs (or an unsuffixed sharded output_dir)."),
]


@app.command()
def inspect(
    dirs: _Dirs,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON report instead of tables.")] = False,
) -> None:
    """Show teacher, tokenizer state, entries, token lengths, finish reasons, counts per data config (a shard's own
    and its run's), shards and overlaps (exit 1 when an artifact or a shard cannot be read or a sharded output is
    not one whole run; 2 when a path is not an artifact at all)."""
    from gencache.artifact.report import inspect_report
    from gencache.cli.render import render_inspect

    report = inspect_report(dirs)
    if as_json:
        echo_json(report.to_json())
    else:
        render_inspect(report, make_console(), make_console(stderr=True))
    raise typer.Exit(report.exit_code)


@app.command()
def verify(
    dirs: _Dirs,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON report instead of lines.")] = False,
) -> None:
    """Re-hash every tensor and entry and check the header against the manifest (and that the shards of a sharded
    output are one whole run); exit 1 on any problem, 2 when a path is not an artifact."""
    from gencache.artifact.report import verify_report

    stderr = make_console(stderr=True)
    report = verify_report(dirs, progress=verify_progress(stderr) if stderr.is_terminal and not as_json else None)
    if as_json:
        echo_json(report.to_json())
    else:
        for line in report.lines():
            typer.echo(printable(line))
    raise typer.Exit(report.exit_code)


@app.command()
def export(
    directory: Annotated[
        str,
        typer.Argument(
            metavar="DIR", help="A published artifact directory or s3:// URL (or an unsuffixed sharded output)."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", metavar="FILE", help="The file to write (must not exist).")],
    format: Annotated[
        str | None,
        typer.Option(
            "--format", metavar="jsonl|parquet", help="JSON Lines or parquet (default: by --out's extension)."
        ),
    ] = None,
    no_prompts: Annotated[
        bool,
        typer.Option(
            "--no-prompts",
            help="Leave the prompts out (no tokenizer loaded); the join fields still come from the datasets when "
            "they can be read.",
        ),
    ] = False,
    data_root: DataRootOption = None,
    source: SourceOption = None,
    min_score: Annotated[
        list[str] | None,
        typer.Option(
            "--min-score",
            metavar="METRIC=VALUE",
            help="Keep the answers whose metric (exact_match, f1, contains) is at least VALUE (repeatable).",
        ),
    ] = None,
    scores: Annotated[
        Path | None,
        typer.Option(
            "--scores", metavar="FILE", help="With --min-score: read the scores from a gencache score --out file."
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer", metavar="PATH", help="Render the prompts with this tokenizer (default: the run's)."
        ),
    ] = None,
) -> None:
    """Write one record per stored sequence: key, completion (text and stored token ids), finish reason, token
    length and, when the datasets can be read, the prompt (text and ids) and dataset name; a parquet file carries
    the artifact's provenance in its schema metadata. Works from the artifact alone."""
    from gencache.data.scores import parse_min_score
    from gencache.run.export import export as export_artifact

    sources = checked_sources(directory, source)
    bar = parse_min_score(min_score) if min_score else None
    with quiet_libraries(False):
        result = export_artifact(
            directory,
            out,
            format=format,
            prompts=not no_prompts,
            data_root=data_root,
            sources=sources,
            min_score=bar,
            scores=scores,
            tokenizer_path=tokenizer,
        )
    if result.note:
        typer.echo(f"note: {result.note}", err=True)
    if result.left_out:
        typer.echo(f"note: --min-score left out {result.left_out} answers", err=True)
    typer.echo(f"wrote {result.records} records to {result.out}")


@app.command()
def clean(
    parent: Annotated[
        str,
        typer.Argument(
            metavar="PARENT",
            help="The directory (or s3:// prefix) that holds output directories (output_dir's parent).",
        ),
    ],
) -> None:
    """Remove what killed gencache writers left: temporary directories on this host, or on a bucket their
    incomplete uploads, uncommitted objects and stale locks (a live writer's and every committed artifact kept)."""
    from gencache.artifact.publish import clean as clean_parent
    from gencache.artifact.store import location
    from gencache.artifact.upload import clean as clean_prefix

    where = location(parent)
    if isinstance(where, Path):
        removed = [str(path) for path in clean_parent(where)]
        what = "temporary director" + ("y" if len(removed) == 1 else "ies")
    else:
        removed = clean_prefix(where)
        what = "leftover" + ("" if len(removed) == 1 else "s")
    for path in removed:
        typer.echo(f"removed {path}")
    typer.echo(f"{len(removed)} {what} removed")


@app.command()
def demo(
    workdir: Annotated[
        Path, typer.Option("--workdir", help="Where to build the tiny teacher and the artifact.")
    ] = Path("gencache-demo"),
) -> None:
    """Build a tiny random teacher, generate a cache over bundled sample data on CPU, inspect it and read an entry."""
    from gencache.cli.demo import run_demo

    with quiet_libraries(False):
        run_demo(workdir)


@app.command()
def init(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="Where to write config.json and data/ (created if needed).")
    ] = Path("gencache-start"),
    teacher: Annotated[
        str | None,
        typer.Option("--teacher", metavar="PATH_OR_ID", help="The teacher to use instead of building the tiny one."),
    ] = None,
) -> None:
    """Write a config over local example files (a QA table and chat rows) that runs as is, to edit into your own."""
    from gencache.cli.demo import write_starter

    with quiet_libraries(False):
        starter = write_starter(directory, teacher=teacher)
    if starter.built_teacher:
        typer.echo(f"built the demo's tiny teacher in {starter.teacher}")
    for path in starter.data:
        typer.echo(f"wrote {path}")
    typer.echo(f"wrote {starter.config}")
    typer.echo(f"next: gencache generate {starter.config} --dry-run   (then without --dry-run)")


app.command(name="audit")(audit_command)
app.command(name="score")(score_command)
app.command(name="report")(report_command)


for _info in app.registered_commands:  # typer's rich help keeps a docstring's line breaks, which the console's own
    # wrapping then breaks again mid-sentence: each paragraph on one line instead
    _doc = _info.help or (_info.callback.__doc__ if _info.callback is not None else None)
    if isinstance(_doc, str):
        _info.help = "\n\n".join(" ".join(paragraph.split()) for paragraph in _doc.strip().split("\n\n"))


def run(argv: list[str] | None = None) -> int:
    """Run the CLI inside another program and return its exit code: 0 success, 1 failure, 2 bad input, 130 SIGINT,
    143 SIGTERM. The command owns the signals while it runs; the caller's handlers come back afterwards."""
    with signals.owned():
        return _run(argv)


def _run(argv: list[str] | None) -> int:
    try:  # typer's own base of its usage errors (newer typer vendors click); older releases raise click's
        from typer import TyperException as CommandLineError
    except ImportError:  # pragma: no cover
        from click import ClickException as CommandLineError  # type: ignore[assignment]

    try:
        result = app(args=argv, prog_name="gencache", standalone_mode=False)
    except Stopped as stop:  # SIGINT (130), SIGTERM or SIGHUP (143), at any moment of the command
        typer.echo(printable(stop.message), err=True)
        return stop.exit_code
    except typer.Exit as exc:
        return int(exc.exit_code)
    except CommandLineError as exc:
        exc.show()  # type: ignore[attr-defined]  # every one is a (vendored) click exception: usage line and hint
        return int(exc.exit_code)
    except Exception as exc:
        if os.environ.get("GENCACHE_DEBUG") == "1":
            import traceback

            traceback.print_exc()
        if isinstance(exc, InputProblems):  # several independent problems: one line each, then how many
            for problem in exc.problems:
                typer.echo(printable(f"error: {problem.error}"), err=True)
            typer.echo(f"{len(exc.problems)} problems found; nothing was loaded or written.", err=True)
            return exc.exit_code
        if isinstance(exc, GencacheError):
            typer.echo(printable(f"error: {exc}"), err=True)
            return exc.exit_code
        if isinstance(exc, OSError):  # a file-system failure gencache did not anticipate: still one line
            typer.echo(f"error: {exc}", err=True)
            return 1
        typer.echo(  # a bug: one line, the traceback one variable away
            f"internal error: {type(exc).__name__}: {exc} (rerun with GENCACHE_DEBUG=1 for the traceback)", err=True
        )
        return 1
    return result if isinstance(result, int) else 0


def main(argv: list[str] | None = None) -> None:
    """The ``gencache`` console script: the command line ``argv`` (``sys.argv[1:]`` when None) in a process that
    is the command line's: a signal ends the command with one line and 130/143; after the command, a signal exits
    with the command's code."""
    signals.install()
    code = 1
    try:
        code = _run(argv)
        signals.quiet_exit(code)
    except Stopped as stop:  # between the command's end and the quiet exit
        signals.exit_now(stop)
    sys.exit(code)
