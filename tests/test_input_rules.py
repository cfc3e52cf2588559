"""Every input rule is validated once, in gencache.config, and the layers above take only validated models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gencache.config import config_to_json, parse_config
from gencache.config.engines import ContinuousOptions, StaticOptions
from gencache.core.errors import ConfigError
from gencache.generation.engines import EngineContext, create_engine
from support.config_factory import config_dict
from support.generation_helpers import resolve


def test_engine_options_are_the_chosen_engines_validated_model(tmp_path: Path) -> None:
    config = parse_config(
        config_dict(tmp_path, "org/teacher", engine="transformers-continuous", engine_options={"page_size": 16})
    )
    assert isinstance(config.engine_options, ContinuousOptions) and config.engine_options.page_size == 16
    recorded = config_to_json(config)["engine_options"]
    assert recorded == ContinuousOptions(page_size=16).model_dump(mode="json") and recorded["page_size"] == 16
    assert parse_config(config_to_json(config)) == config
    assert isinstance(parse_config(config_dict(tmp_path, "org/teacher")).engine_options, StaticOptions)


def test_engine_options_of_another_engine_name_the_engine(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"engine_options\.page_size: unknown field \(allowed: none\)"):
        parse_config(config_dict(tmp_path, "org/teacher", engine_options={"page_size": 16}))


def cpu_context(teacher: Path, tokenizer: Any, options: Any = None) -> EngineContext:
    """An engine context of the tiny teacher on the CPU, 2 new tokens."""
    return EngineContext(
        generation=resolve(teacher, tokenizer, max_new_tokens=2),
        tokenizer=tokenizer,
        model_path=str(teacher),
        dtype="float32",
        device="cpu",
        options=options,
    )


def test_a_plugin_object_without_a_kwargs_model_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    from gencache.config import datasets
    from gencache.config.datasets import GROUP, plugin_recipe
    from gencache.core.errors import DatasetError

    module = "gencache_test_bad_plugin"
    (tmp_path / f"{module}.py").write_text("class Recipe:\n    name = 'bad'\n    kwargs_model = dict\n\nTHING = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    bad_model = metadata.EntryPoint(name="bad", value=f"{module}:Recipe", group=GROUP)
    monkeypatch.setattr(datasets, "entry_point", lambda name: bad_model)
    with pytest.raises(
        DatasetError, match=r"kwargs_model is <class 'dict'>, not a subclass of gencache\.config\.Kwarg"
    ):
        plugin_recipe("bad")
    no_recipe = metadata.EntryPoint(name="bad", value=f"{module}:THING", group=GROUP)
    monkeypatch.setattr(datasets, "entry_point", lambda name: no_recipe)
    with pytest.raises(DatasetError, match="is a int, not a gencache DatasetRecipe"):
        plugin_recipe("bad")


def test_every_dtype_has_its_byte_size() -> None:
    from gencache.config.names import DTYPE_BYTES, DTYPES

    assert tuple(DTYPE_BYTES) == DTYPES


@pytest.mark.parametrize("path", ["/", "//", ".", "..", "runs/.", "runs/..", "runs/./"])
def test_an_output_path_without_a_name_of_its_own_is_refused(path: str) -> None:
    from gencache.config.paths import check_output_name, output_name_problem

    assert output_name_problem(path) is not None
    with pytest.raises(ConfigError, match=r"^--out '.*' has no name of its own"):
        check_output_name(path, "--out")


@pytest.mark.parametrize("path", ["runs/out", "runs/out/", "out", "~/out", "/tmp/x.jsonl"])
def test_an_output_path_with_a_name_is_accepted(path: str) -> None:
    from gencache.config.paths import output_name_problem

    assert output_name_problem(path) is None


@pytest.mark.parametrize("name", ["transformers", "transformers-continuous"])
def test_each_engine_class_is_named_after_its_engine_and_says_when_it_loads(
    name: str, tiny_teacher_dir: Path, tiny_tokenizer: Any
) -> None:
    engine = create_engine(name, cpu_context(tiny_teacher_dir, tiny_tokenizer))
    assert type(engine).__name__ == "".join(part.title() for part in name.split("-")) + "Engine"
    assert engine.loads_with_prompts is False  # load_weights loads the teacher itself
