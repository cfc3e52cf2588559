"""Signal handling while an artifact is built: SIGTERM/SIGHUP/SIGINT become exceptions, deferred in critical
sections, and the previous handlers come back afterwards."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from gencache.core.errors import Interrupted, Terminated

Describe = Callable[[str, "str | None"], str]
"""``describe(signal_name, just_published)``: the one-line message of a signal; ``just_published`` is the
directory the current build renamed into place (None before that)."""


def published_then_stopped(signame: str, published: object) -> str:
    """The message of a signal that came right after ``published`` was renamed into place."""
    return (
        f"Terminated by {signame} after {published} was published; the artifact is complete (gencache verify "
        "checks it)."
    )


class SignalGuard:
    """SIGTERM/SIGHUP raise :class:`Terminated` and SIGINT :class:`Interrupted` (both ``KeyboardInterrupt``s;
    main thread only); critical sections defer them; the previous handlers come back on :meth:`restore`.

    There is one guard per run: a generation run installs one for its whole length and hands it to each
    :class:`gencache.artifact.writer.ArtifactBuild` (``describe`` then says what the whole run published); a
    build used on its own installs its own.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self, describe: Describe | None = None) -> None:
        self.previous: dict[int, Any] = {}
        self.pending: int | None = None
        #: A signal whose exception was raised (at once, or at the end of the critical section that held it):
        #: kept, because it can be swallowed on the way (it landed in an object's ``__del__``, where Python prints
        #: "Exception ignored" and goes on), and raised again by :meth:`raise_pending`.
        self.raised: int | None = None
        self.depth = 0
        self.describe = describe
        #: Set by the build once its rename happened: a signal from then on must not say "nothing was published".
        self.published: str | None = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in self.SIGNALS:
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN or previous is None:
                continue  # an ignored signal stays ignored (nohup)
            self.previous[signum] = previous
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.depth:
            self.pending = signum
            return
        if self.raised is None:
            self.raised = signum
        self._raise(signum)

    def _raise(self, signum: int) -> None:
        name = signal.Signals(signum).name
        kind = Interrupted if signum == signal.SIGINT else Terminated
        if self.describe is not None:
            raise kind(self.describe(name, self.published))
        if self.published is not None:
            raise kind(published_then_stopped(name, self.published))
        raise Interrupted() if kind is Interrupted else Terminated(f"Terminated by {name}; nothing was published.")

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold signals during a critical section; raise a held one at its normal end."""
        self.depth += 1
        try:
            yield
        except BaseException:
            self.depth -= 1
            raise
        self.depth -= 1
        self.raise_pending()

    def raise_pending(self) -> None:
        """Raise a signal that arrived during a critical section now that it has ended (a shared guard's owner is
        still running, so the signal is raised here rather than redelivered to the previous handler), or again
        one whose exception was swallowed on the way. The work calls it where it goes on (before a build starts,
        at each entry, before the rename), so a swallowed signal still stops it before anything is published."""
        if self.depth:
            return
        if self.pending is not None:
            self.raised, self.pending = self.pending, None
        if self.raised is not None:
            self._raise(self.raised)

    def restore(self, *, redeliver: bool) -> None:
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)
        self.previous.clear()
        if self.pending is not None:
            signum, self.pending = self.pending, None
            if redeliver:
                signal.raise_signal(signum)
