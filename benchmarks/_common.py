"""What the command-line benchmarks (``bench_commands.py``, ``bench_errors.py``) share: the checkout's ``src`` on the
path, progress on stderr, the installed ``gencache`` script and the environment it runs in, timing a fresh process,
and the head and load-average note of a section."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def gencache_script() -> list[str]:
    """The installed console script beside this interpreter (``python -m gencache`` without one)."""
    script = Path(sys.executable).with_name("gencache")
    return [str(script)] if script.exists() else [sys.executable, "-m", "gencache"]


def installed_env(root: Path) -> dict[str, str]:
    """The environment of a timed command: byte code written and used (in a private cache under ``root``), as an
    installed package imports it, even where ``PYTHONDONTWRITEBYTECODE`` is set (the warm-up run compiles it)."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    return env | {"PYTHONPYCACHEPREFIX": str(root / "pycache")}


def wall(command: list[str], env: Mapping[str, str] | None = None, *, check: bool = False) -> float:
    """Seconds a fresh process of ``command`` takes, its output discarded."""
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=check, env=env)
    return time.perf_counter() - started


def section_head(title: str, script: str, options: str = "") -> list[str]:
    """A section's title and the command line that produced it, with the date, machine and Python."""
    return [
        f"## {title}",
        "",
        f"Command: `uv run python benchmarks/{script}{options}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.machine()}, Python {platform.python_version()}).",
        "",
    ]


def load_note(before: float, after: float) -> str:
    """The first words of a section's notes: how loaded the machine was."""
    return f"the load average was {before:.1f} before and {after:.1f} after the run on these {os.cpu_count()} CPUs"


def load_average() -> float:
    return os.getloadavg()[0]
