"""``gencache generate CONFIG --ray [ADDRESS]``: the command's Ray path and what it prints.

Typer has no option whose value may be left out, so :class:`GenerateCommand` reads a ``--ray`` without an address
as ``--ray=`` (``RAY_ADDRESS``, else a local Ray instance).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperCommand

from gencache.core.errors import ConfigError

if TYPE_CHECKING:
    from gencache.run.ray import RayOptions


def takes_address(token: str) -> bool:
    """Whether the token after ``--ray`` is its address: not another option and not the config file."""
    return not token.startswith("-") and not token.endswith(".json")


class GenerateCommand(TyperCommand):
    """The generate command: a bare ``--ray`` parsed as ``--ray=``, and ``--set PATH VALUE`` (a space for the
    ``=``) refused in one line that shows the ``PATH=VALUE`` form instead of the parser's "unexpected extra
    argument"."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        given = list(args)
        for position, token in enumerate(args):
            if token == "--":
                break
            following = args[position + 1 : position + 3]
            if token == "--set" and len(following) == 2 and "=" not in following[0] and following[1][:1] != "-":
                raise ConfigError(f"--set takes PATH=VALUE as one argument: --set {following[0]}={following[1]}.")
            if token == "--ray" and not (following and takes_address(following[0])):
                given[position] = "--ray="
        return super().parse_args(ctx, given)


def ray_options(
    ray: str | None,
    dry_run: bool,
    show_prompt: int | None,
    workers: int | None,
    worker_gpus: float | None,
    max_retries: int | None,
    timeout: float | None,
    shards: int | None,
) -> RayOptions:
    """The run's Ray options from the command's, or one line for a combination that is wrong."""
    from gencache.run.ray import RayOptions

    if ray is None:
        raise ConfigError("--workers, --worker-gpus, --max-retries and --ray-timeout go with --ray; add --ray.")
    if dry_run or show_prompt is not None:
        raise ConfigError("--dry-run makes the same checks with or without --ray; drop --ray for the dry run.")
    given: dict[str, Any] = {"worker_gpus": worker_gpus, "max_retries": max_retries, "timeout": timeout}
    return RayOptions(
        ray or None, shards, workers, **{name: value for name, value in given.items() if value is not None}
    )


@contextlib.contextmanager
def ray_output_off(verbose: bool) -> Iterator[None]:
    """Ray's C++ core (and a local instance's processes) write to descriptor 2: it points at the null device for
    the block unless ``verbose``, while ``sys.stderr`` is a copy of the terminal's (another program's descriptors,
    a ``sys.stderr`` that is not descriptor 2, are left alone)."""
    try:
        ours = not verbose and sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):  # a captured or replaced stderr (a host program's)
        ours = False
    if not ours:
        yield
        return
    sys.stderr.flush()
    saved, previous = os.dup(2), sys.stderr
    terminal = os.fdopen(os.dup(2), "w", buffering=1, encoding=previous.encoding, errors=previous.errors)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    sys.stderr = terminal
    try:
        yield
    finally:  # the copy stays open: the run's console and progress display write to it
        terminal.flush()
        os.dup2(saved, 2)
        os.close(saved)
        sys.stderr = previous


def generate_on_ray_command(
    config: Any, options: RayOptions, *, as_json: bool, verbose: bool, console: Console, **run: Any
) -> None:
    """Run on Ray and print the shard base after a summary per shard on ``console`` (or ``--json``'s summary
    alone); ``run`` are the library's other keywords."""
    from gencache.cli import signals
    from gencache.cli.console import echo_json
    from gencache.run.ray import generate_on_ray

    with ray_output_off(verbose), contextlib.redirect_stdout(sys.stderr):  # Ray prints workers' deaths on stdout
        result = generate_on_ray(config, options, **run)
    signals.note_published(result.published + result.skipped)  # a stop from here on says it is published
    if as_json:
        echo_json(result.to_json())
        return
    table = Table(title=f"gencache --ray: {result.output_dir}", title_justify="left")
    for column in ("shard", "status", "worker", "seconds", "of which load", "attempts", "entries", "tokens"):
        table.add_column(column, justify="left" if column in ("status", "worker") else "right")
    for record in sorted(result.records, key=lambda r: r.index):
        times = (f"{seconds:.2f}" for seconds in (record.seconds, record.load_seconds))
        counts = (str(count) for count in (record.attempts, record.entries, record.tokens))
        table.add_row(f"{record.index}/{result.shards}", record.status, escape(record.worker or "-"), *times, *counts)
    console.print(table)
    console.print(
        f"{len(result.published)} shards published, {len(result.skipped)} already published (skipped), "
        f"{result.retries} retries, {result.workers} workers, {result.seconds:.1f}s",
        highlight=False,
    )
    typer.echo(str(result.output_dir))
