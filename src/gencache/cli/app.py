"""The ``gencache`` command line: a thin layer over the library that maps errors to one line and an exit code.
Heavy modules (torch, transformers, datasets) are imported inside the commands, never by ``gencache --help``."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from gencache.artifact.report import classify_path, inspect_report, verify_report
from gencache.artifact.store import location
from gencache.cli import render, signals
from gencache.cli.render import RunProgress, echo_json, make_console, printable, quiet_libraries
from gencache.config.names import ALL_ENGINES, DTYPES
from gencache.config.paths import check_output_name
from gencache.core.errors import ConfigError, GencacheError, InputPathError, InputProblems, Problem, Stopped
from gencache.core.version import __version__

app = typer.Typer(
    name="gencache",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # a docstring's paragraphs flow (rich mode keeps their line breaks)
    context_settings={"help_option_names": ["-h", "--help"]},
)

_Json = Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")]
_Verbose = Annotated[
    bool, typer.Option("--verbose", "-v", help="Let other libraries' log lines, warnings and progress bars through.")
]
_Tokenizer = Annotated[str | None, typer.Option(metavar="PATH", help="Tokenizer (default: the run's, or --model's).")]
_Dirs = Annotated[list[str], typer.Argument(metavar="DIR", help="Artifacts (directories, s3:// URLs, shard bases).")]
_Artifact = Annotated[str, typer.Argument(metavar="ARTIFACT", help="An artifact (directory, s3:// URL, shard base).")]
_Patterns = Annotated[
    list[str] | None,
    typer.Option(
        metavar="I=REGEX",
        help="Cut data config I's answers with REGEX (its group named answer, else its group, else the match) "
        "instead of its rule (repeatable).",
    ),
]
_DataRoot = Annotated[Path | None, typer.Option(metavar="DIR", help="Find local datasets under DIR.")]
_Sources = Annotated[list[str] | None, typer.Option(metavar="I=PATH", help="Read data config I from PATH.")]


def _by_index(option: str, texts: list[str] | None) -> dict[int, str]:
    chosen: dict[int, str] = {}
    for text in texts or ():
        index, sep, value = text.partition("=")
        if not sep or not index.strip().isdigit() or not value:
            raise ConfigError(f"{option} must look like I=VALUE (data config index I), got {text!r}.")
        chosen[int(index)] = value
    return chosen


def _sources(artifact: str, sources: list[str] | None) -> dict[int, str]:
    """``--source I=PATH`` options as a mapping, once ``artifact`` is known to be an artifact."""
    if (not_artifact := classify_path(artifact)) is not None:
        raise InputPathError(not_artifact["error"])
    return _by_index("--source", sources)


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


class GenerateCommand(TyperCommand):
    """Typer has no option whose value may be left out: a bare ``--ray`` is parsed as ``--ray=``; and ``--set PATH
    VALUE`` (a space for the ``=``) is refused in one line showing ``PATH=VALUE``, not as an extra argument."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        given = list(args)
        for position, token in enumerate(args):
            if token == "--":
                break
            following = args[position + 1 : position + 3]
            if token == "--set" and len(following) == 2 and "=" not in following[0] and following[1][:1] != "-":
                raise ConfigError(f"--set takes PATH=VALUE as one argument: --set {following[0]}={following[1]}.")
            after = following[0] if following else "-"
            if token == "--ray" and (after.startswith("-") or after.endswith(".json")):  # not its address
                given[position] = "--ray="
        return super().parse_args(ctx, given)


@contextlib.contextmanager
def _ray_output_off(verbose: bool) -> Iterator[None]:
    """Unless ``verbose``, descriptor 2 (where Ray's C++ core and a local instance's processes write) points at the
    null device for the block, while ``sys.stderr`` is a copy of the terminal's."""
    ours = False
    with contextlib.suppress(AttributeError, OSError, ValueError):  # a captured or replaced stderr has no fileno
        ours = not verbose and sys.stderr.fileno() == 2
    if not ours:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    terminal = os.fdopen(os.dup(2), "w", buffering=1, encoding=sys.stderr.encoding, errors=sys.stderr.errors)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        with contextlib.redirect_stderr(terminal):
            yield
    finally:  # the copy stays open: the run's console and progress display write to it
        terminal.flush()
        os.dup2(saved, 2)
        os.close(saved)


