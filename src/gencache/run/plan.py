"""What a run publishes, decided once: its config's command-line overrides, and its targets: the one artifact, the
shard of ``--shard I/N`` or of a torchrun/SLURM rank, or every shard of ``--shards N``, each of which the same run may
already have published. A problem is named after the override that wrote its location (the last one, so ``--set
model={...}`` owns every problem beneath ``model``), or that wrote the sibling a field is checked against.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gencache.artifact.names import shard_dir_name, shard_of
from gencache.artifact.reader import is_published
from gencache.artifact.shards import find_shards, split_conflict
from gencache.artifact.store import Location, exists, location
from gencache.config.documents import parse_set_value
from gencache.config.messages import Loc
from gencache.config.models import CacheConfig, config_to_json
from gencache.config.names import READS_SIBLING
from gencache.core.canonical import json_digest
from gencache.core.errors import (
    ConfigError,
    FormatError,
    GencacheError,
    OutputExistsError,
    Problem,
    ShardError,
    raise_problems,
)


# -- the config and its overrides -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Overrides:
    """Everything given on the command line that changes the config (recorded in ``resolved_config.json``)."""

    sets: tuple[str, ...] = ()
    output_dir: str | None = None
    limit: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"set": list(self.sets), "output_dir": self.output_dir, "limit": self.limit}


@dataclass(frozen=True)
class Override:
    """One ``--set`` (or ``--output-dir``): its option and text, the dotted path split into keys and list indices, the
    decoded value, and once applied, the part of the config it wrote (a problem at or beneath it is this override's):
    its path, or the first object on the way that the config lacked (a misspelt ``model.generation_kwrgs``)."""

    label: str
    path: Loc
    value: Any
    owned: Loc = ()


def parse_set(text: str) -> Override:
    """``PATH=VALUE`` to an :class:`Override`: list items by their index, the value JSON or else the plain string."""
    name, sep, raw = text.partition("=")
    parts = name.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(f"--set {text!r} must look like PATH=VALUE with a dotted PATH, for example --set seed=1.")
    path = tuple(int(part) if part.isdigit() else part for part in parts)
    return Override(f"--set {text}", path, parse_set_value(raw, f"--set {text}"))


def apply_override(raw: dict[str, Any], override: Override) -> Override:
    """Set ``override.path`` in ``raw`` (in place), creating missing objects on the way."""
    node: Any = raw
    owned = override.path
    for depth, part in enumerate(override.path):
        where = ".".join(str(p) for p in override.path[: depth + 1])
        if isinstance(part, int) and not (isinstance(node, list) and part < len(node)):
            size = len(node) if isinstance(node, list) else 0
            raise ConfigError(f"{override.label}: {where} does not exist (the list has {size} items).")
        if isinstance(part, str) and not isinstance(node, dict):
            above = ".".join(str(p) for p in override.path[:depth]) or "<config>"
            raise ConfigError(f"{override.label}: {above} is not an object.")
        if depth == len(override.path) - 1:
            node[part] = override.value
        else:
            if isinstance(part, str) and part not in node and owned == override.path:
                owned = override.path[: depth + 1]
            node = node[part] if isinstance(part, int) else node.setdefault(part, {})
    return replace(override, owned=owned)


def origin_of(loc: Loc, applied: Sequence[Override]) -> str | None:
    """The override a problem at ``loc`` comes from (see the module docstring), None when it is the file's own."""
    sibling = next(((*loc[:d], READS_SIBLING[p]) for d, p in enumerate(loc) if p in READS_SIBLING), None)
    for place in (loc, sibling):
        found = next((o.label for o in reversed(applied) if place and place[: len(o.owned)] == o.owned), None)
        if found is not None:
            return found
    return None


def check_utf8(what: str, path: str) -> None:
    """Refuse a path that is not valid UTF-8: the artifact's JSON could not record it."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise ConfigError(f"The {what} {shown} is not valid UTF-8; rename it: the artifact records it.") from None


# -- shards: --shard I/N, torchrun and SLURM ranks, --shards N ---------------------------------------------------
@dataclass(frozen=True)
class ShardSpec:
    """Shard ``index`` of ``count`` (zero-based), and where the numbers came from."""

    index: int
    count: int
    origin: str = "--shard"
    local_rank: int | None = None

    def select(self, keys: Iterable[str]) -> list[str]:
        """The keys this shard generates (``int(key, 16) % count == index``)."""
        return [key for key in keys if shard_of(key, self.count) == self.index]


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "")
    try:
        return int(value) if value.strip() else None
    except ValueError:
        raise ShardError(f"Environment variable {name}={value!r} is not an integer.") from None


def shard_from_env(env: Mapping[str, str] | None = None) -> ShardSpec | None:
    """The shard implied by torchrun (``RANK``/``WORLD_SIZE``/``LOCAL_RANK``) or SLURM, or None for one process."""
    env = os.environ if env is None else env
    for origin, count_vars, rank_var, local_var in (
        ("torchrun", ("WORLD_SIZE",), "RANK", "LOCAL_RANK"),
        # srun sets SLURM_STEP_NUM_TASKS for the step; SLURM_NTASKS alone is also visible to a batch script's own shell
        ("slurm", ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"), "SLURM_PROCID", "SLURM_LOCALID"),
    ):
        count = next((n for name in count_vars if (n := _env_int(env, name)) is not None), None)
        if count is None or count <= 1:  # at most one process: no shard
            continue
        rank = _env_int(env, rank_var)
        if rank is None or not 0 <= rank < count:
            given = f"{rank_var} is not set" if rank is None else f"{rank_var}={rank} is out of range"
            raise ShardError(f"{origin} started {count} processes (ranks 0..{count - 1}) but {given}; fix the launch.")
        local = _env_int(env, local_var)
        return ShardSpec(index=rank, count=count, origin=origin, local_rank=rank if local is None else local)
    return None


def resolve_shard(cli_value: str | None, env: Mapping[str, str] | None = None) -> ShardSpec | None:
    """``--shard I/N`` (``I`` zero-based) when given (it must agree with a launcher's rank if both exist), else the
    launcher's rank."""
    from_env = shard_from_env(env)
    if cli_value is None:
        return from_env
    parts = cli_value.strip().split("/")
    if not (len(parts) == 2 and all(p.strip().isdigit() for p in parts) and int(parts[0]) < int(parts[1])):
        raise ShardError(f"--shard must look like I/N with 0 <= I < N (for example 0/8), got {cli_value!r}.")
    index, count = int(parts[0]), int(parts[1])
    if from_env is not None and (from_env.index, from_env.count) != (index, count):
        rank = f"{from_env.origin} rank {from_env.index}/{from_env.count}"
        raise ShardError(f"--shard {index}/{count} disagrees with the {rank}; drop --shard under a launcher.")
    return from_env or ShardSpec(index, count)


def full_split(keys: Sequence[str], most: int) -> int:
    """The largest shard count up to ``most`` that leaves no shard without keys (1 for no keys)."""
    unique = set(keys)
    counts = range(min(most, len(unique)), 1, -1)
    return next((count for count in counts if len({shard_of(key, count) for key in unique}) == count), 1)


# -- the plan ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """One artifact a run publishes: its directory, its shard (None unsharded), its keys once the samples are built."""

    output_dir: Location
    shard: ShardSpec | None
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """What a run is to publish: its config, every target, those still to generate, those already published."""

    config: CacheConfig
    config_json: dict[str, Any]
    digest: str
    overrides: Overrides
    applied: list[Override]
    targets: list[Target]
    pending: list[Target]
    published: list[Location]

    @property
    def base(self) -> Location:
        """The absolute ``output_dir``: the artifact, or the base every shard directory's name starts with."""
        return location(self.config.output_dir)

    @property
    def output_dir(self) -> Location:
        """What the run returns: the artifact, the one shard of ``--shard I/N``, or the base of ``--shards N``."""
        shard = self.targets[0].shard
        return self.base if shard is None or shard.origin == "--shards" else self.targets[0].output_dir


def plan_targets(
    output_dir: str, shard: str | None, shards: int | None, env: Mapping[str, str] | None, keep_split: bool = False
) -> list[Target]:
    """The targets of ``--shard`` (or a launcher's rank) or ``--shards`` (with ``keep_split`` and no count, the count
    of a split already started at ``output_dir``); a :class:`ShardError` for a bad split, or one beside another split
    of the same output path (the two could never be read as one artifact)."""
    base = location(output_dir)
    if keep_split and shards is None and (found := find_shards(base)) is not None:
        shards = found.count
    spec = resolve_shard(shard, env)
    if shards is not None and spec is not None:
        raise ShardError(f"--shards runs every shard in this process; drop --shard (or the {spec.origin} launch).")
    if shards is not None and (isinstance(shards, bool) or shards < 1):
        raise ShardError(f"--shards must be at least 1, got {shards}.")
    specs = [spec] if shards is None else [ShardSpec(index=i, count=shards, origin="--shards") for i in range(shards)]
    conflict = split_conflict(base, specs[0].count if specs[0] is not None else None)
    if conflict is not None:
        raise_problems([Problem("shards", specs[0].origin if specs[0] else "output_dir", ShardError(conflict))])
    return [Target(base if s is None else location(shard_dir_name(str(base), s.index, s.count)), s) for s in specs]


def check_published(output_dir: Location, digest: str) -> None:
    """Accept an existing ``output_dir`` only as an artifact the same run published (the payload's bytes are
    ``gencache verify``'s to check)."""
    try:
        why = None if is_published(output_dir, digest) else "belongs to another run (its config differs)"
    except FormatError as error:
        why = f"is not a whole artifact ({error})"
    if why is not None:
        raise OutputExistsError(f"{output_dir} exists but {why}; move it aside or choose a new output_dir.")


def make_plan(
    config: CacheConfig, overrides: Overrides, applied: list[Override], targets: list[Target], skip: bool
) -> Plan:
    """The plan of a valid ``config`` to publish ``targets``; with ``skip`` those the same run already published are
    set aside."""
    config_json = config_to_json(config)
    digest = json_digest({k: v for k, v in config_json.items() if k != "output_dir"})  # equal for every shard
    published = [t.output_dir for t in targets if skip and exists(t.output_dir)]
    problems: list[Problem] = []
    for path in published:
        try:
            check_published(path, digest)
        except GencacheError as error:
            problems.append(Problem("output path", str(path), error))
    raise_problems(problems)
    pending = [t for t in targets if t.output_dir not in published]
    return Plan(config, config_json, digest, overrides, applied, targets, pending, published)
