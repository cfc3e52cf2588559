"""The worked distillation example (examples/distil_tiny.py) runs a few steps on the tiny teacher's cache and its
loss falls."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import ModuleType

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "distil_tiny.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("distil_tiny", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_distils_for_a_few_steps(tmp_path: Path) -> None:
    example = load_example()
    lines: list[str] = []
    losses = example.distil(tmp_path, steps=12, log_every=4, log=lines.append)
    assert len(losses) == 12 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4
    assert " samples from " in lines[0] and any("cross-entropy" in line for line in lines)
    again = example.distil(tmp_path, steps=2, log=lines.append)  # reuses the teacher and the artifact
    assert again[0] == losses[0]
