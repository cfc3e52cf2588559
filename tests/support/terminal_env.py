"""Environment for the child processes the tests start, independent of where the suite runs (a CI runner may set
variables that make rich and typer treat a pipe as a terminal)."""

from __future__ import annotations

import os

# What makes rich treat a pipe as a terminal: colour codes and the terminal's width in a piped `inspect`'s tables.
FORCED_COLOUR_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE")
# Those, and what makes typer's help force a terminal (GITHUB_ACTIONS, PY_COLORS) or fix its width (TERMINAL_WIDTH).
FORCED_TERMINAL_ENV = (*FORCED_COLOUR_ENV, "PY_COLORS", "TERMINAL_WIDTH", "GITHUB_ACTIONS")


def without_terminal(removed: tuple[str, ...] = FORCED_TERMINAL_ENV, **overrides: str) -> dict[str, str]:
    """This process's environment without ``removed`` and with ``overrides``, for a child process."""
    env = {name: value for name, value in os.environ.items() if name not in removed}
    return {**env, **overrides}
