"""A run's inputs are one complete value: preparing them raises every problem found or a missing value by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from gencache.config import parse_config
from gencache.core.errors import ConfigError, DatasetError, GenerationError, InputProblems
from gencache.run import check_kinds as kinds
from gencache.run.checks import preflight
from gencache.run.findings import Preflight
from gencache.run.sharding import Target
from support.config_factory import config_dict


def test_a_report_without_inputs_has_nothing_to_publish(tmp_path: Path) -> None:
    found = Preflight(
        config=parse_config(config_dict(tmp_path, "org/teacher")), targets=[Target(tmp_path / "out", None)]
    )
    with pytest.raises(GenerationError, match="nothing to publish"):
        found.run_inputs()


def test_one_problem_is_raised_as_it_is_and_several_together(tmp_path: Path) -> None:
    found = Preflight(
        config=parse_config(config_dict(tmp_path, "org/teacher")), targets=[Target(tmp_path / "out", None)]
    )
    first, second = ConfigError("first problem"), DatasetError("second problem")
    found.add_problem(kinds.OUTPUT_PATH, first)
    with pytest.raises(ConfigError) as info:
        found.run_inputs()
    assert info.value is first
    found.add_problem(kinds.data_config_check(0), second)
    with pytest.raises(InputProblems) as several:
        found.run_inputs()
    assert [p.error for p in several.value.problems] == [first, second] and several.value.exit_code == 2
    assert [p.location for p in several.value.problems] == ["output_dir", "data_configs[0]"]


def test_the_checks_produce_complete_inputs(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    config = parse_config(config_dict(tmp_path, tiny_teacher_dir))
    output = tmp_path / "out"
    found = preflight(config, [Target(output, None)], None, {})
    inputs = found.run_inputs()
    assert inputs.device == "cpu" and inputs.rename_mode
    assert len(inputs.samples.unique) == 4 and inputs.generation.max_new_tokens == 6
    assert inputs.engine.name == "transformers" and set(inputs.capacity) == {output}
    assert [target.keys for target in found.targets] == [tuple(inputs.samples.keys())]
    assert not output.exists()
