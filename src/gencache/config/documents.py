"""Reading config documents: the one strict JSON reader for config files, ``_default.json`` and ``--set`` values,
and the ``_default.json`` merge; fields are validated by :mod:`gencache.config.models`."""

from __future__ import annotations

import copy
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gencache.config.messages import show
from gencache.core.errors import ConfigError

DEFAULTS_FILENAME = "_default.json"
"""The sibling file whose fields fill in what a config file leaves out (deep-merged under it)."""


def merge_defaults(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``defaults`` under ``config`` without modifying either: where both hold an object the merge
    recurses; otherwise the config's value wins (scalars, lists, an explicit ``null``, a type mismatch)."""
    merged: dict[str, Any] = copy.deepcopy(dict(config))
    for key, default in defaults.items():
        if key not in merged:
            merged[key] = copy.deepcopy(default)
        elif isinstance(merged[key], Mapping) and isinstance(default, Mapping):
            merged[key] = merge_defaults(merged[key], default)
    return merged


MAX_JSON_DEPTH = 64
"""How deeply a config document (or a ``--set`` value) may nest objects and lists: far beyond any real config,
far below Python's recursion limit."""


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not valid JSON")


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} in one object")
        out[key] = value
    return out


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        value = list(value.values())
    return 1 + max(map(_depth, value), default=0) if isinstance(value, list) else 0


def parse_json_text(text: str, origin: str) -> Any:
    """Parse config JSON strictly (config files, ``_default.json`` and ``--set`` values alike): no duplicate keys,
    no NaN/Infinity, at most :data:`MAX_JSON_DEPTH` levels; a :class:`ConfigError` names ``origin``."""
    too_deep = ConfigError(f"{origin}: nested more than {MAX_JSON_DEPTH} levels deep; a config never needs that.")
    try:
        value = json.loads(text, object_pairs_hook=_unique_object, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{origin}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise too_deep from None
    except ValueError as exc:
        raise ConfigError(f"{origin}: invalid JSON: {exc}") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise too_deep
    return value


def parse_set_value(text: str, origin: str) -> Any:
    """A ``--set`` value: JSON read as strictly as a config file, or ``text`` itself when it is not JSON at all."""
    try:
        json.loads(text)
    except RecursionError:
        pass
    except ValueError:
        return text
    return parse_json_text(text, origin)


def read_config_document(path: Path, what: str) -> dict[str, Any]:
    """Read one config document (a config file or a ``_default.json``): a regular UTF-8 file holding a strict JSON
    object (:func:`parse_json_text`). A FIFO, a device or a directory is refused before it is opened."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise ConfigError(f"{what} {path} is not a regular file (a directory or a pipe?); give a JSON file.")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    value = parse_json_text(text, str(path))
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: the config must be a JSON object (got {show(value)})")
    return value


def read_merged_config(path: str | os.PathLike[str]) -> tuple[dict[str, Any], str]:
    """The config file at ``path`` with its sibling ``_default.json`` (if any) deep-merged under it, unvalidated,
    and the origin that errors name. The one reader of config files (``load_config`` and the overrides use it)."""
    config_path = Path(path)
    raw = read_config_document(config_path, "config file")
    defaults_path = config_path.parent / DEFAULTS_FILENAME
    origin = str(config_path)
    if defaults_path.is_file() and config_path.name != DEFAULTS_FILENAME:
        raw = merge_defaults(raw, read_config_document(defaults_path, "defaults file"))
        origin = f"{config_path} (merged with {defaults_path.name})"
    return raw, origin
