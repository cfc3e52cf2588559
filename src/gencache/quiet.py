"""Keeping the command line's output to gencache's own lines: the Hugging Face libraries' log lines and bars are
quieted for the length of a command, Python warnings become one ``warning:`` line, and text is made printable.
Top layer: only the CLI uses it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import typer

from gencache.progress import is_terminal


def printable(text: str) -> str:
    """``text`` with anything the terminal cannot encode (lone surrogates from a damaged file) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


_LOGGERS = ("huggingface_hub", "transformers", "datasets", "httpx", "httpcore", "urllib3", "filelock")


@contextlib.contextmanager
def quiet_libraries(verbose: bool) -> Iterator[None]:
    """Keep the Hugging Face libraries' log lines and bars (hub retries, weight loading) away from the user unless
    ``--verbose`` or ``GENCACHE_DEBUG=1``, and bound how long one hub request may wait; everything is restored
    afterwards (the CLI can run inside a longer-lived process, such as a test)."""
    import logging
    import warnings

    saved_show = warnings.showwarning
    warnings.showwarning = _one_line_warning
    saved_env = {name: os.environ.get(name) for name in _QUIET_ENV}
    saved_levels = {name: logging.getLogger(name).level for name in _LOGGERS}
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "5")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")
    quiet = not verbose and os.environ.get("GENCACHE_DEBUG") != "1"
    transformers_logging = sys.modules.get("transformers.utils.logging")
    verbosity = transformers_logging.get_verbosity() if transformers_logging is not None else None  # type: ignore[attr-defined]
    if quiet:
        for name in ("TRANSFORMERS_VERBOSITY", "DATASETS_VERBOSITY", "HF_HUB_VERBOSITY"):
            os.environ.setdefault(name, "error")
        if not is_terminal(sys.stderr):
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        for name in _LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)
        if transformers_logging is not None:
            transformers_logging.set_verbosity_error()  # type: ignore[attr-defined]
    try:
        yield
    finally:
        warnings.showwarning = saved_show
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)
        imported = sys.modules.get("transformers.utils.logging")
        if imported is not None:  # back to what it was, or to transformers' default when it was imported here
            imported.set_verbosity(verbosity if verbosity is not None else logging.WARNING)  # type: ignore[attr-defined]


def _one_line_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    """A Python warning as one ``warning:`` line on stderr (no source path, no code line)."""
    typer.echo(printable(f"warning: {' '.join(str(message).split())}"), err=True)


_QUIET_ENV = (
    "HF_HUB_ETAG_TIMEOUT",
    "HF_HUB_DOWNLOAD_TIMEOUT",
    "TRANSFORMERS_VERBOSITY",
    "DATASETS_VERBOSITY",
    "HF_HUB_VERBOSITY",
    "HF_HUB_DISABLE_PROGRESS_BARS",
)


__all__ = ["printable", "quiet_libraries"]
