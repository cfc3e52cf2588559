"""The ``gencache`` process's signals, owned by the command line alone: SIGINT, SIGTERM and SIGHUP raise
:class:`gencache.core.errors.Stopped` in the main thread, which the command line turns into one line and 130 or
143. The library installs no handler: its ``finally`` blocks and the atomic publish leave nothing half-written."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from types import FrameType

from gencache.core.errors import Stopped, StoppedRun
from gencache.core.process import signal_handlers_kept

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_published: StoppedRun | None = None  # what the command's run returned as published
received: Stopped | None = None  # the stop a handler raised, should code in its way (pydantic-core) wrap it


_waiting = False  # a stop waits for an import to return
_lock = threading.Lock()


def _stop(signum: int, frame: FrameType | None) -> None:
    """Raise the stop, unless an import is under way: a C++ extension initialising (torch's autograd) calls back
    into Python, and an exception there aborts the process (pybind11 terminates it). The signal is then sent again
    every 50 ms until the import has returned."""
    global received, _waiting
    received = Stopped(signal.Signals(signum).name, _published)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            _waiting = True
            threading.Timer(0.05, _send_again, (signum,)).start()
            return
        frame = frame.f_back
    _waiting = False
    raise received


def _send_again(signum: int) -> None:
    with _lock:  # never after the command has taken the stop or returned
        if _waiting:
            signal.pthread_kill(threading.main_thread().ident or 0, signum)


def raise_pending() -> None:
    """Raise a stop still waiting for its import to return, now that the command has returned."""
    global _waiting
    with _lock:
        waiting, _waiting = _waiting, False
    if waiting and received is not None:
        raise received


def install(handler: Callable[[int, FrameType | None], object] | signal.Handlers = _stop) -> None:
    """SIGINT, SIGTERM and SIGHUP go to ``handler`` from now on (an ignored one stays ignored; outside the main
    thread nothing changes)."""
    if threading.current_thread() is threading.main_thread():
        for signum in _STOP_SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, handler)


@contextlib.contextmanager
def owned() -> Iterator[None]:
    """The handlers of :func:`install` for one command run inside another program, the caller's back afterwards."""
    global received, _waiting
    with signal_handlers_kept(*_STOP_SIGNALS):
        install()
        try:
            yield
        finally:
            with _lock:
                _waiting = False
            note_published([])
            received = None


def note_published(paths: Sequence[object]) -> None:
    """What the command's run returned as published, for the line of a stop that comes after the run."""
    global _published
    _published = StoppedRun(published=tuple(str(path) for path in paths)) if paths else None


def quiet_exit(code: int) -> None:
    """After the command, a signal during interpreter shutdown (an engine's thread winding down) exits with the
    command's code, not a traceback; from the exit handlers on the signals are ignored, as Python restores the
    system's default (a status of -2 or -15) before it tears modules down."""

    def finish_now(signum: int, frame: FrameType | None) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    install(finish_now)
    if threading.current_thread() is threading.main_thread():
        atexit.register(install, signal.SIG_IGN)  # the last registered runs first: after the threads were joined
