"""docs/config.schema.json and the generated parts of docs/config.md and docs/datasets.md, from the config models'
JSON schemas and field descriptions and the recipes' declared columns (``python -m gencache.docgen.config`` rewrites
them under the current directory; a test fails when the committed files differ)."""

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
TITLE = "gencache generation-cache config (format 3)"
ABOUT = (
    f"One config file as written, or a {DEFAULTS_FILENAME}: gencache deep-merges a sibling {DEFAULTS_FILENAME} under "
    "a config (the file itself wins), so fields it provides may be left out here; after the merge data_configs, "
    "output_dir and model.model_path are required. Unknown keys are errors everywhere."
)


def _switch(selector: str, target: str, models: Mapping[str, tuple[type[BaseModel], str]], defs: dict[str, Any]) -> Any:
    """One ``if selector == name then target is model`` rule per ``name: (model, description)``, into ``defs``."""
    for name, (model, about) in models.items():
        defs[f"{target}.{name}"] = {**model.model_json_schema(), "description": " ".join(about.split())}
    then = {name: {"properties": {target: {"$ref": f"#/$defs/{target}.{name}"}}} for name in models}
    return [{"if": {"properties": {selector: {"const": n}}, "required": [selector]}, "then": then[n]} for n in models]


def _full_schema() -> dict[str, Any]:
    """The schema of a merged config; each dataset's, template's and engine's options are chosen by its name
    (built-in datasets are examples, not an enum: plug-ins add names)."""
    schema = CacheConfig.model_json_schema()
    defs = schema["$defs"]
    props = defs["DataConfig"]["properties"]
    props["dataset_name"]["examples"] = sorted(BUILTIN_DATASETS)
    props["template"]["enum"] = sorted(TEMPLATES)
    data_kwargs = {
        name: (recipe.kwargs_model, f"Canonical source (when `source` is null): `{recipe.hub_id}`.")
        for name, recipe in BUILTIN_DATASETS.items()
    }
    template_kwargs = {
        name: (spec.kwargs_model, f"{spec.description} Needs {'a' if spec.needs_tokenizer else 'no'} tokenizer.")
        for name, spec in TEMPLATES.items()
    }
    defs["DataConfig"]["allOf"] = _switch("dataset_name", "data_kwargs", data_kwargs, defs) + _switch(
        "template", "template_kwargs", template_kwargs, defs
    )
    engines = {name: (model, model.__doc__ or "") for name, model in ENGINE_OPTIONS.items()}
    schema["allOf"] = _switch("engine", "engine_options", engines, defs)
    generation = GenerationKwargs.model_json_schema()
    defs.update(generation.pop("$defs", {}))
    refused = sorted(LOGIT_FIELDS | set(GENERATION_FORBIDDEN) | set(GENERATION_UNSUPPORTED))
    defs["ModelConfig"]["properties"]["generation_kwargs"].update(
        properties=generation["properties"], propertyNames={"not": {"enum": refused}}
    )
    return schema


def config_schema() -> dict[str, Any]:
    """JSON Schema of a config file as written, or of a ``_default.json``: what the merge may provide is optional."""
    schema = _full_schema()
    schema.pop("required")
    schema["$defs"]["ModelConfig"].pop("required")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "title": TITLE, "description": ABOUT}


