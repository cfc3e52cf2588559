"""docs/config.schema.json and the generated parts of docs/config.md and docs/datasets.md, from the config models'
JSON schemas and field descriptions and the recipes' declared columns; a test fails when the committed files differ.

    uv run python -m gencache.docgen.config  # rewrite them under the current directory
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gencache.config import DEFAULTS_FILENAME, CacheConfig
from gencache.config.engines import ENGINE_OPTIONS
from gencache.config.generation import GENERATION_FORBIDDEN, GENERATION_UNSUPPORTED, GenerationKwargs
from gencache.config.names import LOGIT_FIELDS
from gencache.data.prompts import TEMPLATES
from gencache.data.recipes import BUILTIN_DATASETS

SCHEMA_PATH, CONFIG_PATH, DATASETS_PATH = (Path("docs") / n for n in ("config.schema.json", "config.md", "datasets.md"))
BEGIN = "<!-- BEGIN GENERATED: `uv run python -m gencache.docgen.config` writes this part; do not edit it -->"
END = "<!-- END GENERATED -->"


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema, closed to unknown keys unless it takes them."""
    schema = model.model_json_schema(ref_template="#/$defs/{model}")
    return {**schema, "additionalProperties": schema.get("additionalProperties", False)}


def _switch(selector: str, target: str, models: Mapping[str, type[BaseModel]], defs: dict[str, Any]) -> list[Any]:
    """One ``if selector == name then target is models[name]`` rule per name, the models added to ``defs``."""
    defs.update({f"{target}.{name}": _schema(model) for name, model in models.items()})
    then = {name: {"properties": {target: {"$ref": f"#/$defs/{target}.{name}"}}} for name in models}
    return [{"if": {"properties": {selector: {"const": n}}, "required": [selector]}, "then": then[n]} for n in models]


def _full_schema() -> dict[str, Any]:
    """The schema of a merged config (what is required after the merge is marked so)."""
    schema = _schema(CacheConfig)
    defs = schema["$defs"]
    props = defs["DataConfig"]["properties"]
    props["dataset_name"]["examples"] = sorted(BUILTIN_DATASETS)  # not an enum: plug-ins add names
    props["template"]["enum"] = sorted(TEMPLATES)
    data_kwargs = {name: recipe.kwargs_model for name, recipe in BUILTIN_DATASETS.items()}
    template_kwargs = {name: spec.kwargs_model for name, spec in TEMPLATES.items()}
    defs["DataConfig"]["allOf"] = _switch("dataset_name", "data_kwargs", data_kwargs, defs) + _switch(
        "template", "template_kwargs", template_kwargs, defs
    )
    schema["allOf"] = _switch("engine", "engine_options", ENGINE_OPTIONS, defs)
    generation = _schema(GenerationKwargs)
    defs.update(generation.pop("$defs", {}))
    refused = sorted(LOGIT_FIELDS | set(GENERATION_FORBIDDEN) | set(GENERATION_UNSUPPORTED))
    defs["ModelConfig"]["properties"]["generation_kwargs"].update(
        properties=generation["properties"], propertyNames={"not": {"enum": refused}}
    )
    return schema


def config_schema() -> dict[str, Any]:
    """JSON Schema of a config file as written (or a ``_default.json``): everything present is checked, and what
    the merge may provide is optional."""
    schema = _full_schema()
    defs = schema.pop("$defs")
    after_merge = [*schema.pop("required"), "model.model_path"]
    defs["ModelConfig"].pop("required")
    description = (
        f"One config file as written, or a {DEFAULTS_FILENAME}: gencache deep-merges a sibling {DEFAULTS_FILENAME} "
        "under a config (the file itself wins), so fields it provides may be left out here; after the merge "
        f"{', '.join(after_merge)} are required. Unknown keys are errors everywhere."
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://gencache.invalid/config.schema.json",
        **schema,
        "title": "gencache generation-cache config (format 3)",
        "description": description,
        "$defs": dict(sorted(defs.items())),
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(value: Any) -> str:
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _type(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    if "$ref" in prop:
        return _type(defs[prop["$ref"].removeprefix("#/$defs/")], defs)
    if "enum" in prop or "const" in prop:
        return " \\| ".join(_code(value) for value in prop.get("enum", [prop.get("const")]))
    if "anyOf" in prop:
        return " \\| ".join(_type(option, defs) for option in prop["anyOf"])
    kind = prop.get("type")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}), defs)}"
    if kind == "object":
        return f"object ({prop['title']})" if "title" in prop else "object"
    return {"integer": "int", "string": "str", "boolean": "bool"}.get(kind, kind) if isinstance(kind, str) else "any"


