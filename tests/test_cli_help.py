"""Help that reads as written: a command's description in ``gencache --help`` (``inspect``'s, printed 400 columns
wide) flows as one line instead of keeping the docstring's line breaks (which the console then broke again,
mid-sentence)."""

from __future__ import annotations

import subprocess
import sys

from support.terminal_env import without_terminal


def _help(columns: int) -> str:
    # Whatever the environment: no forced terminal (GITHUB_ACTIONS, FORCE_COLOR, PY_COLORS), no fixed width
    # (TERMINAL_WIDTH overrides COLUMNS in typer), no colours.
    env = without_terminal(COLUMNS=str(columns), TERM="dumb", NO_COLOR="1", _TYPER_FORCE_DISABLE_TERMINAL="1")
    done = subprocess.run(
        [sys.executable, "-m", "gencache", "--help"], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_command_list_flows_each_description() -> None:
    out = _help(columns=400)
    lines = [line for line in out.splitlines() if "Show teacher, tokenizer state" in line]
    assert len(lines) == 1
    assert "(a shard's own and its run's), shards and overlaps" in lines[0]
    assert lines[0].rstrip(" │").endswith("2 when a path is not an artifact at all).")
