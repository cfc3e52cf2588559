"""The ``gencache`` process's signals: the command line is their only owner.

SIGINT, SIGTERM and SIGHUP raise :class:`gencache.core.errors.Stopped` in the main thread for the length of a
command; the command line turns it into one line and 130 or 143 (:attr:`Stopped.message` says what a run had
published: the run attaches that to the stop as it passes through, and :func:`note_published` covers a stop after
the run returned). The library installs no handler: its ``finally`` blocks and the atomic publish leave nothing
half-written behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import NoReturn

from gencache.core.errors import Stopped, StoppedRun

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_published: StoppedRun | None = None  # what the command's run returned as published


def _stop(signum: int, frame: FrameType | None) -> NoReturn:
    raise Stopped(signal.Signals(signum).name, _published)


def install() -> None:
    """SIGINT, SIGTERM and SIGHUP raise :class:`Stopped` in the main thread from now on (an ignored signal stays
    ignored). Does nothing outside the main thread, whose signals are its own."""
    if threading.current_thread() is threading.main_thread():
        for signum in _STOP_SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, _stop)


@contextlib.contextmanager
def owned() -> Iterator[None]:
    """The handlers of :func:`install` for one command run inside another program (``gencache.cli.app.run``),
    the caller's handlers back afterwards, and what the command published forgotten with it."""
    saved = {signum: signal.getsignal(signum) for signum in _STOP_SIGNALS}
    install()
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in saved.items():
                if handler is not None:
                    signal.signal(signum, handler)
        note_published([])


def note_published(paths: Sequence[object]) -> None:
    """What the command's run returned as published, for the line of a stop that comes after the run."""
    global _published
    _published = StoppedRun(published=tuple(str(path) for path in paths)) if paths else None


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