@app.command(cls=GenerateCommand)
def generate(
    config: Annotated[Path, typer.Argument(metavar="CONFIG.json", help="The run's JSON config.")],
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="PATH=VALUE",
            help="Override a config field by dotted path with a JSON value (repeatable), e.g. "
            "--set model.generation_kwargs.max_new_tokens=64.",
        ),
    ] = None,
    output_dir: Annotated[str | None, typer.Option(metavar="DIR", help="Override output_dir.")] = None,
    limit: Annotated[int | None, typer.Option(metavar="N", help="Cap each num_samples at N.")] = None,
    shards: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="Run all N shards (with --ray: on the cluster), publishing each; a rerun does the unpublished ones.",
        ),
    ] = None,
    shard: Annotated[
        str | None, typer.Option(metavar="I/N", help="Generate shard I/N only (set under torchrun/SLURM).")
    ] = None,
    skip_published: Annotated[
        bool, typer.Option("--skip-published", help="Exit 0 when this shard is already published by the same run.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check without weights; exit with generate's code.")
    ] = False,
    show_prompt: Annotated[
        int | None, typer.Option(metavar="N", help="Print sample N's rendered prompt and its parts.")
    ] = None,
    raw: Annotated[bool, typer.Option("--raw", help="With --show-prompt: only its text and ids, as JSON.")] = False,
    json_: Annotated[
        bool, typer.Option("--json", help="With the dry run: checks and problems as JSON; with --ray: the summary.")
    ] = False,
    verbose: _Verbose = False,
    ray: Annotated[
        str | None,
        typer.Option(
            metavar="[ADDRESS]",
            help="Run the shards on a Ray cluster: HOST:PORT, ray://HOST:PORT, auto (`ray start`'s here) or none "
            "(RAY_ADDRESS, else a local instance); give it after CONFIG.json.",
        ),
    ] = None,
    workers: Annotated[int | None, typer.Option(metavar="K", help="With --ray: K workers at most.")] = None,
    worker_gpus: Annotated[float | None, typer.Option(metavar="F", help="With --ray: GPUs per worker (1).")] = None,
    max_retries: Annotated[
        int | None, typer.Option(metavar="R", help="With --ray: retries of a dead worker's shard (3).")
    ] = None,
    ray_timeout: Annotated[
        float | None, typer.Option(metavar="S", help="With --ray: seconds without progress (600).")
    ] = None,
) -> None:
    """Run the teacher over every sample of CONFIG.json (a sibling _default.json merged in) and publish one
    immutable artifact directory (or N shards)."""
    from gencache.run.api import dry_run as dry_run_cache
    from gencache.run.api import generate as generate_cache

    if raw and show_prompt is None:
        raise ConfigError("--raw goes with --show-prompt N; add --show-prompt.")
    if json_ and not (dry_run or show_prompt is not None or ray is not None):
        raise ConfigError("--json goes with --dry-run or --ray; add one of them.")
    ray_given: dict[str, Any] = {"worker_gpus": worker_gpus, "max_retries": max_retries, "timeout": ray_timeout}
    if ray is None and (workers is not None or any(v is not None for v in ray_given.values())):
        raise ConfigError("--workers, --worker-gpus, --max-retries and --ray-timeout go with --ray; add --ray.")
    if ray is not None and (dry_run or show_prompt is not None):
        raise ConfigError("--dry-run makes the same checks with or without --ray; drop --ray for the dry run.")
    console = make_console(stderr=True)
    notify = functools.partial(render.render_notice, console)
    with quiet_libraries(verbose, warn=lambda text: notify("warning", text)):
        if ray is not None:
            from gencache.run.plan import Overrides
            from gencache.run.ray import RayOptions, generate_on_ray

            options = RayOptions(ray or None, shards, workers, **{k: v for k, v in ray_given.items() if v is not None})
            overrides = Overrides(tuple(set_ or ()), output_dir, limit)
            with _ray_output_off(verbose), contextlib.redirect_stdout(sys.stderr):  # Ray prints deaths on stdout
                run = generate_on_ray(
                    config, options, notify=notify, progress=RunProgress, overrides=overrides, shard=shard
                )
            signals.note_published(run.published + run.skipped)  # a stop from here on says it is published
            if json_:
                echo_json(run.to_json())
            else:
                render.render_ray(run, console)
                typer.echo(str(run.output_dir))
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
            one = error.problem or Problem("config", "config", error)
            echo_json(
                render.problems_json(error.exit_code, error.problems if isinstance(error, InputProblems) else [one])
            )
            raise typer.Exit(error.exit_code) from None
    if dry_run or show_prompt is not None:
        render.dry_run_output(report, raw=raw, as_json=json_)
    signals.note_published([result])  # a stop from here on says it is published
    typer.echo(str(result))


