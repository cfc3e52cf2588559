"""A small JSON Schema (draft 2020-12) validator for the keywords docs/config.schema.json uses, so the tests can
check configs against the published schema without another dependency. Unknown keywords fail loudly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description", "default", "examples"}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def errors(instance: Any, schema: Mapping[str, Any] | bool, root: Mapping[str, Any], path: str = "$") -> list[str]:
    """Every way ``instance`` fails ``schema`` (``root`` resolves ``$ref``), as ``path: problem`` lines."""
    if schema is True:
        return []
    if schema is False:
        return [f"{path}: not allowed"]
    found: list[str] = []
    for keyword, value in schema.items():
        found += _keyword(keyword, value, instance, schema, root, path)
    return found


def _keyword(
    keyword: str, value: Any, instance: Any, schema: Mapping[str, Any], root: Mapping[str, Any], path: str
) -> list[str]:
    if keyword in ANNOTATIONS or keyword in ("then",):
        return []
    if keyword == "$ref":
        target: Any = root
        for part in value.removeprefix("#/").split("/"):
            target = target[part]
        return errors(instance, target, root, path)
    if keyword == "type":
        kinds = value if isinstance(value, list) else [value]
        return [] if any(TYPES[k](instance) for k in kinds) else [f"{path}: not of type {value}"]
    if keyword == "enum":
        return [] if any(instance == v and type(instance) is type(v) for v in value) else [f"{path}: not in {value}"]
    if keyword == "const":
        return [] if instance == value and type(instance) is type(value) else [f"{path}: is not {value!r}"]
    if keyword == "anyOf":
        return [] if any(not errors(instance, s, root, path) for s in value) else [f"{path}: matches no anyOf option"]
    if keyword == "allOf":
        return [e for s in value for e in errors(instance, s, root, path)]
    if keyword == "not":
        return [f"{path}: matches a 'not' schema"] if not errors(instance, value, root, path) else []
    if keyword == "if":
        if errors(instance, value, root, path):
            return []
        return errors(instance, schema.get("then", True), root, path)
    if isinstance(instance, dict):
        return _object(keyword, value, instance, schema, root, path)
    if isinstance(instance, list):
        if keyword == "items":
            return [e for i, item in enumerate(instance) for e in errors(item, value, root, f"{path}[{i}]")]
        if keyword == "minItems":
            return [] if len(instance) >= value else [f"{path}: fewer than {value} items"]
    if isinstance(instance, str) and keyword == "minLength":
        return [] if len(instance) >= value else [f"{path}: shorter than {value}"]
    if TYPES["number"](instance):
        limits = {
            "minimum": lambda: instance >= value,
            "maximum": lambda: instance <= value,
            "exclusiveMinimum": lambda: instance > value,
        }
        if keyword in limits:
            return [] if limits[keyword]() else [f"{path}: violates {keyword} {value}"]
    known = {
        "properties",
        "additionalProperties",
        "required",
        "propertyNames",
        "items",
        "minItems",
        "minLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
    }
    if keyword not in known:
        raise NotImplementedError(f"schema keyword {keyword!r} is not supported by this checker")
    return []


def _object(
    keyword: str, value: Any, instance: dict[str, Any], schema: Mapping[str, Any], root: Mapping[str, Any], path: str
) -> list[str]:
    if keyword == "properties":
        return [e for k, s in value.items() if k in instance for e in errors(instance[k], s, root, f"{path}.{k}")]
    if keyword == "additionalProperties":
        extra = [k for k in instance if k not in schema.get("properties", {})]
        return [e for k in extra for e in errors(instance[k], value, root, f"{path}.{k}")]
    if keyword == "required":
        return [f"{path}: '{k}' is required" for k in value if k not in instance]
    if keyword == "propertyNames":
        return [e for k in instance for e in errors(k, value, root, f"{path} key {k!r}")]
    return []
