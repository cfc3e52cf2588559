"""Command-line overrides of a config file: ``--set PATH=VALUE``, ``--output-dir`` and ``--limit``.

``--set model.generation_kwargs.max_new_tokens=64`` replaces one field, addressed by a dotted path (list items by
their index: ``data_configs.0.num_samples``); the value is JSON (``8``, ``true``, ``null``, ``"text"``,
``{"a": 1}``) or, when it is not valid JSON, the plain string. ``--output-dir DIR`` is ``--set output_dir=DIR``.
``--limit N`` caps every data config's ``num_samples`` at N; the recipes draw samples in order, so the selection is
a prefix of the full run's. Overrides apply to the merged file (``_default.json`` under the config) in the order
given, and the result is validated exactly like a file; a problem that an override introduces names it.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gencache.config import CacheConfig, load_config, parse_config, parse_set_value, read_merged_config
from gencache.errors import ConfigError


@dataclass(frozen=True)
class Override:
    """One ``--set``: the dotted path split into keys and list indices, and the decoded value."""

    text: str
    path: tuple[str | int, ...]
    value: Any


@dataclass(frozen=True)
class Overrides:
    """Everything given on the command line that changes the config (recorded in ``resolved_config.json``)."""

    sets: tuple[str, ...] = ()
    output_dir: str | None = None
    limit: int | None = None

    def __bool__(self) -> bool:
        return bool(self.sets) or self.output_dir is not None or self.limit is not None

    def to_json(self) -> dict[str, Any]:
        return {"set": list(self.sets), "output_dir": self.output_dir, "limit": self.limit}


def parse_set(text: str) -> Override:
    """``PATH=VALUE`` to an :class:`Override` (see the module docstring)."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ConfigError(f"--set {text!r} must look like PATH=VALUE, for example --set gen_batch_size=8.")
    parts = name.split(".")
    if any(not part for part in parts):
        raise ConfigError(f"--set {text!r}: the path {name!r} has an empty part; separate field names by single dots.")
    path = tuple(int(part) if part.isdigit() else part for part in parts)
    return Override(text, path, parse_set_value(raw, f"--set {text}"))


def _describe(path: Sequence[str | int]) -> str:
    return ".".join(str(p) for p in path) or "<config>"


def apply_override(raw: dict[str, Any], override: Override) -> None:
    """Set ``override.path`` in ``raw`` (in place), creating missing objects on the way."""
    node: Any = raw
    for depth, part in enumerate(override.path[:-1]):
        where = _describe(override.path[: depth + 1])
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                size = len(node) if isinstance(node, list) else 0
                raise ConfigError(f"--set {override.text}: {where} does not exist (the list has {size} items).")
            node = node[part]
        else:
            if not isinstance(node, dict):
                raise ConfigError(f"--set {override.text}: {_describe(override.path[:depth])} is not an object.")
            node = node.setdefault(part, {})
    last = override.path[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise ConfigError(f"--set {override.text}: {_describe(override.path)} does not exist.")
        node[last] = override.value
    else:
        if not isinstance(node, dict):
            raise ConfigError(f"--set {override.text}: {_describe(override.path[:-1])} is not an object.")
        node[last] = override.value


def _limit(raw: dict[str, Any], limit: int) -> None:
    configs = raw.get("data_configs")
    if not isinstance(configs, list):
        return
    for data_config in configs:
        if isinstance(data_config, dict):
            current = data_config.get("num_samples")
            if isinstance(current, int) and not isinstance(current, bool) and current > limit:
                data_config["num_samples"] = limit


def load_with_overrides(path: str | os.PathLike[str], overrides: Overrides) -> CacheConfig:
    """Load ``path`` with ``overrides`` applied and validated; without overrides this is :func:`load_config`."""
    if not overrides:
        return load_config(path)
    if overrides.limit is not None and (isinstance(overrides.limit, bool) or overrides.limit < 1):
        raise ConfigError(f"--limit must be a positive number of samples, got {overrides.limit}.")
    if overrides.output_dir is not None:
        from gencache.run_checks import check_utf8_paths

        check_utf8_paths({"--output-dir path": overrides.output_dir})
    raw, origin = read_merged_config(Path(path))
    steps = [parse_set(text) for text in overrides.sets]
    if overrides.output_dir is not None:
        steps.insert(0, Override(f"--output-dir {overrides.output_dir}", ("output_dir",), overrides.output_dir))

    def problem(candidate: dict[str, Any]) -> str | None:
        try:
            parse_config(candidate, origin=origin)
        except ConfigError as error:
            return str(error)
        return None

    current = copy.deepcopy(raw)
    before = problem(current) if steps else None
    for step in steps:
        apply_override(current, step)
        after = problem(current)
        if after is not None and after != before:
            label = step.text if step.text.startswith("--output-dir") else f"--set {step.text}"
            raise ConfigError(f"{label}: {after.removeprefix(origin + ': ')}")
        before = after
    if overrides.limit is not None:
        _limit(current, overrides.limit)
    return parse_config(current, origin=origin)


__all__ = ["Override", "Overrides", "apply_override", "load_with_overrides", "parse_set"]
