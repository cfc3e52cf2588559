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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gencache.config.documents import parse_set_value, read_merged_config
from gencache.core.errors import ConfigError, GencacheError, Problem, raise_problems

if TYPE_CHECKING:
    from gencache.config import CacheConfig, DataConfig


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


@dataclass
class CheckedConfig:
    """A config file with its overrides, validated: the config, or every problem (one per field) and what
    still validates on its own (the data configs by index, the output directory), which can be checked anyway."""

    config: CacheConfig | None
    problems: list[Problem] = field(default_factory=list)
    data_configs: list[tuple[int, DataConfig]] = field(default_factory=list)
    output_dir: str | None = None


def _validation_lines(candidate: Any, origin: str) -> list[tuple[tuple[str | int, ...], str]]:
    """``(location, line)`` of every problem of ``candidate`` (empty when it validates)."""
    from pydantic import ValidationError

    from gencache.config.messages import collect_problems, problem_lines
    from gencache.config.models import CacheConfig

    if not isinstance(candidate, dict):
        from gencache.config.describe import type_name

        return [((), f"the config must be an object, not {type_name(candidate)}")]
    try:
        CacheConfig.model_validate(candidate)
    except ValidationError as exc:
        return problem_lines(collect_problems(exc, CacheConfig))
    return []


def _steps(overrides: Overrides, problems: list[Problem]) -> list[Override]:
    steps: list[Override] = []
    if overrides.output_dir is not None:
        from gencache.run.check_steps import check_utf8_paths

        try:
            check_utf8_paths({"--output-dir path": overrides.output_dir})
            steps.append(Override(f"--output-dir {overrides.output_dir}", ("output_dir",), overrides.output_dir))
        except ConfigError as error:
            problems.append(Problem("config", "--output-dir", error))
    for text in overrides.sets:
        try:
            steps.append(parse_set(text))
        except ConfigError as error:
            problems.append(Problem("config", f"--set {text}", error))
    return steps


def check_config(path: str | os.PathLike[str], overrides: Overrides | None = None) -> CheckedConfig:
    """Read ``path`` (with its ``_default.json``), apply ``overrides`` and validate the result, collecting every
    problem: each invalid field is its own problem, named after the override that introduced it when one did."""
    overrides = overrides or Overrides()
    problems: list[Problem] = []
    limit = overrides.limit
    if limit is not None and (isinstance(limit, bool) or limit < 1):
        limit = None
        problems.append(
            Problem(
                "config",
                "--limit",
                ConfigError(f"--limit must be a positive number of samples, got {overrides.limit}."),
            )
        )
    try:
        raw, origin = read_merged_config(Path(path))
    except ConfigError as error:
        return CheckedConfig(None, [Problem("config", str(path), error), *problems])
    steps = _steps(overrides, problems)
    current = copy.deepcopy(raw)
    seen = {line for _, line in _validation_lines(current, origin)} if steps else set()
    introduced: dict[str, str] = {}
    for step in steps:
        label = step.text if step.text.startswith("--output-dir") else f"--set {step.text}"
        try:
            apply_override(current, step)
        except ConfigError as error:
            problems.append(Problem("config", label, error))
            continue
        for _, line in _validation_lines(current, origin):
            if line not in seen:
                introduced.setdefault(line, label)
                seen.add(line)
    if limit is not None:
        _limit(current, limit)
    from gencache.config.messages import format_loc

    for loc, line in _validation_lines(current, origin):
        named = introduced.get(line)
        where = format_loc(loc) or named or origin
        problems.append(Problem("config", where, ConfigError(f"{named or origin}: {line}")))
    if not problems:
        from gencache.config.models import parse_config

        return CheckedConfig(parse_config(current, origin=origin))
    return _partial(current, problems)


def _partial(current: Any, problems: list[Problem]) -> CheckedConfig:
    """What of an invalid config validates on its own: the data configs no problem names, the output directory."""
    from gencache.config.models import parse_data_configs

    result = CheckedConfig(None, problems)
    if not isinstance(current, dict):
        return result
    named = {problem.location for problem in problems}
    items = current.get("data_configs")
    if isinstance(items, list) and "data_configs" not in named:
        for index, item in enumerate(items):
            prefix = f"data_configs[{index}]"
            if any(where == prefix or where.startswith((prefix + ".", prefix + "[")) for where in named):
                continue
            try:
                result.data_configs.append((index, parse_data_configs([item])[0]))
            except GencacheError:
                continue
    output_dir = current.get("output_dir")
    if isinstance(output_dir, str) and output_dir and "output_dir" not in named:
        result.output_dir = output_dir
    return result


def load_with_overrides(path: str | os.PathLike[str], overrides: Overrides) -> CacheConfig:
    """Load ``path`` with ``overrides`` applied and validated; without overrides this is :func:`load_config`.
    One problem is raised as it is, several as :class:`gencache.core.errors.InputProblems`."""
    checked = check_config(path, overrides)
    raise_problems(checked.problems)
    assert checked.config is not None
    return checked.config


__all__ = [
    "CheckedConfig",
    "Override",
    "Overrides",
    "apply_override",
    "check_config",
    "load_with_overrides",
    "parse_set",
]
