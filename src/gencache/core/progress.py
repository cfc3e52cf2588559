"""What a run reports its progress to. The library only reports; the command line draws
(:class:`gencache.cli.render.RunProgress`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Progress(Protocol):
    """``start`` once with the number of samples, ``advance`` per entry written, ``close`` at the end (idempotent;
    the owner calls it, also on failure)."""

    def start(self, total_samples: int) -> None: ...

    def advance(self, samples: int, tokens: int) -> None: ...

    def close(self) -> None: ...


#: ``progress(total_samples)``: a :class:`Progress` for a whole run.
ProgressFactory = Callable[[int], Progress]
#: ``notify(level, text)``: a run's messages; ``level`` is ``"info"``, ``"warning"`` or ``"status"`` (what the run
#: is doing while a slow step runs: checking, loading the teacher; the command line shows it on a terminal only).
Notify = Callable[[str, str], None]


class StagedProgress:
    """One progress display over several stages (the shards of a ``--shards`` run): the engine starts it once per
    stage, but the display's total stays the whole run's, while its label names the stage."""

    def __init__(self, inner: Progress | None, total: int) -> None:
        self.inner, self.total, self.started = inner, total, False

    def stage(self, label: str) -> None:
        if callable(setter := getattr(self.inner, "set_label", None)):
            setter(label)

    def start(self, total_samples: int) -> None:
        if self.inner is not None and not self.started:
            self.inner.start(self.total)
        self.started = True

    def advance(self, samples: int, tokens: int) -> None:
        if self.inner is not None:
            self.inner.advance(samples, tokens)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
            self.inner = None
