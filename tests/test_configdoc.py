"""docs/config.md and docs/config.schema.json are generated from the models and cannot drift."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gencache.configdoc import (
    EXAMPLE_CONFIG,
    MARKDOWN_PATH,
    SCHEMA_PATH,
    config_schema,
    main,
    render_config_markdown,
    render_schema_text,
    stale_docs,
    write_docs,
)
from gencache.data.config import (
    GENERATION_FORBIDDEN,
    GENERATION_KWARG_RULES,
    LOGIT_FIELDS,
    CacheConfig,
    DataConfig,
    ModelConfig,
    parse_config,
)
from gencache.data.prompts import TEMPLATES
from gencache.data.recipes import DATASETS

REPO = Path(__file__).resolve().parents[1]
REGENERATE = "out of date: run `uv run python -m gencache.configdoc` and commit docs/"


def test_checked_in_markdown_matches_the_models() -> None:
    assert (REPO / MARKDOWN_PATH).read_text(encoding="utf-8") == render_config_markdown(), REGENERATE


def test_checked_in_schema_matches_the_models() -> None:
    assert (REPO / SCHEMA_PATH).read_text(encoding="utf-8") == render_schema_text(), REGENERATE


def test_generation_is_deterministic() -> None:
    assert render_config_markdown() == render_config_markdown()
    assert render_schema_text() == render_schema_text()


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
    assert set(schema["required"]) == {"model", "data_configs", "output_dir"}
    assert schema["properties"]["cache_device"]["const"] == "cpu"
    assert schema["properties"]["gen_batch_size"]["minimum"] == 1
    assert schema["properties"]["data_configs"]["minItems"] == 1
    for name, model in (("ModelConfig", ModelConfig), ("DataConfig", DataConfig)):
        assert defs[name]["additionalProperties"] is False
        assert set(defs[name]["properties"]) == set(model.model_fields)
    data_config = defs["DataConfig"]
    assert data_config["properties"]["dataset_name"]["enum"] == sorted(DATASETS)
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
    text = render_config_markdown()
    for name in CacheConfig.model_fields:
        assert f"| `{name}` |" in text
    for name in ModelConfig.model_fields:
        assert f"| `model.{name}` |" in text
    for name in DataConfig.model_fields:
        assert f"| `{name}` |" in text
    for name, recipe in DATASETS.items():
        assert f"#### `{name}`" in text
        for field in recipe.kwargs_model.model_fields:
            assert f"| `{field}` |" in text
    for name, spec in TEMPLATES.items():
        assert f"#### `{name}`" in text
        for field in spec.kwargs_model.model_fields:
            assert f"| `{field}` |" in text
    for name in [*GENERATION_KWARG_RULES, *GENERATION_FORBIDDEN, *LOGIT_FIELDS]:
        assert f"| `{name}` |" in text
    assert "| `gen_batch_size` | int | `1` |" in text
    assert "| `output_dir` | str | required |" in text
    assert '| `difficulty` | list of `"easy"` \\| `"medium"` \\| `"hard"` | `["hard"]` |' in text
    assert "_default.json" in text and "store_logits" in text


def test_markdown_example_is_a_valid_config() -> None:
    text = render_config_markdown()
    blocks = text.split("```json\n")[1:]
    example, effective = (json.loads(block.split("\n```")[0]) for block in blocks)
    assert example == EXAMPLE_CONFIG
    cfg = parse_config(example)
    assert parse_config(effective) == cfg
    assert effective["data_configs"][0]["data_kwargs"]["difficulty"] == ["hard"]


def test_write_docs_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(tmp_path), "--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    written = write_docs(tmp_path)
    assert written == [tmp_path / MARKDOWN_PATH, tmp_path / SCHEMA_PATH]
    assert stale_docs(tmp_path) == []
    assert main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / SCHEMA_PATH).write_text("{}\n", encoding="utf-8")
    assert stale_docs(tmp_path) == [tmp_path / SCHEMA_PATH]
    assert main(["--root", str(tmp_path)]) == 0
    assert stale_docs(tmp_path) == []


def test_module_entry_point(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gencache.configdoc", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "config.md" in result.stdout
    assert (tmp_path / MARKDOWN_PATH).read_text(encoding="utf-8") == render_config_markdown()
