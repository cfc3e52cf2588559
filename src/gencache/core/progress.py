"""Progress reporting for generation: a live rich bar on a terminal, periodic plain lines otherwise.

Both report samples done out of the total, generated tokens, tokens per second and the estimated time left.
No torch here. ``make_progress`` picks the kind from the stream; the clock is injectable so tests need no sleeps.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from rich.console import Console

Clock = Callable[[], float]


@runtime_checkable
class Progress(Protocol):
    """What the generator reports to: ``start`` once with the number of samples, ``advance`` per entry written,
    ``close`` at the end (idempotent; the owner calls it, also on failure)."""

    def start(self, total_samples: int) -> None: ...

    def advance(self, samples: int, tokens: int) -> None: ...

    def close(self) -> None: ...


#: ``progress(total_samples)``: a :class:`Progress` for a whole run.
ProgressFactory = Callable[[int], Progress]
#: ``notify(level, text)``: a run's messages; ``level`` is ``"info"``, ``"warning"`` or ``"status"`` (what the run
#: is doing while a slow step runs: checking, loading the teacher; the command line shows it on a terminal only).
Notify = Callable[[str, str], None]


def format_duration(seconds: float | None) -> str:
    """``H:MM:SS`` (or ``-:--:--`` when unknown)."""
    if seconds is None or seconds != seconds or seconds < 0 or seconds == float("inf"):
        return "-:--:--"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class _Counter:
    """Shared bookkeeping: totals, rates and ETA from an injectable monotonic clock."""

    def __init__(self, total_samples: int, clock: Clock) -> None:
        self.clock = clock
        self.total = max(0, int(total_samples))
        self.samples = 0
        self.tokens = 0
        self.started: float | None = None
        self.closed = False

    def begin(self, total_samples: int) -> None:
        self.total = max(0, int(total_samples))
        if self.started is None:
            self.started = self.clock()

    def add(self, samples: int, tokens: int) -> None:
        if self.started is None:
            self.started = self.clock()
        self.samples += int(samples)
        self.tokens += int(tokens)

    def elapsed(self) -> float:
        return 0.0 if self.started is None else max(0.0, self.clock() - self.started)

    def tokens_per_second(self) -> float:
        elapsed = self.elapsed()
        return self.tokens / elapsed if elapsed > 0 else 0.0

    def eta(self) -> float | None:
        elapsed = self.elapsed()
        if self.samples <= 0 or elapsed <= 0:
            return None
        remaining = max(0, self.total - self.samples)
        return remaining * elapsed / self.samples

    def line(self) -> str:
        percent = (100.0 * self.samples / self.total) if self.total else 100.0
        return (
            f"{self.samples}/{self.total} samples ({percent:.1f}%), {self.tokens} tokens, "
            f"{self.tokens_per_second():.1f} tok/s, elapsed {format_duration(self.elapsed())}, "
            f"ETA {format_duration(self.eta())}"
        )


class PlainProgress:
    """Plain lines for logs: one at start, then at most one every ``interval`` seconds, and a final one at close."""

    def __init__(
        self,
        total_samples: int,
        *,
        stream: IO[str],
        interval: float = 10.0,
        clock: Clock = time.monotonic,
        prefix: str = "gencache: generate",
    ) -> None:
        self.counter = _Counter(total_samples, clock)
        self.stream = stream
        self.interval = interval
        self.prefix = prefix
        self.label = ""
        self._last_line: float | None = None

    def set_label(self, label: str) -> None:
        """Name the current stage (``shard 2/4``) in the following lines."""
        self.label = label

    def _emit(self) -> None:
        stage = f" [{self.label}]" if self.label else ""
        self.stream.write(f"{self.prefix}{stage}: {self.counter.line()}\n")
        self.stream.flush()
        self._last_line = self.counter.clock()

    def start(self, total_samples: int) -> None:
        self.counter.begin(total_samples)
        self._emit()

    def advance(self, samples: int, tokens: int) -> None:
        self.counter.add(samples, tokens)
        now = self.counter.clock()
        if self._last_line is None or now - self._last_line >= self.interval:
            self._emit()

    def close(self) -> None:
        if self.counter.closed:
            return
        self.counter.closed = True
        if self.counter.started is not None:
            self._emit()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


# Width given to a console whose stream is not a terminal (a pipe, a log, a test's capture): wide enough that no
# table column is cut and no line is wrapped, so every message can be grepped and every snippet pasted.
PIPE_WIDTH = 10_000


def make_console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """The console every CLI message goes through.

    Text is never hard-wrapped (``soft_wrap``): a message is one line whatever the width. On a terminal tables fit
    the terminal; elsewhere the console is :data:`PIPE_WIDTH` wide, so tables keep every column whole.
    """
    from rich.console import Console

    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    if is_terminal(stream):
        return Console(file=stream, soft_wrap=True)
    return Console(file=stream, soft_wrap=True, width=PIPE_WIDTH)


class RichProgress:
    """A live rich bar: samples, generated tokens, tokens/s and ETA."""

    def __init__(self, total_samples: int, *, stream: IO[str], clock: Clock = time.monotonic) -> None:
        from rich.progress import BarColumn, TextColumn
        from rich.progress import Progress as RichBar

        self.counter = _Counter(total_samples, clock)
        self.console = make_console(file=stream)
        self.bar = RichBar(
            TextColumn("[bold]generate{task.fields[label]}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} samples"),
            TextColumn("{task.fields[tokens]} tokens"),
            TextColumn("{task.fields[rate]} tok/s"),
            TextColumn("ETA {task.fields[eta]}"),
            console=self.console,
            transient=False,
            get_time=clock,
        )
        self.task: Any = None
        self.label = ""

    def set_label(self, label: str) -> None:
        """Name the current stage (``shard 2/4``) beside the bar."""
        self.label = label
        if self.task is not None:
            self.bar.update(self.task, **self._fields())

    def _fields(self) -> dict[str, Any]:
        return {
            "label": f" {self.label}" if self.label else "",
            "tokens": self.counter.tokens,
            "rate": f"{self.counter.tokens_per_second():.1f}",
            "eta": format_duration(self.counter.eta()),
        }

    def start(self, total_samples: int) -> None:
        self.counter.begin(total_samples)
        if self.task is None:
            self.bar.start()
            self.task = self.bar.add_task("generate", total=self.counter.total, **self._fields())
        else:
            self.bar.update(self.task, total=self.counter.total)

    def advance(self, samples: int, tokens: int) -> None:
        if self.task is None:
            self.start(self.counter.total)
        self.counter.add(samples, tokens)
        self.bar.update(self.task, completed=self.counter.samples, **self._fields())

    def close(self) -> None:
        if self.counter.closed:
            return
        self.counter.closed = True
        if self.task is not None:
            self.bar.update(self.task, completed=self.counter.samples, **self._fields())
            self.bar.stop()

    def __enter__(self) -> RichProgress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class StagedProgress:
    """One progress display over several stages (the shards of a ``--shards`` run).

    The engine starts a progress once per stage with that stage's prompt count; this adapter keeps the display's
    total at the whole run's count instead, so the bar shows overall progress while its label names the stage.
    ``inner`` None reports nothing. The engines only start and advance it; the owner calls :meth:`close` once at
    the end.
    """

    def __init__(self, inner: PlainProgress | RichProgress | Progress | None, total: int) -> None:
        self.inner = inner
        self.total = total
        self.started = False

    def stage(self, label: str) -> None:
        setter = getattr(self.inner, "set_label", None)
        if callable(setter):
            setter(label)

    def start(self, total_samples: int) -> None:
        if self.inner is not None and not self.started:
            self.inner.start(self.total)
        self.started = True

    def advance(self, samples: int, tokens: int) -> None:
        if self.inner is not None:
            self.inner.advance(samples, tokens)

    def close(self) -> None:
        """Close the display (once; later calls do nothing)."""
        if self.inner is not None:
            self.inner.close()
            self.inner = None


def is_terminal(stream: IO[str]) -> bool:
    """Whether ``stream`` is a terminal (a closed or odd stream is not)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (OSError, ValueError):
        return False


def make_progress(
    total: int,
    *,
    stream: IO[str] | None = None,
    interval: float = 10.0,
    clock: Clock = time.monotonic,
    live: bool | None = None,
) -> PlainProgress | RichProgress:
    """A rich bar when ``stream`` (default ``sys.stderr``) is a terminal, plain periodic lines otherwise.
    ``live`` forces one kind. Call ``start`` (the generator does) and ``close`` (the owner does, or use ``with``)."""
    out = sys.stderr if stream is None else stream
    use_live = is_terminal(out) if live is None else live
    if use_live:
        return RichProgress(total, stream=out, clock=clock)
    return PlainProgress(total, stream=out, interval=interval, clock=clock)
