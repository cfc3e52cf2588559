"""`gencache generate` with the transformers-continuous engine, killed or interrupted mid-generation, leaves no output
and no temporary directory, and its manager thread never keeps the process alive."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from support.config_factory import config_dict, musique
from support.config_factory import write_config as factory_config
from test_generate_signals import Child, assert_killed_run_leaves_only_a_temporary_directory

pytestmark = pytest.mark.slow  # each test runs a whole `python -m gencache generate` child


def write_config(tmp_path: Path, teacher: Path) -> Path:
    """Six MuSiQue samples through the continuous engine, two at a time."""
    generation = {"max_new_tokens": 8, "stop_strings": ["."]}
    model = config_dict(tmp_path, teacher)["model"] | {"generation_kwargs": generation}
    return factory_config(
        tmp_path,
        teacher,
        name="config.json",
        model=model,
        data_configs=[musique(num_samples=6)],
        engine="transformers-continuous",
        engine_options={"max_concurrent_sequences": 2, "page_size": 16},
    )


def test_kill_9_mid_continuous_generation_leaves_no_output(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    child = Child(write_config(tmp_path, tiny_teacher_dir))
    child.run_until("appended", 2)
    child.proc.send_signal(signal.SIGKILL)
    assert child.finish() == -signal.SIGKILL
    assert_killed_run_leaves_only_a_temporary_directory(tmp_path, 1)


@pytest.mark.parametrize("signum", [signal.SIGINT])  # SIGTERM: test_generate_signals.py (one handler takes both)
def test_interrupt_mid_continuous_generation_removes_the_temporary_directory(
    tmp_path: Path, tiny_teacher_dir: Path, signum: int
) -> None:
    child = Child(write_config(tmp_path, tiny_teacher_dir))
    child.run_until("appended", 2)
    child.proc.send_signal(signum)
    child.release()
    code = child.finish()  # returns at all: the manager's (non-daemon) thread was stopped
    assert code == (130 if signum == signal.SIGINT else 143), child.stderr
    assert "nothing was published" in child.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
