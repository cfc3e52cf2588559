"""Every registry a config names from (datasets, plug-ins included, templates, engines) has one list of names and
words an unknown name one way, with the closest known name; a nested object's unknown key is worded from the
error's kind, never by editing another message's text."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import Field, StrictInt, field_validator
from pydantic_core import ValidationError

from gencache.config import parse_data_configs
from gencache.config.datasets import DATASET_KWARGS, dataset_kwargs_model
from gencache.config.engines import ENGINE_OPTIONS, GEN_BATCH_SIZE_USE
from gencache.config.kwargs import TEMPLATE_KWARGS, KwargsModel
from gencache.config.messages import format_validation_error, unknown_name
from gencache.config.names import ALL_ENGINES
from gencache.core.errors import ConfigError
from gencache.data.prompts import CHAT_TEMPLATES, TEMPLATES
from gencache.data.recipes import BUILTIN_DATASETS, get_recipe

DATASETS_KNOWN = "known: biography, chat, hotpot_qa, musique, niah, table"
TEMPLATES_KNOWN = "known: default, llama_chat, qwen_3_chat, tokenizer_chat"


def data_config(**overrides: Any) -> dict[str, Any]:
    config = {"dataset_name": "hotpot_qa", "num_samples": 1, "num_data_strs": 0, "num_shots": 0, "subset": "distractor"}
    config.update(overrides)
    return config


def field_message(**overrides: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_data_configs([data_config(**overrides)])
    return str(caught.value)


# -- one message --------------------------------------------------------------------------------------------
def test_the_one_unknown_name_message_suggests_the_closest_and_lists_the_known_sorted() -> None:
    assert unknown_name("dataset", "hotpot", ["table", "hotpot_qa", "biography"]) == (
        "unknown dataset 'hotpot' (did you mean 'hotpot_qa'? known: biography, hotpot_qa, table)"
    )
    assert unknown_name("template", "zzz", ["default"]) == "unknown template 'zzz' (known: default)"
    assert unknown_name("engine", 3, []) == "unknown engine 3 (known: none)"
    # a name that differs only in case is the first suggestion, where difflib alone finds nothing close
    assert unknown_name("dataset", "MuSiQue", ["musique", "table"]) == (
        "unknown dataset 'MuSiQue' (did you mean 'musique'? known: musique, table)"
    )


def test_an_unknown_dataset_reads_the_same_from_the_config_the_catalog_and_the_recipes() -> None:
    message = f"unknown dataset 'hotpot' (did you mean 'hotpot_qa'? {DATASETS_KNOWN})"
    assert f"data_configs[0].dataset_name: {message}" in field_message(dataset_name="hotpot")
    with pytest.raises(ConfigError, match=re.escape(message)):
        dataset_kwargs_model("hotpot")
    with pytest.raises(ConfigError, match=re.escape(message)):
        get_recipe("hotpot")


def test_an_unknown_template_reads_the_same_message() -> None:
    message = f"unknown template 'qwen3_chat' (did you mean 'qwen_3_chat'? {TEMPLATES_KNOWN})"
    assert f"data_configs[0].template: {message}" in field_message(template="qwen3_chat")


# -- one list of names per concept --------------------------------------------------------------------------
def test_the_recipes_and_templates_follow_the_config_lists_of_names() -> None:
    assert list(BUILTIN_DATASETS) == list(DATASET_KWARGS)
    for name, recipe in BUILTIN_DATASETS.items():
        assert recipe.name == name and recipe.kwargs_model is DATASET_KWARGS[name] is dataset_kwargs_model(name)
    assert list(TEMPLATES) == list(TEMPLATE_KWARGS)
    for name, spec in TEMPLATES.items():
        assert spec.name == name and spec.kwargs_model is TEMPLATE_KWARGS[name]
    assert CHAT_TEMPLATES == ("tokenizer_chat", "llama_chat", "qwen_3_chat")


def test_every_engine_table_is_keyed_by_the_one_list_of_engine_names() -> None:
    assert tuple(ENGINE_OPTIONS) == ALL_ENGINES
    assert tuple(GEN_BATCH_SIZE_USE) == ALL_ENGINES


def test_what_each_engine_does_with_gen_batch_size_is_in_the_config_reference() -> None:
    from gencache.config import CacheConfig

    described = CacheConfig.model_fields["gen_batch_size"].description or ""
    for name, use in GEN_BATCH_SIZE_USE.items():
        assert f'"{name}": {use}' in described


# -- nested unknown keys ------------------------------------------------------------------------------------
class Counts(KwargsModel):
    limit: StrictInt = 1
    names: list[str] = Field(default_factory=list)

    @field_validator("names")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        if "x" in value:
            raise ValueError("unknown field name 'x' in names")
        return value


def nested_message(value: dict[str, Any]) -> str:
    class Holder(KwargsModel):
        counts: Any = None

        @field_validator("counts", mode="before")
        @classmethod
        def _counts(cls, raw: Any) -> Any:
            return Counts.model_validate(raw)

    with pytest.raises(ValidationError) as caught:
        Holder.model_validate({"counts": value})
    return format_validation_error(caught.value)


def test_a_nested_unknown_key_is_worded_from_the_error_kind() -> None:
    assert nested_message({"limt": 2}) == ("counts.limt: unknown field (did you mean 'limit'? allowed: limit, names)")
    # a validator's own message that happens to start like an unknown key is left as it is
    assert nested_message({"names": ["x"]}) == "counts.names: unknown field name 'x' in names"


def test_a_nested_unknown_key_of_the_config_names_its_owner() -> None:
    assert (
        "data_configs[0].data_kwargs.dificulty: unknown field (did you mean 'difficulty'? allowed: add_cot, add_inst, "
        "difficulty)"
    ) in field_message(data_kwargs={"dificulty": ["hard"]})
    assert "data_configs[0].template_kwargs.system_prompt: unknown field (allowed: none)" in (
        field_message(template_kwargs={"system_prompt": "x"})
    )
