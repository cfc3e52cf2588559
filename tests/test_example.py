"""The worked examples run a few steps on the tiny teacher's cache: the hand-written loop (examples/distil_tiny.py)
with the library's loss, the Trainer script (examples/trainer_tiny.py) and the TRL script (examples/trl_tiny.py).
They share one work directory, so the teacher is built and its cache generated once."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("examples")


def test_the_example_distils_for_a_few_steps(workdir: Path) -> None:
    example = load_example("distil_tiny")
    lines: list[str] = []
    losses = example.distil(workdir, steps=12, log_every=4, log=lines.append)
    assert len(losses) == 12 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4
    assert " samples from " in lines[0] and any("cross-entropy" in line and "KL" in line for line in lines)
    again = example.distil(workdir, steps=2, log=lines.append)  # reuses the teacher and the cache
    assert again[0] == losses[0]
    assert "gencache.generation" not in (EXAMPLES / "distil_tiny.py").read_text()  # public pieces only


def test_the_trainer_example_logs_both_terms(workdir: Path) -> None:
    history = load_example("trainer_tiny").train(workdir, steps=4)
    logged = [entry for entry in history if "loss" in entry]
    assert len(logged) == 4 and all(math.isfinite(e["loss"]) and e["kl"] > 0 and e["ce"] > 0 for e in logged)
    assert logged[-1]["ce"] < logged[0]["ce"]


def test_the_trl_example_trains_on_the_cached_tokens(workdir: Path) -> None:
    pytest.importorskip("trl")
    history, view = load_example("trl_tiny").train(workdir, steps=3)
    logged = [entry for entry in history if "loss" in entry]
    assert len(logged) == 3 and all(math.isfinite(e["loss"]) for e in logged)
    from gencache.artifact.reader import CacheReader

    setup = sys.modules["tiny_setup"].prepare(workdir)
    reader = CacheReader(setup.artifact)
    for row in view:
        answer = [label for label in row["labels"] if label != -100]
        assert answer == reader[row["key"]].sequences[0].tolist() and sum(row["completion_mask"]) == len(answer)
