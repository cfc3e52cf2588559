"""Command-line overrides of a config file: ``--set PATH=VALUE``, ``--output-dir`` and ``--limit``.

Overrides apply to the merged file in the order given and the result is validated once, like a file. A problem is
named after the override that wrote its location (the last one, so ``--set model={...}`` owns every problem beneath
``model``), or that wrote the sibling a field is checked against, else after the file.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gencache.config.documents import parse_set_value, read_merged_config
from gencache.core.errors import ConfigError, GencacheError, Problem

if TYPE_CHECKING:
    from gencache.config import CacheConfig, DataConfig
    from gencache.config.messages import Loc


@dataclass(frozen=True)
class Override:
    """One ``--set`` (or ``--output-dir``): the dotted path split into keys and list indices, the decoded value, and
    the option and text that gave it."""

    text: str
    path: tuple[str | int, ...]
    value: Any
    option: str = "--set"
    created: tuple[str | int, ...] | None = None
    """Once applied: the first object on the way to :attr:`path` that the config lacked (a misspelt
    ``model.generation_kwrgs``), which this override then owns."""

    @property
    def owned(self) -> tuple[str | int, ...]:
        """The part of the config this override wrote: a problem at or beneath it is this override's."""
        return self.created if self.created is not None else self.path

    @property
    def label(self) -> str:
        return f"{self.option} {self.text}"


@dataclass(frozen=True)
class Overrides:
    """Everything given on the command line that changes the config (recorded in ``resolved_config.json``)."""

    sets: tuple[str, ...] = ()
    output_dir: str | None = None
    limit: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"set": list(self.sets), "output_dir": self.output_dir, "limit": self.limit}


def parse_set(text: str) -> Override:
    """``PATH=VALUE`` to an :class:`Override`: list items by their index, the value JSON or else the plain string."""
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


