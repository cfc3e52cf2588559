"""Where the command line prints: rich consoles, a run's progress drawn with ``rich.progress``, text made safe for a
terminal, and the only quieting of other libraries."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import IO, Any
from unittest import mock

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

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
    """``H:MM:SS``, or ``-:--:--`` when unknown."""
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
    """A run's progress (:class:`gencache.core.progress.Progress`) on stderr: rich's live bar on a terminal;
    elsewhere, for a log, the same figures as one plain line at the start, at most one every ``interval`` seconds
    and one at the end. ``live`` forces one kind."""

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
        columns = (TextColumn("[bold]{task.fields[stage]}"), BarColumn(), TextColumn("{task.description}"))
        self.bar = Progress(*columns, console=self.console, disable=not self.live)
        self.task = self.bar.add_task("", total=total, stage="generate")

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
        eta = (self.total - self.done) * elapsed / self.done if self.done and elapsed > 0 else None
        percent = 100.0 * self.done / self.total if self.total else 100.0
        rate = self.tokens / elapsed if elapsed > 0 else 0.0
        figures = (
            f"{self.done}/{self.total} samples ({percent:.1f}%), {self.tokens} tokens, {rate:.1f} tok/s, "
            f"elapsed {duration(elapsed)}, ETA {duration(eta)}"
        )
        stage = f"generate [{self.label}]" if self.label else "generate"
        self.bar.update(self.task, completed=self.done, total=self.total, description=figures, stage=stage)
        if line and not self.live and self.started is not None:
            self.console.print(f"gencache: {stage}: {figures}", markup=False)
            self.shown = self.clock()
