"""Keeping a command's output to gencache's own lines: the only quieting of other libraries, the command line's.

For the length of a command (:func:`quiet_libraries`), unless ``--verbose`` or ``GENCACHE_DEBUG=1``: no log record
of WARNING or below from any library (huggingface_hub, transformers, datasets, vLLM, torch: ``logging.disable``,
which a library that resets its own loggers' levels when it is imported does not undo), no tqdm bar (the hub's,
transformers' "Loading weights", datasets', vLLM's, which asks for its bar with ``disable=False``), and torch's C++
warnings at ERROR. Python warnings go to the command's ``warn`` (one ``warning:`` line each), a third-party
library's only with ``--verbose``. Hub requests wait at most a few seconds, verbose or not.

Everything is put back when the block ends, so a command run inside another program (``gencache.cli.app.run``)
leaves it as it was; ``TORCH_CPP_LOG_LEVEL`` is read once, when libtorch loads, so a process whose first torch
import happened inside a quiet block keeps torch's C++ warnings at ERROR.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

from gencache.core.quiet import one_line

#: ``warn(text)``: where a Python warning goes while a block is active.
WarningSink = Callable[[str], None]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the gencache package
_TIMEOUTS = {"HF_HUB_ETAG_TIMEOUT": "5", "HF_HUB_DOWNLOAD_TIMEOUT": "10"}
# read by the processes a command starts too (vLLM's engine core logs from its own process, where logging.disable
# of this one does not reach)
_QUIET = {"TORCH_CPP_LOG_LEVEL": "ERROR", "VLLM_LOGGING_LEVEL": "ERROR"}
_ACTIVE: list[bool] = []  # one entry per open block: a block inside another changes nothing


def _ours(filename: str) -> bool:
    """True for a warning issued from gencache's own code (a recipe's warning is attributed to its caller there)."""
    return os.path.abspath(filename).startswith(_PACKAGE)


@contextlib.contextmanager
def _no_tqdm_bars() -> Iterator[None]:
    """Every tqdm bar off, also one a library asks for explicitly (``disable=False``); tqdm's own ``__init__``
    back afterwards."""
    import tqdm.std

    bar: Any = tqdm.std.tqdm
    original = bar.__dict__["__init__"]

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["disable"] = True
        original.__get__(self, type(self))(*args, **kwargs)

    bar.__init__ = init
    try:
        yield
    finally:
        bar.__init__ = original


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` set where the environment has none, the environment as it was afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        os.environ.setdefault(name, value)
    try:
        yield
    finally:
        for name, before in saved.items():
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before


@contextlib.contextmanager
def _no_log_records() -> Iterator[None]:
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


@contextlib.contextmanager
def quiet_libraries(verbose: bool = False, warn: WarningSink | None = None) -> Iterator[None]:
    """Within this block, other libraries' log lines, bars and warnings are kept off the command's output unless
    ``verbose`` or ``GENCACHE_DEBUG=1`` (see the module docstring), and Python warnings go to ``warn`` (one line
    each; dropped when None), a third-party library's only with ``verbose``. Inside another block this changes
    nothing."""
    if _ACTIVE:
        yield
        return
    import warnings

    quiet = not verbose and os.environ.get("GENCACHE_DEBUG") != "1"

    def show(message: Warning | str, category: type[Warning], filename: str, *args: Any, **kwargs: Any) -> None:
        if warn is not None and (not quiet or _ours(filename)):
            warn(one_line(message))

    _ACTIVE.append(quiet)
    saved_show = warnings.showwarning
    warnings.showwarning = show
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_environment(_TIMEOUTS | (_QUIET if quiet else {})))
            if quiet:
                stack.enter_context(_no_log_records())
                stack.enter_context(_no_tqdm_bars())
            yield
    finally:
        warnings.showwarning = saved_show
        _ACTIVE.pop()