@app.command()
def inspect(dirs: _Dirs, as_json: _Json = False) -> None:
    """Show teacher, tokenizer state, entries, token lengths, finish reasons, counts per data config, shards and
    overlaps (exit 1 when an artifact or shard is unreadable or shards are not one run; 2 for a non-artifact)."""
    report = inspect_report(dirs)
    if as_json:
        echo_json(report.to_json())
    else:
        render.render_inspect(report, make_console(), make_console(stderr=True))
    raise typer.Exit(report.exit_code)


@app.command()
def verify(dirs: _Dirs, as_json: _Json = False) -> None:
    """Re-hash every tensor and entry and check the header against the manifest (and that the shards of a sharded
    output are one whole run); exit 1 on any problem, 2 when a path is not an artifact."""
    terminal = make_console(stderr=True).is_terminal
    report = verify_report(dirs, progress=render.verify_progress if terminal and not as_json else None)
    if as_json:
        echo_json(report.to_json())
    else:
        for line in report.lines():
            typer.echo(printable(line))
    raise typer.Exit(report.exit_code)


@app.command()
def export(
    directory: Annotated[
        str, typer.Argument(metavar="DIR", help="A published artifact directory or s3:// URL (or a sharded output).")
    ],
    out: Annotated[Path, typer.Option(metavar="FILE", help="The file to write (must not exist).")],
    format: Annotated[
        str | None,
        typer.Option(metavar="jsonl|parquet", help="JSON Lines or parquet (default: by --out's suffix)."),
    ] = None,
    no_prompts: Annotated[
        bool,
        typer.Option("--no-prompts", help="Leave the prompts out (no tokenizer loaded); the join fields stay."),
    ] = False,
    data_root: _DataRoot = None,
    source: _Sources = None,
    min_score: Annotated[
        list[str] | None,
        typer.Option(
            metavar="METRIC=VALUE",
            help="Keep the answers whose metric (exact_match, f1, contains) is at least VALUE (repeatable).",
        ),
    ] = None,
    scores: Annotated[
        Path | None, typer.Option(metavar="FILE", help="With --min-score: a gencache score --out file.")
    ] = None,
    tokenizer: _Tokenizer = None,
) -> None:
    """Write one record per stored sequence: key, completion (text and ids), finish reason, token length and, when
    the datasets can be read, the prompt and dataset name (parquet: provenance in the schema metadata)."""
    from gencache.data.scores import parse_min_score
    from gencache.run.export import export as export_artifact

    with quiet_libraries(False):
        result = export_artifact(
            directory,
            out,
            format=format,
            prompts=not no_prompts,
            data_root=data_root,
            sources=_sources(directory, source),
            min_score=parse_min_score(min_score) if min_score else None,
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
        str, typer.Argument(metavar="PARENT", help="The directory (or s3:// prefix) holding output directories.")
    ],
) -> None:
    """Remove what killed gencache writers left: temporary directories on this host, or on a bucket their
    incomplete uploads, uncommitted objects and stale locks (a live writer's and every committed artifact kept)."""
    from gencache.artifact.publish import clean as clean_parent
    from gencache.artifact.upload import clean as clean_prefix

    where = location(parent)
    removed = [str(path) for path in clean_parent(where)] if isinstance(where, Path) else clean_prefix(where)
    for path in removed:
        typer.echo(f"removed {path}")
    what = ("temporary directory", "leftover") if len(removed) == 1 else ("temporary directories", "leftovers")
    typer.echo(f"{len(removed)} {what[0] if isinstance(where, Path) else what[1]} removed")


