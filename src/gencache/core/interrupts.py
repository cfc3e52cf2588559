"""The ``gencache`` process's signals from its first line to its exit: SIGINT ends it with exit code 130, SIGTERM
and SIGHUP with 143, each with one line saying what was published (never a traceback), also while the command's
modules are still being imported.

:func:`install` is the first thing the command does (``gencache/__main__.py``); its handlers raise
:class:`Stopped`, which no ``except Exception`` catches, and the CLI turns it into the line and the exit code. A
generation run installs its own handlers for its length (:class:`gencache.artifact.signals.SignalGuard`, which
defers a signal inside a critical section) and puts these back afterwards, saying what it published with
:func:`note_published` first, so a signal that lands after the run still names the artifact.

A stop can be swallowed on the way (a library's bare ``except``, an object's ``__del__``), so whoever raised it
keeps it and raises it again where the work goes on: outside a run this module (:func:`raise_pending`, when the
run takes the signals over and when the command returns; the command line forgets it with :func:`clear_pending`
once the command is over), during a run the run's guard (before each build, entry and rename). Only the standard
library is imported here.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, NoReturn

_CODES = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 143}
_PUBLISHED: list[str] = []
_PENDING: list[str] = []
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """A signal asked the command to stop: ``message`` is its one line, ``exit_code`` 130 or 143."""

    def __init__(self, signame: str) -> None:
        super().__init__(stop_message(signame))
        self.signame = signame
        self.exit_code = _CODES.get(signame, 143)

    @property
    def message(self) -> str:
        return str(self.args[0])


def note_published(paths: Sequence[object]) -> None:
    """Remember what this process published, for the message of a signal that comes later."""
    _PUBLISHED[:] = [str(path) for path in paths]


def stop_message(signame: str) -> str:
    """What a signal that stops the process says: what was published, if anything."""
    if _PUBLISHED:
        shown = ", ".join(_PUBLISHED)
        return f"Terminated by {signame} after {shown} was published; it is complete (gencache verify checks it)."
    return f"Terminated by {signame}; nothing was published."


def _raise(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    _PENDING.append(name)  # kept: a third-party import that catches every exception may swallow the raise
    raise Stopped(name)


def raise_pending() -> None:
    """Raise :class:`Stopped` again for a signal that came earlier and was swallowed on the way (a library's bare
    ``except`` around an optional import, an object's ``__del__``); the run calls it when it takes the signals
    over, and the command line once the command has returned."""
    if _PENDING:
        name = _PENDING[0]
        _PENDING.clear()
        raise Stopped(name)


def clear_pending() -> None:
    """Forget the signals raised so far: the command has handled the stop they raised."""
    _PENDING.clear()


def install() -> None:
    """SIGINT, SIGTERM and SIGHUP raise :class:`Stopped` in the main thread (an ignored signal stays ignored), and
    a stop that lands inside an object's ``__del__`` is not printed as "Exception ignored" with a traceback: it is
    kept and raised again where the command goes on (:func:`raise_pending`, and the run's own guard)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in _STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _raise)
    if not isinstance(sys.unraisablehook, _QuietStops):
        sys.unraisablehook = _QuietStops(sys.unraisablehook)


class _QuietStops:
    """The unraisable-exception hook that drops a signal's stop (:class:`Stopped`, or the ``KeyboardInterrupt``
    family a run's guard raises) and hands everything else to the hook it replaced."""

    def __init__(self, previous: Callable[[Any], object]) -> None:
        self.previous = previous

    def __call__(self, unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, Stopped | KeyboardInterrupt):
            return
        self.previous(unraisable)


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
