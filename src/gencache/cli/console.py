"""Where the command line prints: rich consoles, a run's progress drawn with ``rich.progress``, and text made safe
for a terminal."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import IO, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

#: Width of a console that is not a terminal: no table column cut, no line wrapped (grep and paste work).
PIPE_WIDTH = 10_000


def make_console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """The console every CLI message goes through (writing to whatever ``sys.stdout`` or ``sys.stderr`` is when it
    writes, unless ``file``): text is never hard-wrapped (a message is one line); on a terminal tables fit the
    terminal, elsewhere they keep every column whole (:data:`PIPE_WIDTH`)."""
    console = Console(file=file, stderr=stderr, soft_wrap=True)
    return console if console.is_terminal else Console(file=file, stderr=stderr, soft_wrap=True, width=PIPE_WIDTH)


def printable(text: str) -> str:
    """``text`` with anything the terminal cannot encode (lone surrogates from a damaged file) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def echo_json(value: Any) -> None:
    typer.echo(printable(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)))


def duration(seconds: float | None) -> str:
    """``H:MM:SS``, or ``-:--:--`` when unknown."""
    return "-:--:--" if seconds is None else str(timedelta(seconds=round(seconds)))


class RunProgress:
    """A run's progress (the library's :class:`gencache.core.progress.Progress`) on stderr: rich's live bar on a
    terminal; elsewhere, for a log, the same figures as one plain line at the start, at most one every ``interval``
    seconds and one at the end. ``live`` forces one kind."""

    def __init__(
        self,
        total: int,
        *,
        stream: IO[str] | None = None,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        live: bool | None = None,
    ) -> None:
        self.console = make_console(stderr=True, file=stream)
        self.live = self.console.is_terminal if live is None else live
        self.interval, self.clock = interval, clock
        self.total, self.done, self.tokens, self.label = total, 0, 0, ""
        self.started: float | None = None
        self.shown = 0.0
        self.bar = Progress(
            TextColumn("[bold]generate{task.fields[label]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("samples, {task.fields[figures]}"),
            console=self.console,
            disable=not self.live,
        )
        self.task = self.bar.add_task("generate", total=total, label="", figures="")

    def set_label(self, label: str) -> None:
        """Name the current stage (``shard 2/4``) beside the figures."""
        self.label = label
        self._show(line=False)

    def start(self, total_samples: int) -> None:
        self.total, self.started = total_samples, self.clock()
        if self.live:
            self.bar.start()
        self._show(line=True)

    def advance(self, samples: int, tokens: int) -> None:
        self.done += samples
        self.tokens += tokens
        self._show(line=self.clock() - self.shown >= self.interval)

    def close(self) -> None:
        if self.started is not None:
            self._show(line=True)
            self.bar.stop()
            self.started = None

    def _show(self, *, line: bool) -> None:
        elapsed = 0.0 if self.started is None else self.clock() - self.started
        rate = self.tokens / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) * elapsed / self.done if self.done and elapsed > 0 else None
        figures = f"{self.tokens} tokens, {rate:.1f} tok/s"
        label = f" {self.label}" if self.label else ""
        self.bar.update(
            self.task, completed=self.done, total=self.total, label=label, figures=f"{figures}, ETA {duration(eta)}"
        )
        if line and not self.live and self.started is not None:
            percent = 100.0 * self.done / self.total if self.total else 100.0
            stage = f" [{self.label}]" if self.label else ""
            self.console.print(
                f"gencache: generate{stage}: {self.done}/{self.total} samples ({percent:.1f}%), {figures}, "
                f"elapsed {duration(elapsed)}, ETA {duration(eta)}",
                markup=False,
                highlight=False,
            )
            self.shown = self.clock()