@app.command()
def demo(
    workdir: Annotated[Path, typer.Option(help="Where to build the teacher and the artifact.")] = Path("gencache-demo"),
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
        str | None, typer.Option(metavar="PATH_OR_ID", help="The teacher instead of the tiny one.")
    ] = None,
) -> None:
    """Write a config over local example files (a QA table and chat rows) that runs as is, to edit into your own."""
    from gencache.cli.demo import write_starter

    with quiet_libraries(False):
        write_starter(directory, teacher=teacher)


@app.command()
def score(
    artifact: _Artifact,
    as_json: _Json = False,
    out: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Also write one row per answer (.jsonl or .parquet).")
    ] = None,
    answer_pattern: _Patterns = None,
    data_root: _DataRoot = None,
    source: _Sources = None,
) -> None:
    """Score every stored answer against its sample's reference (exact match, token F1, contains): a verdict (cut,
    empty or ungolded answers, the score), then the means per data config and finish reason. Writes nothing."""
    from gencache.run.score import score

    chosen, patterns = _sources(artifact, source), _by_index("--answer-pattern", answer_pattern)
    with quiet_libraries(False):
        report = score(artifact, out=out, answer_patterns=patterns, data_root=data_root, sources=chosen)
    if as_json:
        echo_json(report.as_json())
        return
    render.render_scores(report, make_console())
    if report.out is not None:
        typer.echo(f"wrote {len(report.answers)} scores to {report.out}")


@app.command()
def report(
    artifact: _Artifact,
    out: Annotated[Path, typer.Option(metavar="FILE", help="The HTML file to write (must not exist).")],
    audit: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Add the report gencache audit --report wrote.")
    ] = None,
    answer_pattern: _Patterns = None,
    data_root: _DataRoot = None,
    source: _Sources = None,
) -> None:
    """Write one self-contained HTML page about the run: verdict, provenance, determinism, scores, answer lengths,
    the worst examples and an audit's result when given (charts need matplotlib: the report extra)."""
    from gencache.run.score import CHARTS_MISSING, write_report

    chosen, patterns = _sources(artifact, source), _by_index("--answer-pattern", answer_pattern)
    with quiet_libraries(False):
        result = write_report(artifact, out, audit=audit, answer_patterns=patterns, data_root=data_root, sources=chosen)
    if not result.charts:
        typer.echo(f"note: {CHARTS_MISSING}", err=True)
    typer.echo(
        f"wrote {result.out} ({result.size} bytes, {result.data_configs} data configs, {result.answers} answers)"
    )


