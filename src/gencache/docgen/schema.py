"""The JSON Schema of a config file as written (``docs/config.schema.json``), built from the config models, the
engine options and the dataset and template registries. :mod:`gencache.docgen.config` writes it and the reference page.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from gencache.config import DEFAULTS_FILENAME, CacheConfig
from gencache.config.engines import ENGINE_OPTIONS
from gencache.config.generation import GENERATION_FORBIDDEN, GENERATION_UNSUPPORTED, LOGIT_FIELDS

SCHEMA_ID = "https://gencache.invalid/config.schema.json"


# -- schema -----------------------------------------------------------------------------------------------
def _merge_defs(target: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    for name, definition in schema.pop("$defs", {}).items():
        existing = target.get(name)
        if existing is not None and existing != definition:
            raise RuntimeError(f"Two different JSON schema definitions are both named {name!r}.")
        target[name] = definition
    return schema


def factory_default(info: FieldInfo) -> Any:
    """The JSON value of a field's ``default_factory`` default."""
    return to_jsonable_python(info.default_factory())  # type: ignore[call-arg,misc]


def _kwargs_schema(model: type[BaseModel], defs: dict[str, Any], def_name: str) -> str:
    schema = _merge_defs(defs, model.model_json_schema(ref_template="#/$defs/{model}"))
    for name, info in model.model_fields.items():
        prop = schema.get("properties", {}).get(name)
        if isinstance(prop, dict) and info.default_factory is not None and "default" not in prop:
            prop["default"] = factory_default(info)
    schema.setdefault("additionalProperties", False)
    defs[def_name] = schema
    return f"#/$defs/{def_name}"


def _switch(selector: str, refs: Mapping[str, str], target: str) -> list[dict[str, Any]]:
    return [
        {
            "if": {"properties": {selector: {"const": name}}, "required": [selector]},
            "then": {"properties": {target: {"$ref": ref}}},
        }
        for name, ref in refs.items()
    ]


def config_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a config file as written (a config relying on its ``_default.json``, or the
    ``_default.json`` itself): what the merge may provide is optional, everything present is checked.

    Generated from the pydantic models; templates are enumerated from the registry, built-in dataset names are
    listed as examples (plug-ins add others), and ``data_kwargs`` / ``template_kwargs`` are validated against the
    chosen built-in dataset's and template's model.
    """
    from gencache.data.prompts import TEMPLATES
    from gencache.data.recipes import BUILTIN_DATASETS as DATASETS

    schema = CacheConfig.model_json_schema(ref_template="#/$defs/{model}")
    defs: dict[str, Any] = schema.pop("$defs", {})

    data_refs = {
        name: _kwargs_schema(recipe.kwargs_model, defs, f"data_kwargs.{name}") for name, recipe in DATASETS.items()
    }
    template_refs = {
        name: _kwargs_schema(spec.kwargs_model, defs, f"template_kwargs.{name}") for name, spec in TEMPLATES.items()
    }

    data_config = defs["DataConfig"]
    props = data_config["properties"]
    props["dataset_name"]["examples"] = sorted(DATASETS)  # not an enum: plug-ins add names
    props["template"]["enum"] = sorted(TEMPLATES)
    props["data_kwargs"].pop("default", None)
    props["template_kwargs"].pop("default", None)
    data_config["allOf"] = _switch("dataset_name", data_refs, "data_kwargs") + _switch(
        "template", template_refs, "template_kwargs"
    )

    engine_refs = {
        name: _kwargs_schema(model, defs, f"engine_options.{name}") for name, model in ENGINE_OPTIONS.items()
    }
    schema["properties"]["engine_options"].pop("default", None)
    schema["allOf"] = _switch("engine", engine_refs, "engine_options")

    generation = defs["ModelConfig"]["properties"]["generation_kwargs"]
    generation["propertyNames"] = {
        "not": {"enum": sorted(LOGIT_FIELDS | set(GENERATION_FORBIDDEN) | set(GENERATION_UNSUPPORTED))}
    }
    generation["properties"] = {
        "max_new_tokens": {
            "anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}],
            "description": "Tokens to generate per answer. Required here or in the teacher's generation_config.json; "
            "null unsets a value inherited from _default.json.",
        },
        "do_sample": {"type": ["boolean", "null"], "description": "Sampling instead of greedy decoding."},
        "num_return_sequences": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]},
        "stop_strings": {
            "anyOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
                {"type": "null"},
            ]
        },
        "eos_token_id": {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
                {"type": "null"},
            ]
        },
    }

    # A file as written: anything may come from a sibling _default.json (the model block most often), so nothing at
    # the top level or in model is required here; gencache checks the merged config. A data config is never
    # merged (lists replace whole), so its own required fields stay required.
    after_merge = schema.pop("required", [])
    defs["ModelConfig"].pop("required", None)
    out: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID}
    out.update(schema)
    out["title"] = "gencache generation-cache config (format 3)"
    out["description"] = (
        f"One config file as written, or a {DEFAULTS_FILENAME}: gencache deep-merges a sibling {DEFAULTS_FILENAME} "
        "under a config (the file itself wins), so fields it provides may be left out here; after the merge "
        f"{', '.join(after_merge)} and model.model_path are required. Unknown keys are errors everywhere."
    )
    out["$defs"] = dict(sorted(defs.items()))
    return out


# -- markdown ---------------------------------------------------------------------------------------------
