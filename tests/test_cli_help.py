"""Help that reads as written: each command's description in ``gencache --help`` flows as one paragraph instead of
keeping the docstring's line breaks (which the console then broke again, mid-sentence)."""

from __future__ import annotations

import os
import subprocess
import sys


def _help(*args: str, columns: int) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "dumb", "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "gencache", *args, "--help"], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_command_list_flows_each_description() -> None:
    out = _help(columns=400)
    lines = [line for line in out.splitlines() if "Show teacher, tokenizer state" in line]
    assert len(lines) == 1
    assert "(a shard's own and its run's), shards and overlaps" in lines[0]
    assert lines[0].rstrip(" │").endswith("2 when a path is not an artifact at all).")
