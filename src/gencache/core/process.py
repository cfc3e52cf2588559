"""Process state that third-party code changes as it runs, put back when it returns: the one way library code
scopes such a change (vLLM's import and engine build, Ray's import and ``ray.init`` set environment variables and
signal handlers of their own), so that a library call leaves the process as it found it."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def environment_kept() -> Iterator[None]:
    """``os.environ`` exactly as it was when the block began, once it ends. Only the names that changed are set or
    removed (the engine's and Ray's threads read the environment meanwhile: it is never cleared and rebuilt)."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for name in set(os.environ) - set(saved):
            del os.environ[name]
        for name, value in saved.items():
            if os.environ.get(name) != value:
                os.environ[name] = value


@contextlib.contextmanager
def signal_handlers_kept(*signums: signal.Signals) -> Iterator[None]:
    """The handlers of ``signums`` as they were when the block began, once it ends."""
    saved: dict[signal.Signals, Any] = {signum: signal.getsignal(signum) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            if handler is not None and signal.getsignal(signum) is not handler:
                with contextlib.suppress(ValueError):  # not the main thread
                    signal.signal(signum, handler)
