"""Command-line overrides of a config file: ``--set PATH=VALUE``, ``--output-dir`` and ``--limit``.

``--set model.generation_kwargs.max_new_tokens=64`` replaces one field, addressed by a dotted path (list items by
their index: ``data_configs.0.num_samples``); the value is JSON (``8``, ``true``, ``null``, ``"text"``,
``{"a": 1}``) or, when it is not valid JSON, the plain string. ``--output-dir DIR`` is ``--set output_dir=DIR``.
``--limit N`` caps every data config's ``num_samples`` at N; the recipes draw samples in order, so the selection is
a prefix of the full run's. Overrides apply to the merged file (``_default.json`` under the config) in the order
given, and the result is validated once, exactly like a file; a problem is named after the override whose path
holds its location (the last one applied, so ``--set model={...}`` owns every problem beneath ``model``; an
object an override created on its way, such as a misspelt ``model.generation_kwrgs``, is its too) or, in a
field checked against a sibling, the sibling's (``--set engine=vllm`` owns a problem of ``engine_options``), and
after the file when no override's does. Problems the later checks find (the data files', the teacher's) are named
the same way (:func:`name_origins`).
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
    the option and text that gave it, which a problem it introduces is named after (:attr:`label`)."""

    text: str
    path: tuple[str | int, ...]
    value: Any
    option: str = "--set"
    created: tuple[str | int, ...] | None = None
    """Once applied (:func:`apply_override`): the first object on the way to :attr:`path` that this override
    created because the config had none there (``model.generation_kwrgs`` of ``--set
    model.generation_kwrgs.max_new_tokens=8``); None when every object on the way was the config's."""

    @property
    def owned(self) -> tuple[str | int, ...]:
        """The part of the config this override wrote: a problem at or beneath it is this override's."""
        return self.created if self.created is not None else self.path

    @property
    def label(self) -> str:
        """How a problem names this override: ``--set PATH=VALUE`` or ``--output-dir DIR``."""
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


def apply_override(raw: dict[str, Any], override: Override) -> Override:
    """Set ``override.path`` in ``raw`` (in place), creating missing objects on the way; return the override with
    the first object it created (:attr:`Override.created`)."""
    node: Any = raw
    created: tuple[str | int, ...] | None = None
    for depth, part in enumerate(override.path[:-1]):
        where = _describe(override.path[: depth + 1])
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                size = len(node) if isinstance(node, list) else 0
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
    applied: list[Override] = field(default_factory=list)
    """The overrides as applied (:func:`apply_override`), which :func:`name_origins` names later problems after."""


def _validation_lines(candidate: dict[str, Any]) -> tuple[CacheConfig | None, list[tuple[Loc, str]]]:
    """``candidate`` validated: the config and no lines when it validates, else None and the ``(location, line)``
    of every problem."""
    from pydantic import ValidationError

    from gencache.config.messages import collect_problems, problem_lines
    from gencache.config.models import CacheConfig

    try:
        return CacheConfig.model_validate(candidate), []
    except ValidationError as exc:
        return None, problem_lines(collect_problems(exc, CacheConfig))


def _checked_limit(limit: int | None, problems: list[Problem]) -> int | None:
    """``--limit`` when it is a positive number, else None with its problem added to ``problems``."""
    if limit is not None and (isinstance(limit, bool) or limit < 1):
        message = f"--limit must be a positive number of samples, got {limit}."
        problems.append(Problem("config", "--limit", ConfigError(message), origin="--limit"))
        return None
    return limit


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
    """Refuse a path that is not valid UTF-8 (it could not be recorded in the artifact's JSON)."""
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
    """The override a problem at ``loc`` comes from, None when it is the file's own: the last applied one whose
    :attr:`~Override.owned` part is ``loc`` or a prefix of it (it wrote that value, or created the object holding
    it, last: ``--set model.generation_kwrgs.max_new_tokens=8`` owns the unknown field ``model.generation_kwrgs``);
    else, in a field whose rule
    reads a sibling (:data:`~gencache.config.names.READS_SIBLING`: ``engine_options`` reads ``engine``), the one
    that wrote the sibling."""
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
    problem: each invalid field is its own problem, named after the override whose path holds it (:func:`origin_of`),
    else after the file."""
    overrides = overrides or Overrides()
    problems: list[Problem] = []
    limit = _checked_limit(overrides.limit, problems)
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
    if limit is not None:
        _limit(current, limit)
    from gencache.config.messages import format_loc

    config, lines = _validation_lines(current)
    for loc, line in lines:
        source = origin_of(loc, applied)
        named = source.label if source is not None else origin
        problems.append(Problem("config", format_loc(loc) or named, ConfigError(f"{named}: {line}"), origin=named))
    if config is not None and not problems:
        return CheckedConfig(config, applied=applied)
    result = _partial(current, problems, [loc for loc, _ in lines])
    result.applied = applied
    return result


def name_origins(problems: Sequence[Problem], applied: Sequence[Override]) -> list[Problem]:
    """``problems`` found once the config validated (its data files', the teacher's), each whose location an
    override wrote (:func:`origin_of`) named after it like a problem of the config: its message starts with the
    override's label, which is its :attr:`~gencache.core.errors.Problem.origin` too."""
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


def _partial(current: dict[str, Any], problems: list[Problem], locs: Sequence[Loc]) -> CheckedConfig:
    """What of an invalid config validates on its own: the data configs and the output directory that no problem's
    location (``locs``) falls in."""
    from gencache.config.models import parse_data_configs

    result = CheckedConfig(None, problems)
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
