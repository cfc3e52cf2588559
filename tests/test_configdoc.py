"""docs/config.md and docs/config.schema.json are generated from the models and cannot drift."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gencache.config import CacheConfig, DataConfig, ModelConfig, config_to_json, parse_config
from gencache.config.generation import GENERATION_FORBIDDEN, GenerationKwargs
from gencache.config.names import LOGIT_FIELDS
from gencache.data.prompts import TEMPLATES
from gencache.data.recipes import BUILTIN_DATASETS as DATASETS
from gencache.docgen.config import (
    BEGIN,
    CONFIG_PATH,
    DATASETS_PATH,
    END,
    SCHEMA_PATH,
    config_schema,
    config_tables,
    documents,
)
from support.schema_check import errors

REPO = Path(__file__).resolve().parents[1]


def test_the_committed_docs_are_what_the_models_generate() -> None:
    for path, text in documents(REPO).items():
        assert (REPO / path).read_text(encoding="utf-8") == text, (
            f"{path} is out of date: run `uv run python -m gencache.docgen.config`"
        )


def _walk(node: Any) -> list[Any]:
    out = [node]
    if isinstance(node, dict):
        for value in node.values():
            out += _walk(value)
    elif isinstance(node, list):
        for value in node:
            out += _walk(value)
    return out


def test_schema_structure() -> None:
    schema = config_schema()
    defs = schema["$defs"]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(CacheConfig.model_fields)
    # a file as written: the model block (or anything else) may come from _default.json
    assert "required" not in schema and "required" not in defs["ModelConfig"]
    assert schema["properties"]["cache_device"]["const"] == "cpu"
    assert schema["properties"]["gen_batch_size"]["minimum"] == 1
    assert schema["properties"]["data_configs"]["minItems"] == 1
    for name, model in (("ModelConfig", ModelConfig), ("DataConfig", DataConfig)):
        assert defs[name]["additionalProperties"] is False
        assert set(defs[name]["properties"]) == set(model.model_fields)
    data_config = defs["DataConfig"]
    assert data_config["properties"]["dataset_name"]["examples"] == sorted(DATASETS)
    assert "enum" not in data_config["properties"]["dataset_name"]  # plug-ins add dataset names
    assert data_config["properties"]["template"]["enum"] == sorted(TEMPLATES)
    assert set(data_config["required"]) == {"dataset_name", "num_samples", "num_data_strs", "num_shots", "subset"}
    # every dataset and template has its kwargs model, closed to unknown keys
    selected = {
        (rule["if"]["properties"][key]["const"], rule["then"]["properties"][target]["$ref"])
        for rule in data_config["allOf"]
        for key, target in (("dataset_name", "data_kwargs"), ("template", "template_kwargs"))
        if key in rule["if"]["properties"]
    }
    assert {name for name, _ in selected} == set(DATASETS) | set(TEMPLATES)
    for _, ref in selected:
        target = defs[ref.removeprefix("#/$defs/")]
        assert target["type"] == "object" and target["additionalProperties"] is False
    assert defs["data_kwargs.hotpot_qa"]["properties"]["difficulty"]["default"] == ["hard"]
    # every reference resolves
    for node in _walk(schema):
        if isinstance(node, dict) and "$ref" in node:
            assert node["$ref"].removeprefix("#/$defs/") in defs, node["$ref"]
    # logit fields are excluded from generation_kwargs
    generation = defs["ModelConfig"]["properties"]["generation_kwargs"]
    assert set(LOGIT_FIELDS) <= set(generation["propertyNames"]["not"]["enum"])
    json.dumps(schema, allow_nan=False)


def test_markdown_documents_every_field_dataset_and_template() -> None:
    text = config_tables()
    for name in CacheConfig.model_fields:
        assert f"| `{name}` |" in text
    for name in ModelConfig.model_fields:
        assert f"| `model.{name}` |" in text
    for name in DataConfig.model_fields:
        assert f"| `{name}` |" in text
    for name, recipe in DATASETS.items():
        assert f"### `{name}`" in text
        for field in recipe.kwargs_model.model_fields:
            assert f"| `{field}` |" in text
    for name, spec in TEMPLATES.items():
        assert f"### `{name}`" in text
        for field in spec.kwargs_model.model_fields:
            assert f"| `{field}` |" in text
    for name in [*GenerationKwargs.model_fields, *GENERATION_FORBIDDEN, *LOGIT_FIELDS]:
        assert f"| `{name}` |" in text
    assert "| `gen_batch_size` | int | `1` |" in text
    assert "| `output_dir` | str | required |" in text
    assert '| `difficulty` | list of `"easy"` \\| `"medium"` \\| `"hard"` | `["hard"]` |' in text
    assert "store_logits" in text


def test_the_example_config_is_valid_and_its_effective_form_is_what_resolved_config_records() -> None:
    text = (REPO / CONFIG_PATH).read_text(encoding="utf-8")
    example, effective = (json.loads(block.split("\n```")[0]) for block in text.split("```json\n")[1:])
    assert config_to_json(parse_config(example)) == effective
    assert effective["data_configs"][0]["data_kwargs"]["difficulty"] == ["hard"]


# -- the dataset columns in docs/datasets.md --------------------------------------------------------------------


def test_the_dataset_columns_name_every_column_of_every_recipe() -> None:
    generated = (REPO / DATASETS_PATH).read_text(encoding="utf-8").split(BEGIN)[1].split(END)[0]
    for name, recipe in DATASETS.items():
        assert f"#### `{name}` columns" in generated
        for column in recipe.columns:
            assert f"`{column.name}`" in generated


def test_the_worked_key_example_is_what_the_table_recipe_computes(tmp_path: Path) -> None:
    from gencache.data.samples import build_samples

    page = (REPO / DATASETS_PATH).read_text(encoding="utf-8")
    row = {
        "id": 7,
        "question": "Who wrote Hamlet?",
        "answer": "Shakespeare",
        "passages": ["Hamlet is a tragedy.", "It was written around 1600."],
        "lang": "en",
    }
    assert json.dumps(row, ensure_ascii=False) in page
    source = tmp_path / "rows.jsonl"
    source.write_text(json.dumps(row) + "\n", encoding="utf-8")
    (sample,) = build_samples(
        [
            {
                "dataset_name": "table",
                "num_samples": 1,
                "num_data_strs": 0,
                "num_shots": 0,
                "subset": "default",
                "source": str(source),
                "data_kwargs": {"documents": "passages", "task": ["lang"]},
            }
        ]
    )
    assert f"Key: `{sample.key}`" in page
    chat = tmp_path / "chat.jsonl"
    turns_in = [
        ("user", "Capital of Norway?"),
        ("assistant", "Oslo."),
        ("user", "And of Sweden?"),
        ("assistant", "Stockholm."),
    ]
    messages = [{"role": role, "content": content} for role, content in turns_in]
    chat.write_text(json.dumps({"messages": messages}) + "\n", encoding="utf-8")
    (turns,) = build_samples(
        [
            {
                "dataset_name": "chat",
                "num_samples": 1,
                "num_data_strs": 0,
                "num_shots": 0,
                "subset": "default",
                "source": str(chat),
                "template": "qwen_3_chat",
            }
        ]
    )
    assert f"Key: `{turns.key}`" in page and turns.answer == "Stockholm."


# -- the published schema against real configs ----------------------------------------------------------------


def _published() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((REPO / SCHEMA_PATH).read_text(encoding="utf-8"))
    return schema


SHIPPED = sorted((REPO / "configs").rglob("*.json"))


def test_there_are_shipped_configs_and_most_rely_on_their_defaults() -> None:
    assert len(SHIPPED) > 10
    without_model = [p for p in SHIPPED if "model" not in json.loads(p.read_text(encoding="utf-8"))]
    assert without_model  # the case an editor used to reject


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(REPO)) for p in SHIPPED])
def test_every_shipped_config_validates_against_the_published_schema(path: Path) -> None:
    schema = _published()
    assert errors(json.loads(path.read_text(encoding="utf-8")), schema, schema) == []


def test_the_schema_still_checks_what_a_file_holds() -> None:
    schema = _published()
    example = json.loads((REPO / CONFIG_PATH).read_text(encoding="utf-8").split("```json\n")[1].split("\n```")[0])
    assert errors(example, schema, schema) == []
    data_config = {"dataset_name": "hotpot_qa", "num_samples": 1, "num_data_strs": 0, "num_shots": 0, "subset": "x"}
    bad = [
        {"gen_batch_size": 0},
        {"model": {"generation_kwargs": {"top_p": 1.5}}},
        {"model": {"generation_kwargs": {"streamer": "x"}}},
        {"store_logits": True},
        {"model": {"model_pth": "x"}},
        {"data_configs": [{**data_config, "data_kwargs": {"dificulty": ["hard"]}}]},
        {"data_configs": [{**data_config, "template": "chatml"}]},
        {"data_configs": [{k: v for k, v in data_config.items() if k != "subset"}]},
        {"data_configs": [{**data_config, "dataset_name": "table", "data_kwargs": {"quary": "q"}}]},
    ]
    for config in bad:
        assert errors(config, schema, schema), config
    plugin = {**data_config, "dataset_name": "glossary", "data_kwargs": {"with_notes": False}}
    assert errors({"data_configs": [plugin]}, schema, schema) == []  # a plug-in's name and kwargs are not known here
