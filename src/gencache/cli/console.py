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
        console = make_console(stderr=True, file=stream)
        self.live = console.is_terminal if live is None else live
        self.console, self.interval, self.clock = console, interval, clock
        self.bar = Progress(
            TextColumn("[bold]generate{task.fields[label]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("samples, {task.fields[tokens]} tokens, {task.fields[rate]} tok/s, ETA {task.fields[eta]}"),
            console=console,
            get_time=clock,
            disable=not self.live,
        )
        self.task = self.bar.add_task("generate", total=total, start=False, label="", tokens=0, rate="0.0", eta="")
        self.label = ""
        self.tokens = 0
        self.shown: float | None = None
        self.closed = False

    def set_label(self, label: str) -> None:
        """Name the current stage (``shard 2/4``) beside the figures."""
        self.label = label
        self._update()

    def start(self, total_samples: int) -> None:
        self.bar.start_task(self.task)
        if self.live:
            self.bar.start()
        self.bar.update(self.task, total=total_samples)
        self._update()
        if not self.live:
            self._line()

    def advance(self, samples: int, tokens: int) -> None:
        self.tokens += tokens
        self.bar.advance(self.task, samples)
        self._update()
        if not self.live and self.shown is not None and self.clock() - self.shown >= self.interval:
            self._line()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.bar.tasks[0].start_time is None:
            return
        if self.live:
            self.bar.stop()
        else:
            self._line()

    def _figures(self) -> tuple[float, float, float | None]:
        task = self.bar.tasks[0]
        elapsed = task.elapsed or 0.0
        rate = self.tokens / elapsed if elapsed > 0 else 0.0
        eta = (task.total or 0) - task.completed
        return elapsed, rate, (eta * elapsed / task.completed if task.completed and elapsed > 0 else None)

    def _update(self) -> None:
        _, rate, eta = self._figures()
        label = f" {self.label}" if self.label else ""
        self.bar.update(self.task, label=label, tokens=self.tokens, rate=f"{rate:.1f}", eta=duration(eta))

    def _line(self) -> None:
        task = self.bar.tasks[0]
        elapsed, rate, eta = self._figures()
        total = int(task.total or 0)
        percent = 100.0 * task.completed / total if total else 100.0
        stage = f" [{self.label}]" if self.label else ""
        self.console.print(
            f"gencache: generate{stage}: {int(task.completed)}/{total} samples ({percent:.1f}%), {self.tokens} "
            f"tokens, {rate:.1f} tok/s, elapsed {duration(elapsed)}, ETA {duration(eta)}",
            markup=False,
            highlight=False,
        )
        self.shown = self.clock()