@app.command()
def audit(
    artifact: _Artifact,
    samples: Annotated[int, typer.Option(metavar="N", help="Audit N keys drawn with --seed.")] = 32,
    all_keys: Annotated[bool, typer.Option("--all", help="Audit every key.")] = False,
    keys: Annotated[
        list[str] | None,
        typer.Option(metavar="KEY[,KEY...]", help="Audit these keys (repeatable, or comma-separated)."),
    ] = None,
    seed: Annotated[int, typer.Option(metavar="N", help="Seed of the key selection.")] = 0,
    engine: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help='Engine to regenerate with (default "transformers"; "vllm" for a run that sampled with vLLM).',
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option(metavar="PATH", help="Teacher to regenerate with (default: the run's).")
    ] = None,
    tokenizer: _Tokenizer = None,
    device: Annotated[str | None, typer.Option(metavar="DEVICE", help="Device (default: the run's).")] = None,
    dtype: Annotated[str | None, typer.Option(metavar="DTYPE", help="Weights dtype (default: the run's).")] = None,
    as_json: _Json = False,
    report: Annotated[Path | None, typer.Option(metavar="FILE", help="Also write the JSON report to FILE.")] = None,
    verbose: _Verbose = False,
) -> None:
    """Regenerate stored answers one prompt at a time and compare them token for token with the cache (exit 0 when
    every audited key is equal, 1 when any differs, 2 for bad input). Nothing is written into the artifact."""
    from gencache.artifact.publish import publish_file
    from gencache.config.messages import unknown_name
    from gencache.run.audit import audit

    _sources(artifact, None)
    for option, value, known in (("--engine", engine, ALL_ENGINES), ("--dtype", dtype, DTYPES)):
        if value is not None and value not in known:
            raise ConfigError(f"{option}: {unknown_name(option[2:], value, known)}.")
    target = None
    if report is not None:  # never inside the artifact (immutable) nor under a non-directory
        check_output_name(str(report), "--report")
        target = Path(os.path.abspath(os.path.expanduser(report)))
        base = Path(os.path.abspath(os.path.expanduser(artifact)))
        if target == base or base in target.parents:
            raise ConfigError(f"--report {report}: an artifact is immutable; write the report outside {artifact}.")
        if not target.parent.is_dir():
            raise ConfigError(f"--report {report}: {target.parent} is not a directory.")
    given = [key.strip() for text in keys or () for key in text.split(",") if key.strip()] if keys else None
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
            progress=RunProgress if make_console(stderr=True).is_terminal and not as_json else None,
        )
    document = json.dumps(result.to_json(), indent=2, ensure_ascii=False, sort_keys=True)
    if target is not None:  # never half a report
        publish_file(target, lambda handle: handle.write(f"{document}\n".encode()))
    if as_json:
        typer.echo(printable(document))
    else:
        render.render_audit(result, make_console())
    raise typer.Exit(result.exit_code)


def run(argv: list[str] | None = None) -> int:
    """Run the CLI inside another program and return its exit code: 0 success, 1 failure, 2 bad input, 130 SIGINT,
    143 SIGTERM. The command owns the signals while it runs; the caller's handlers come back afterwards."""
    with signals.owned():
        return _run(argv)


def _run(argv: list[str] | None) -> int:
    try:
        result = app(args=argv, prog_name="gencache", standalone_mode=False)
        signals.raise_pending()
    except (Stopped, Exception) as exc:
        # SIGINT (130), SIGTERM or SIGHUP (143) at any moment of the command, also when code it interrupted (a
        # schema being built) wrapped the stop in its own error
        stop = exc if isinstance(exc, Stopped) else signals.received
        if stop is not None:
            typer.echo(printable(str(stop)), err=True)
            return stop.exit_code
        if isinstance(exc, typer.TyperException):  # a usage error (typer's copy of click's)
            exc.show()  # type: ignore[attr-defined]
            return exc.exit_code
        if os.environ.get("GENCACHE_DEBUG") == "1":
            traceback.print_exc()
        if isinstance(exc, InputProblems):  # several independent problems: one line each, then how many
            for problem in exc.problems:
                typer.echo(printable(f"error: {problem.error}"), err=True)
            typer.echo(f"{len(exc.problems)} problems found; nothing was loaded or written.", err=True)
            return exc.exit_code
        if isinstance(exc, GencacheError | OSError):  # an unanticipated file-system failure: still one line
            typer.echo(printable(f"error: {exc}"), err=True)
            return exc.exit_code if isinstance(exc, GencacheError) else 1
        typer.echo(  # a bug: one line, the traceback one variable away
            f"internal error: {type(exc).__name__}: {exc} (rerun with GENCACHE_DEBUG=1 for the traceback)", err=True
        )
        return 1
    return result if isinstance(result, int) else 0


def main(argv: list[str] | None = None) -> None:
    """The ``gencache`` console script: a signal ends the command with one line and 130/143; after it, with the
    command's code."""
    signals.install()
    try:
        code = _run(argv)
        signals.quiet_exit(code)
    except Stopped as stop:  # between the command's end and the quiet exit: nothing is left to clean up
        try:
            typer.echo(str(stop), err=True)
        finally:
            os._exit(stop.exit_code)
    sys.exit(code)
