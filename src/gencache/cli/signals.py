"""The ``gencache`` process's signals: the command line is their only owner.

SIGINT, SIGTERM and SIGHUP raise :class:`gencache.core.errors.Stopped` in the main thread, from the first line of
the process (:func:`install`, before the command's modules import) to the command's end; the command line turns it
into one line and 130 or 143 (:meth:`Stopped.message`, which says what a run had published: the run attaches that
to the stop as it passes through). The library installs no handler: its ``finally`` blocks and the atomic publish
are what leave nothing half-written behind.

A stop can be swallowed on the way. One that lands in an object's ``__del__`` (Python prints "Exception ignored"
and goes on) is delivered again at once, from a helper thread, so it lands in the code that goes on; one a
library's bare ``except`` swallowed is remembered and raised when the command starts or returns
(:func:`raise_pending`). Only the standard library and :mod:`gencache.core.errors` are imported here.
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any, NoReturn

from gencache.core.errors import Stopped, StoppedRun

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: How long the helper thread waits before it delivers a dropped stop again (the hook returns well within it).
_REDELIVERY_DELAY_S = 0.005


class _Owner:
    """The command's stop state: the last stop a handler raised that the command has not reported yet, and what
    the command published (for a stop that comes after its run returned)."""

    def __init__(self) -> None:
        self.pending: str | None = None
        self.published: StoppedRun | None = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        self.pending = name  # kept: a library's bare except or an object's __del__ may swallow the raise
        raise Stopped(name, self.published)

    def forget(self) -> None:
        self.pending = None
        self.published = None


_OWNER = _Owner()


def install() -> None:
    """SIGINT, SIGTERM and SIGHUP raise :class:`Stopped` in the main thread from now on (an ignored signal stays
    ignored), and a stop dropped inside an object's ``__del__`` is delivered again instead of being printed as
    "Exception ignored" with a traceback. The process is the command line's: nothing is restored (see
    :func:`owned` for a command run inside another program). Does nothing outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in _STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _OWNER.handle)
    if not isinstance(sys.unraisablehook, _RedeliverStops):
        sys.unraisablehook = _RedeliverStops(sys.unraisablehook)


@contextlib.contextmanager
def owned() -> Iterator[None]:
    """The handlers of :func:`install` for one command (``gencache.cli.app.run``), those the block found restored
    after it, and the command's stop state forgotten with it: a stop belongs to the command it stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {signum: signal.getsignal(signum) for signum in _STOP_SIGNALS}
    hook = sys.unraisablehook
    install()
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            if handler is not None:
                signal.signal(signum, handler)
        sys.unraisablehook = hook
        _OWNER.forget()


def raise_pending() -> None:
    """Raise the stop of a signal that came earlier and was swallowed on the way; the command line calls it when
    a command starts and when it returns."""
    if _OWNER.pending is not None:
        name, _OWNER.pending = _OWNER.pending, None
        raise Stopped(name, _OWNER.published)


def reported() -> None:
    """The command has reported its stop: a later check has nothing pending."""
    _OWNER.pending = None


def note_published(paths: Sequence[object]) -> None:
    """What the command's run returned as published, for the line of a stop that comes after the run."""
    _OWNER.published = StoppedRun(published=tuple(str(path) for path in paths)) if paths else None


class _RedeliverStops:
    """The unraisable-exception hook: a :class:`Stopped` dropped in a ``__del__`` is delivered again from a helper
    thread (Python runs the handler in the main thread, in the code that goes on); everything else goes to the
    hook it replaced."""

    def __init__(self, previous: Callable[[Any], object]) -> None:
        self.previous = previous

    def __call__(self, unraisable: Any) -> None:
        stop = unraisable.exc_value
        if isinstance(stop, Stopped):
            _OWNER.pending = None  # the redelivered signal raises (and records) it again
            # a raw thread: threading.Thread.start waits for the thread in Python code, where the redelivered
            # signal could land while this hook still runs (and be dropped again)
            _thread.start_new_thread(_redeliver, (signal.Signals[stop.signame],))
            return
        self.previous(unraisable)


def _redeliver(signum: signal.Signals) -> None:
    """Deliver ``signum`` to the main thread's handler again, once the hook that dropped its stop has returned."""
    time.sleep(_REDELIVERY_DELAY_S)
    _thread.interrupt_main(signum)


def exit_now(stop: Stopped) -> NoReturn:
    """Print ``stop``'s line and end the process with its code at once (nothing else is left to clean up)."""
    try:
        sys.stderr.write(stop.message + "\n")
        sys.stderr.flush()
    finally:
        os._exit(stop.exit_code)


def quiet_exit(code: int) -> None:
    """Once the command is done, SIGINT, SIGTERM or SIGHUP during interpreter shutdown (an engine's worker thread
    still winding down) ends the process with the command's own exit code instead of a traceback: the work is
    already published or already failed. From the exit handlers on, the signals are ignored: Python gives them
    back to the system's default before it tears its modules down, and a signal then would kill the process
    (a status of -2 or -15 instead of the command's code)."""

    def finish_now(signum: int, frame: FrameType | None) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def ignore_from_now() -> None:
        for signum in _STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)

    if threading.current_thread() is threading.main_thread():
        for signum in _STOP_SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, finish_now)
        atexit.register(ignore_from_now)  # the last registered runs first: after the threads were joined
