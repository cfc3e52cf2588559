"""Keeping a command's output to gencache's own lines: the only quieting of other libraries, the command line's.

Unless ``--verbose`` or ``GENCACHE_DEBUG=1``: no log record of WARNING or below (``logging.disable``, which a library
that resets its loggers' levels on import does not undo), no tqdm bar (even one asked for with ``disable=False``, as
vLLM's), torch's and vLLM's log levels at ERROR (for the processes a command starts too). All is put back after.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

from gencache.cli.console import printable

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the gencache package
_QUIET = {"TORCH_CPP_LOG_LEVEL": "ERROR", "VLLM_LOGGING_LEVEL": "ERROR"}


@contextlib.contextmanager
def quiet_libraries(verbose: bool = False, warn: Callable[[str], None] | None = None) -> Iterator[None]:
    """Other libraries' log lines and bars kept off the command's output for the block; Python warnings go to
    ``warn`` (one line each; dropped when None), a third-party library's only when not quiet."""
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
            previous = logging.root.manager.disable
            logging.disable(logging.WARNING)
            stack.callback(logging.disable, previous)
        yield
