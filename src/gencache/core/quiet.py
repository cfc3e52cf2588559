"""Keeping a run's output to gencache's own lines: the third-party libraries' log lines and progress bars
(huggingface_hub, transformers' "Loading weights" bar, datasets, vLLM's INFO and WARNING lines, any tqdm bar) are
silenced for the length of a command or a :func:`gencache.generate` call unless ``--verbose`` or
``GENCACHE_DEBUG=1``, Python warnings from gencache's own code go to the caller (one ``warning:`` line on the
command line, the ``notify`` callback of the Python API, or nowhere; a library's own only with ``--verbose``), and
text is made printable.

The settings are made before the libraries are imported where they read them at import (environment variables:
``TQDM_DISABLE``, ``VLLM_LOGGING_LEVEL``, ...) and through the libraries' own switches where they are already
imported; everything is restored afterwards, so a notebook's own use of those libraries is unchanged. A block
inside another (the CLI's around the pipeline's) keeps the outer one's choice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

#: ``warn(text)``: where a Python warning goes while a block is active.
WarningSink = Callable[[str], None]


class _Block:
    """The active block: whether it silences, and the steps that undo what it switched."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.undo: list[Callable[[], None]] = []
        self.hub_done = False
        self.tqdm_muted = False
        self.levels: dict[str, int] = {}  # each silenced logger's level before the block

    def silence(self, names: Iterator[str] | tuple[str, ...]) -> None:
        """Set the loggers ``names`` to ERROR (again: torch resets its own when it is imported)."""
        for name in names:
            self.levels.setdefault(name, logging.getLogger(name).level)
            logging.getLogger(name).setLevel(logging.ERROR)


_ACTIVE: ContextVar[_Block | None] = ContextVar("gencache_quiet_active", default=None)
_LOGGERS = (
    "huggingface_hub",
    "transformers",
    "datasets",
    "httpx",
    "httpcore",
    "urllib3",
    "filelock",
    "vllm",
    "torch",
)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the gencache package
_TIMEOUTS = {"HF_HUB_ETAG_TIMEOUT": "5", "HF_HUB_DOWNLOAD_TIMEOUT": "10"}
_QUIET = {
    "TRANSFORMERS_VERBOSITY": "error",
    "DATASETS_VERBOSITY": "error",
    "HF_HUB_VERBOSITY": "error",
    "TQDM_DISABLE": "1",
    "VLLM_LOGGING_LEVEL": "ERROR",
    # read once, when libtorch loads: torch's C++ warnings stay at ERROR in a process whose first torch import
    # happened in a quiet block (there is no switch to give them back)
    "TORCH_CPP_LOG_LEVEL": "ERROR",
}


def printable(text: str) -> str:
    """``text`` with anything the terminal cannot encode (lone surrogates from a damaged file) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def one_line(message: Warning | str) -> str:
    """A warning's text on one line."""
    return printable(" ".join(str(message).split()))


def prepare_model_libraries() -> None:
    """Before the model libraries load (the teacher's checks, the engine): switch huggingface_hub's progress bars
    off, which transformers reads when it is imported, through its own switch, which unlike its environment
    variable can be undone, and silence the loggers again (torch resets its own when it is imported). Outside a
    quiet block this does nothing."""
    block = _ACTIVE.get()
    if block is None or not block.quiet:
        return
    block.silence(_LOGGERS)
    if not block.tqdm_muted:
        block.tqdm_muted = True
        _mute_tqdm(block)
    if block.hub_done:
        return
    block.hub_done = True
    import importlib

    hub: Any = importlib.import_module("huggingface_hub.utils")
    if not hub.are_progress_bars_disabled():
        hub.disable_progress_bars()
        block.undo.append(lambda: hub.enable_progress_bars() if _hub_bars_allowed() else None)


def _mute_tqdm(block: _Block) -> None:
    """Every tqdm bar off until the block ends, also one a library asks for explicitly (vLLM's weight loading
    passes ``disable=False``, which ``TQDM_DISABLE`` does not override)."""
    import tqdm.std

    bar: Any = tqdm.std.tqdm
    original = bar.__dict__["__init__"]

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["disable"] = True
        original.__get__(self, type(self))(*args, **kwargs)

    bar.__init__ = init
    block.undo.append(lambda: setattr(bar, "__init__", original))


