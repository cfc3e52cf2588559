"""``gencache audit``: the command over :func:`gencache.run.audit.audit` (options, the report file, the output and
the exit code); torch and transformers load inside the command only."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from gencache.cli.quality import ArtifactArgument
from gencache.config.paths import check_output_name
from gencache.core.errors import ConfigError, InputPathError

if TYPE_CHECKING:
    from gencache.run.audit import AuditReport


def _render(report: AuditReport, console: Console) -> None:
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
    from gencache.artifact.report import classify_path
    from gencache.cli.console import RunProgress, make_console, printable
    from gencache.cli.quiet import quiet_libraries
    from gencache.config.names import ALL_ENGINES, DTYPES
    from gencache.run.audit import audit

    not_artifact = classify_path(artifact)
    if not_artifact is not None:
        raise InputPathError(not_artifact["error"])
    if engine is not None and engine not in ALL_ENGINES:
        from gencache.config.messages import unknown_name

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
        from gencache.artifact.publish import publish_file

        publish_file(target, lambda handle: handle.write(f"{document}\n".encode()))
    if as_json:
        typer.echo(printable(document))
    else:
        _render(result, make_console())
    raise typer.Exit(result.exit_code)