def _rules(prop: Mapping[str, Any]) -> str:
    found: dict[str, None] = {}
    for option in prop.get("anyOf", [prop]):
        for key, op in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<")):
            if key in option:
                found[f"{op} {option[key]}"] = None
        if option.get("minLength") == 1 or option.get("minItems") == 1:
            found["non-empty"] = None
    rules = f" Must be {', '.join(found)}." if found else ""
    if "x-engines" in prop:
        neutral = "" if prop["x-neutral"] is None else f" (others: only at {_code(prop['x-neutral'])})"
        rules += f" Engines: {', '.join(prop['x-engines'])}{neutral}."
    return rules


def _table(schema: Mapping[str, Any], defs: Mapping[str, Any], prefix: str = "") -> list[str]:
    """One row per property of ``schema``: its name, type, default (or required) and description and rules."""
    if not schema.get("properties"):
        return ["None: any key is an error.", ""]
    rows = ["| field | type | default | rule |", "|---|---|---|---|"]
    for name, prop in schema["properties"].items():
        default = "required" if name in schema.get("required", ()) else _code(prop.get("default"))
        rule = _cell(f"{prop.get('description', '')}{_rules(prop)}".strip())
        rows.append(f"| `{prefix}{name}` | {_type(prop, defs)} | {default} | {rule} |")
    return [*rows, ""]


def config_tables() -> str:
    """Every config table, from the schema: the fields, the generation settings, each engine's, dataset's and
    template's options."""
    schema = _full_schema()
    defs = schema["$defs"]
    refused = dict.fromkeys(sorted(LOGIT_FIELDS), "logits and scores are never collected (format 3)")
    lines = ["## Top level", "", *_table(schema, defs), "## `model`", "", *_table(defs["ModelConfig"], defs, "model.")]
    lines += [
        "### `model.generation_kwargs`",
        "",
        *_table(defs["ModelConfig"]["properties"]["generation_kwargs"], defs),
    ]
    lines += ["Refused keys:", "", "| key | why |", "|---|---|"]
    lines += [
        f"| `{k}` | {_cell(v)} |" for k, v in {**refused, **GENERATION_FORBIDDEN, **GENERATION_UNSUPPORTED}.items()
    ]
    lines += ["", "## `engine_options` per engine", ""]
    for name in ENGINE_OPTIONS:
        lines += [f"### `{name}`", "", *_table(defs[f"engine_options.{name}"], defs, "engine_options.")]
    lines += ["## `data_configs[i]`", "", *_table(defs["DataConfig"], defs)]
    datasets = {n: f"Canonical source (when `source` is null): `{r.hub_id}`." for n, r in BUILTIN_DATASETS.items()}
    templates = {
        n: " ".join(f"{type(t).__doc__} Needs {'a' if t.needs_tokenizer else 'no'} tokenizer.".split())
        for n, t in TEMPLATES.items()
    }
    for field, notes in (("data_kwargs", datasets), ("template_kwargs", templates)):
        lines += [f"### `{field}`", ""]
        for name, note in notes.items():
            lines += [f"#### `{name}`", "", note, "", *_table(defs[f"{field}.{name}"], defs)]
    return "\n".join(lines)


def dataset_columns() -> str:
    """One table per built-in dataset: every column it reads, its JSON type, whether required, what for."""
    lines: list[str] = []
    for name, recipe in BUILTIN_DATASETS.items():
        tables = any(column.table for column in recipe.columns)
        header = ["table"] * tables + ["column", "type", "required", "used for"]
        lines += [f"#### `{name}` columns", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for c in recipe.columns:
            cells = [f"`{c.table}`"] * tables + [f"`{c.name}`", _cell(c.type), "yes" if c.required else "no"]
            lines.append("| " + " | ".join([*cells, _cell(c.description)]) + " |")
        lines.append("")
    return "\n".join(lines)


def splice(page: str, generated: str) -> str:
    """``page`` with the text between :data:`BEGIN` and :data:`END` replaced by ``generated``."""
    head, rest = page.split(BEGIN, 1)
    return f"{head}{BEGIN}\n\n{generated}\n{END}{rest.split(END, 1)[1]}"


def documents(root: Path) -> dict[Path, str]:
    """Each generated file under ``root`` and the text it must hold."""
    pages = {CONFIG_PATH: config_tables(), DATASETS_PATH: dataset_columns()}
    out = {SCHEMA_PATH: json.dumps(config_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"}
    return out | {path: splice((root / path).read_text(encoding="utf-8"), text) for path, text in pages.items()}


def main() -> None:
    """Rewrite the generated files under the current directory."""
    for path, text in documents(Path.cwd()).items():
        path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