def _switch_imported(quiet: bool) -> list[Callable[[], None]]:
    """Set the already-imported libraries' own switches; return the steps that restore them."""
    undo: list[Callable[[], None]] = []
    hub = sys.modules.get("huggingface_hub.utils")
    if hub is not None:
        disabled = hub.are_progress_bars_disabled()  # type: ignore[attr-defined]
        if quiet:
            hub.disable_progress_bars()  # type: ignore[attr-defined]
        if not disabled:
            undo.append(lambda: hub.enable_progress_bars() if _hub_bars_allowed() else None)  # type: ignore[attr-defined]
    tf = sys.modules.get("transformers.utils.logging")
    if tf is not None:
        verbosity, bars = tf.get_verbosity(), tf.is_progress_bar_enabled()  # type: ignore[attr-defined]
        if quiet:
            tf.set_verbosity_error()  # type: ignore[attr-defined]
            tf.disable_progress_bar()  # type: ignore[attr-defined]
        undo.append(lambda: _restore_transformers(tf, verbosity, bars))
    return undo


def _hub_bars_allowed() -> bool:
    """False when huggingface_hub was imported with ``HF_HUB_DISABLE_PROGRESS_BARS=1``: its bars stay off (enabling
    them would only warn)."""
    constants = sys.modules.get("huggingface_hub.constants")
    return not getattr(constants, "HF_HUB_DISABLE_PROGRESS_BARS", False)


def _restore_transformers(module: Any, verbosity: int, bars: bool) -> None:
    module.set_verbosity(verbosity)
    if bars and _hub_bars_allowed():
        module.enable_progress_bar()
    elif not bars:
        module.disable_progress_bar()


def _settle_imported_during(before: set[str], saved_env: Mapping[str, str | None]) -> None:
    """Libraries first imported inside the block read the quiet settings at import: give them back the defaults
    they would have had (``saved_env`` is the environment the block found)."""
    if "transformers.utils.logging" not in before:
        module = sys.modules.get("transformers.utils.logging")
        if module is not None:
            _restore_transformers(module, logging.WARNING, True)
    if "tqdm.std" not in before and saved_env.get("TQDM_DISABLE") is None:
        bar = sys.modules.get("tqdm.std")
        init = getattr(getattr(bar, "tqdm", None), "__dict__", {}).get("__init__")
        keywords = getattr(init, "keywords", None)  # tqdm reads TQDM_* into its defaults when imported
        if isinstance(keywords, dict):
            keywords.pop("disable", None)


def _ours(filename: str) -> bool:
    """True for a warning issued from gencache's own code (a recipe's warning is attributed to its caller there)."""
    return os.path.abspath(filename).startswith(_PACKAGE)


@contextlib.contextmanager
def quiet_libraries(verbose: bool = False, warn: WarningSink | None = None) -> Iterator[None]:
    """Within this block, third-party log lines and bars are silenced unless ``verbose`` or ``GENCACHE_DEBUG=1``
    (see the module docstring), hub requests wait at most a few seconds, and Python warnings go to ``warn`` (one
    line each; dropped when None), a third-party library's only with ``verbose``. Inside another such block this
    changes nothing."""
    if _ACTIVE.get() is not None:
        yield
        return
    import warnings

    quiet = not verbose and os.environ.get("GENCACHE_DEBUG") != "1"
    block = _Block(quiet)
    token = _ACTIVE.set(block)
    wanted = dict(_TIMEOUTS) | (_QUIET if quiet else {})
    saved_env = {name: os.environ.get(name) for name in wanted}
    for name, value in wanted.items():
        os.environ.setdefault(name, value)
    if quiet:
        block.silence(_LOGGERS)
    before = set(sys.modules)
    block.undo = _switch_imported(quiet)
    block.hub_done = "huggingface_hub.utils" in before
    saved_show = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, *args: Any, **kwargs: Any) -> None:
        if warn is not None and (not quiet or _ours(filename)):
            warn(one_line(message))

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = saved_show
        for step in reversed(block.undo):
            step()
        for name, saved in saved_env.items():
            if saved is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = saved
        _settle_imported_during(before, saved_env)
        for name, level in block.levels.items():
            logging.getLogger(name).setLevel(level)
        _ACTIVE.reset(token)
