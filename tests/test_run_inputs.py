"""A run's inputs are one complete value: the checks raise every problem they found at once, or hand on the
inputs with every part present."""

from __future__ import annotations

from pathlib import Path

import pytest

from gencache.core.errors import ConfigError, DatasetError, InputProblems, Problem
from gencache.run.plan import Overrides
from gencache.run.preflight import Preflight, plan_run, preflight
from support.config_factory import write_config


def test_one_problem_is_raised_as_it_is_and_several_together() -> None:
    found = Preflight(config=None, targets=[])
    first, second = ConfigError("first problem"), DatasetError("second problem")
    found.problems.append(Problem("output path", "output_dir", first))
    with pytest.raises(ConfigError) as info:
        found.run_session()
    assert info.value is first
    found.problems.append(Problem("data_configs[0]", "data_configs[0]", second))
    with pytest.raises(InputProblems) as several:
        found.run_session()
    assert [p.error for p in several.value.problems] == [first, second] and several.value.exit_code == 2
    assert [p.location for p in several.value.problems] == ["output_dir", "data_configs[0]"]


def test_the_checks_produce_complete_inputs(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    output = tmp_path / "out"
    plan = plan_run(write_config(tmp_path, tiny_teacher_dir), Overrides())
    inputs = preflight(plan, {}).run_session()
    assert inputs.device == "cpu" and inputs.rename_mode
    assert len(inputs.samples.unique) == 4 and inputs.generation.max_new_tokens == 6
    assert inputs.engine.name == "transformers" and set(inputs.capacity) == {output}
    assert [target.keys for target in inputs.targets] == [tuple(inputs.samples.keys())]
    assert not output.exists()