def apply_override(raw: dict[str, Any], override: Override) -> Override:
    """Set ``override.path`` in ``raw`` (in place), creating missing objects on the way."""
    node: Any = raw
    created: tuple[str | int, ...] | None = None
    for depth, part in enumerate(override.path[:-1]):
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                size = len(node) if isinstance(node, list) else 0
                where = _describe(override.path[: depth + 1])
                raise ConfigError(f"{override.label}: {where} does not exist (the list has {size} items).")
            node = node[part]
        else:
            if not isinstance(node, dict):
                raise ConfigError(f"{override.label}: {_describe(override.path[:depth])} is not an object.")
            if part not in node and created is None:
                created = override.path[: depth + 1]
            node = node.setdefault(part, {})
    last = override.path[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise ConfigError(f"{override.label}: {_describe(override.path)} does not exist.")
        node[last] = override.value
    else:
        if not isinstance(node, dict):
            raise ConfigError(f"{override.label}: {_describe(override.path[:-1])} is not an object.")
        node[last] = override.value
    return replace(override, created=created)


@dataclass
class CheckedConfig:
    """A config file with its overrides, validated: the config, or every problem and what still validates on its
    own (the data configs by index, the output directory), which can be checked anyway."""

    config: CacheConfig | None
    problems: list[Problem] = field(default_factory=list)
    data_configs: list[tuple[int, DataConfig]] = field(default_factory=list)
    output_dir: str | None = None
    applied: list[Override] = field(default_factory=list)


def _steps(overrides: Overrides, problems: list[Problem]) -> list[Override]:
    steps: list[Override] = []
    if overrides.output_dir is not None:
        try:
            check_utf8_paths({"--output-dir path": overrides.output_dir})
            steps.append(Override(overrides.output_dir, ("output_dir",), overrides.output_dir, "--output-dir"))
        except ConfigError as error:
            problems.append(Problem("config", "--output-dir", error, origin="--output-dir"))
    for text in overrides.sets:
        try:
            steps.append(parse_set(text))
        except ConfigError as error:
            problems.append(Problem("config", f"--set {text}", error, origin=f"--set {text}"))
    return steps


def check_utf8_paths(paths: Mapping[str, str]) -> None:
    """Refuse a path that is not valid UTF-8: the artifact's JSON could not record it."""
    for what, value in paths.items():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            shown = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise ConfigError(
                f"The {what} {shown} is not valid UTF-8, so the artifact could not record it; rename it or run "
                "from a directory whose path is UTF-8."
            ) from None


def _holder(loc: Loc, applied: Sequence[Override]) -> Override | None:
    for override in reversed(applied):
        if loc[: len(override.owned)] == override.owned:
            return override
    return None


def origin_of(loc: Loc, applied: Sequence[Override]) -> Override | None:
    """The override a problem at ``loc`` comes from (see the module docstring), None when it is the file's own."""
    from gencache.config.names import READS_SIBLING

    holder = _holder(loc, applied)
    if holder is not None:
        return holder
    for depth, part in enumerate(loc):
        if isinstance(part, str) and part in READS_SIBLING:
            return _holder((*loc[:depth], READS_SIBLING[part]), applied)
    return None


def check_config(path: str | os.PathLike[str], overrides: Overrides | None = None) -> CheckedConfig:
    """Read ``path`` (with its ``_default.json``), apply ``overrides`` and validate the result once, collecting every
    problem (one per invalid field)."""
    from pydantic import ValidationError

    from gencache.config.messages import collect_problems, format_loc, problem_lines
    from gencache.config.models import CacheConfig

    overrides = overrides or Overrides()
    problems: list[Problem] = []
    limit = overrides.limit
    if limit is not None and (isinstance(limit, bool) or limit < 1):
        message = f"--limit must be a positive number of samples, got {limit}."
        problems.append(Problem("config", "--limit", ConfigError(message), origin="--limit"))
        limit = None
    try:
        raw, origin = read_merged_config(Path(path))
    except ConfigError as error:
        return CheckedConfig(None, [Problem("config", str(path), error, origin=str(path)), *problems])
    current = copy.deepcopy(raw)
    applied: list[Override] = []
    for step in _steps(overrides, problems):
        try:
            applied.append(apply_override(current, step))
        except ConfigError as error:
            problems.append(Problem("config", step.label, error, origin=step.label))
    configs = current.get("data_configs")
    if limit is not None and isinstance(configs, list):  # --limit caps every data config's num_samples
        for data_config in configs:
            count = data_config.get("num_samples") if isinstance(data_config, dict) else None
            if isinstance(count, int) and not isinstance(count, bool) and count > limit:
                data_config["num_samples"] = limit
    config: CacheConfig | None = None
    lines: list[tuple[Loc, str]] = []
    try:
        config = CacheConfig.model_validate(current)
    except ValidationError as exc:
        lines = problem_lines(collect_problems(exc, CacheConfig))
    for loc, line in lines:
        source = origin_of(loc, applied)
        named = source.label if source is not None else origin
        problems.append(Problem("config", format_loc(loc) or named, ConfigError(f"{named}: {line}"), origin=named))
    if config is not None and not problems:
        return CheckedConfig(config, applied=applied)
    return _partial(current, problems, [loc for loc, _ in lines], applied)


def name_origins(problems: Sequence[Problem], applied: Sequence[Override]) -> list[Problem]:
    """``problems`` found once the config validated (its data files', the teacher's), each named after the override
    that wrote its location (:func:`origin_of`), like a problem of the config."""
    from gencache.config.messages import parse_loc
    from gencache.core.errors import reworded

    named: list[Problem] = []
    for problem in problems:
        source = None if problem.origin is not None else origin_of(parse_loc(problem.location), applied)
        if source is None:
            named.append(problem)
            continue
        error = reworded(problem.error, f"{source.label}: {problem.error}")
        named.append(Problem(problem.check, problem.location, error, origin=source.label))
    return named


def _partial(
    current: dict[str, Any], problems: list[Problem], locs: Sequence[Loc], applied: list[Override]
) -> CheckedConfig:
    """What of an invalid config validates on its own: the data configs and output directory no problem is in."""
    from gencache.config.models import parse_data_configs

    result = CheckedConfig(None, problems, applied=applied)
    items = current.get("data_configs")
    if isinstance(items, list) and ("data_configs",) not in locs:
        for index, item in enumerate(items):
            if any(loc[:2] == ("data_configs", index) for loc in locs):
                continue
            try:
                result.data_configs.append((index, parse_data_configs([item])[0]))
            except GencacheError:
                continue
    output_dir = current.get("output_dir")
    if isinstance(output_dir, str) and output_dir and ("output_dir",) not in locs:
        result.output_dir = output_dir
    return result