def _md(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table (each cell on one line, its pipes escaped) and the blank line after it."""
    cells = [header, ["---"] * len(header), *rows]
    return [
        *("| " + " | ".join(c.strip().replace("|", "\\|").replace("\n", " ") for c in row) + " |" for row in cells),
        "",
    ]


def _code(value: Any) -> str:
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _type(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    if "$ref" in prop:
        return _type(defs[prop["$ref"].removeprefix("#/$defs/")], defs)
    if "enum" in prop or "const" in prop:
        return " | ".join(_code(value) for value in prop.get("enum", [prop.get("const")]))
    if "anyOf" in prop:
        return " | ".join(_type(option, defs) for option in prop["anyOf"])
    kind = prop.get("type")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}), defs)}"
    if kind == "object":
        return f"object ({prop['title']})" if "title" in prop else "object"
    return {"integer": "int", "string": "str", "boolean": "bool"}.get(kind, kind) if isinstance(kind, str) else "any"


def _rules(prop: Mapping[str, Any]) -> str:
    """The bounds of ``prop`` and, for a generation setting, the engines that honour it."""
    bounds = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}
    found = [
        f"{op} {option[key]}" for option in prop.get("anyOf", [prop]) for key, op in bounds.items() if key in option
    ]
    found += ["non-empty"] * any(o.get("minLength") == 1 or o.get("minItems") == 1 for o in prop.get("anyOf", [prop]))
    rules = f" Must be {', '.join(found)}." if found else ""
    if "x-engines" in prop:
        neutral = "" if prop["x-neutral"] is None else f" (others: only at {_code(prop['x-neutral'])})"
        rules += f" Engines: {', '.join(prop['x-engines'])}{neutral}."
    return rules


def _table(schema: Mapping[str, Any], defs: Mapping[str, Any], prefix: str = "") -> list[str]:
    if not schema.get("properties"):
        return ["None: any key is an error.", ""]
    required = schema.get("required", ())
    rows = []
    for name, prop in schema["properties"].items():
        default = "required" if name in required else _code(prop.get("default"))
        rows.append([f"`{prefix}{name}`", _type(prop, defs), default, f"{prop.get('description', '')}{_rules(prop)}"])
    return _md(["field", "type", "default", "rule"], rows)


def config_tables() -> str:
    schema = _full_schema()
    defs, model = schema["$defs"], schema["$defs"]["ModelConfig"]
    refused = dict.fromkeys(sorted(LOGIT_FIELDS), "logits and scores are never collected (format 3)")
    refused |= {**GENERATION_FORBIDDEN, **GENERATION_UNSUPPORTED}
    lines = ["## Top level", "", *_table(schema, defs), "## `model`", "", *_table(model, defs, "model.")]
    lines += ["### `model.generation_kwargs`", "", *_table(model["properties"]["generation_kwargs"], defs)]
    lines += ["Refused keys:", "", *_md(["key", "why"], [[f"`{key}`", why] for key, why in refused.items()])]
    lines += ["## `data_configs[i]`", "", *_table(defs["DataConfig"], defs)]
    for field, each in (("data_kwargs", "dataset"), ("template_kwargs", "template"), ("engine_options", "engine")):
        lines += [f"## `{field}` of each {each}", ""]
        for key in (key for key in defs if key.startswith(f"{field}.")):
            lines += [f"### `{key.split('.', 1)[1]}`", "", defs[key]["description"], "", *_table(defs[key], defs)]
    return "\n".join(lines)


def dataset_columns() -> str:
    """One table per built-in dataset: every column it reads, its JSON type, whether required, what for."""
    lines: list[str] = []
    for name, recipe in BUILTIN_DATASETS.items():
        tables = any(column.table for column in recipe.columns)
        header = ["table"] * tables + ["column", "type", "required", "used for"]
        rows = [
            [f"`{c.table}`"] * tables + [f"`{c.name}`", c.type, "yes" if c.required else "no", c.description]
            for c in recipe.columns
        ]
        lines += [f"#### `{name}` columns", "", *_md(header, rows)]
    return "\n".join(lines)


def documents(root: Path) -> dict[Path, str]:
    """Each generated file under ``root`` and the text it must hold: pages keep what lies outside the markers."""
    out = {SCHEMA_PATH: json.dumps(config_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"}
    for path, text in {CONFIG_PATH: config_tables(), DATASETS_PATH: dataset_columns()}.items():
        head, rest = (root / path).read_text(encoding="utf-8").split(BEGIN, 1)
        out[path] = f"{head}{BEGIN}\n\n{text}\n{END}{rest.split(END, 1)[1]}"
    return out


if __name__ == "__main__":
    for path, text in documents(Path.cwd()).items():
        path.write_text(text, encoding="utf-8")
