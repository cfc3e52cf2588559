"""What a run is to publish, worked out before any check: the config (every problem of it, and of the shard plan,
raised at once with what the data files and output location say), each target directory with its shard, and
which of them are already published by the same run (``--skip-published``, ``--shards``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gencache.artifact.names import shard_dir_name
from gencache.core.errors import GencacheError, OutputExistsError, Problem, ShardError, raise_problems
from gencache.run.overrides import Override, Overrides, check_config, name_origins
from gencache.run.record import absolute_path
from gencache.run.sharding import ShardSpec, Target, resolve_shard, run_digest

if TYPE_CHECKING:
    from gencache.config import CacheConfig


def output_path_for(config: CacheConfig | str, shard: ShardSpec | None) -> Path:
    """The directory this process publishes: ``output_dir`` (of ``config``, or given) or its shard directory."""
    base = absolute_path(config if isinstance(config, str) else config.output_dir)
    if shard is None:
        return base
    return Path(shard_dir_name(str(base), shard.index, shard.count))


def check_published(output_dir: Path, digest: str) -> None:
    """Accept an existing ``output_dir`` only as a verified artifact of the same run; raise otherwise."""
    from gencache.artifact.reader import read_resolved_config, verify

    problems = verify(output_dir)
    if problems:
        raise OutputExistsError(
            f"{output_dir} exists but does not verify ({problems[0]}); move it aside and rerun (gencache never "
            "overwrites an artifact)."
        )
    if read_resolved_config(output_dir).get("run_digest") != digest:
        raise OutputExistsError(
            f"{output_dir} exists but belongs to another run (its config differs); choose a new output_dir or move "
            "it aside."
        )


def targets_of(output_dir: str, shard: str | None, shards: int | None, env: Mapping[str, str] | None) -> list[Target]:
    spec = resolve_shard(shard, env)
    if shards is not None:
        if spec is not None:
            raise ShardError(
                f"--shards {shards} runs every shard in this process; drop --shard (or the {spec.origin} launch), "
                "or use --shard I/N alone."
            )
        if isinstance(shards, bool) or shards < 1:
            raise ShardError(f"--shards must be at least 1, got {shards}.")
        specs: list[ShardSpec | None] = [ShardSpec(index=i, count=shards, origin="--shards") for i in range(shards)]
    else:
        specs = [spec]
    return [Target(output_path_for(output_dir, s), s) for s in specs]


def _split_problems(output_dir: str, targets: list[Target]) -> list[Problem]:
    """The run's split beside another split of the same output path (:func:`split_conflict`), as a problem."""
    from gencache.artifact.shards import split_conflict

    spec = targets[0].shard
    conflict = split_conflict(absolute_path(output_dir), spec.count if spec is not None else None)
    if conflict is None:
        return []
    location = "output_dir" if spec is None else spec.origin
    return [Problem("shards", location, ShardError(conflict))]


@dataclass
class Plan:
    """What a run is to publish: its config, every target, those still to generate, those already published."""

    config: CacheConfig
    config_json: dict[str, Any]
    digest: str
    targets: list[Target]
    pending: list[Target]
    published: list[Path]
    applied: list[Override]
    """The command line's overrides as applied: a later problem at a location one of them wrote is named after it
    (:func:`gencache.run.overrides.name_origins`)."""

    @property
    def base(self) -> Path:
        """The absolute ``output_dir``: the artifact, or the base every shard directory's name starts with."""
        return absolute_path(self.config.output_dir)


def plan_run(
    config_path: str | os.PathLike[str],
    overrides: Overrides,
    shard: str | None,
    shards: int | None,
    env: Mapping[str, str] | None,
    skip: bool,
    *,
    keep_split: bool = False,
) -> Plan:
    """The config and the targets, or every problem the config, the shard plan and the data files have (the
    data configs and output location that validated on their own are checked even when the config is invalid).
    With ``keep_split`` and no count, a split already started at ``output_dir`` is planned with its count (a
    ``--ray`` rerun resumes it)."""
    from gencache.artifact.shards import find_shards
    from gencache.config import config_to_json
    from gencache.run.checks import check_inputs_alone

    checked = check_config(config_path, overrides)
    problems = list(checked.problems)
    output_dir = checked.config.output_dir if checked.config is not None else checked.output_dir
    targets: list[Target] = []
    if output_dir is not None:
        if keep_split and shards is None and (found := find_shards(absolute_path(output_dir))) is not None:
            shards = found.count
        try:
            targets = targets_of(output_dir, shard, shards, env)
        except ShardError as error:
            problems.append(Problem("shards", "--shards" if shards is not None else "--shard", error))
        else:
            problems.extend(_split_problems(output_dir, targets))
    config = checked.config
    if config is None or problems:
        data_configs = list(enumerate(config.data_configs)) if config is not None else checked.data_configs
        alone = check_inputs_alone(data_configs, [] if skip else targets, None).problems
        raise_problems(problems + name_origins(alone, checked.applied))
    assert config is not None
    config_json = config_to_json(config)
    return _published(Plan(config, config_json, run_digest(config_json), targets, [], [], checked.applied), skip)


def reshard(plan: Plan, count: int) -> Plan:
    """``plan``'s run split into ``count`` shards (as ``--shards count``), each shard already published by the same
    run found; every problem raised at once (a split beside another split of the output path, a published shard
    that does not verify or is another run's)."""
    output_dir = plan.config.output_dir
    targets = targets_of(output_dir, None, count, {})
    raise_problems(_split_problems(output_dir, targets))
    return _published(replace(plan, targets=targets), True)


def _published(plan: Plan, skip: bool) -> Plan:
    """``plan`` with its targets sorted into those to generate and, with ``skip``, those the same run already
    published (an existing target that does not verify or is another run's is a problem, raised with the rest)."""
    pending: list[Target] = []
    published: list[Path] = []
    problems: list[Problem] = []
    for target in plan.targets:
        if skip and os.path.lexists(target.output_dir):
            try:
                check_published(target.output_dir, plan.digest)
            except GencacheError as error:
                problems.append(Problem("output path", str(target.output_dir), error))
            published.append(target.output_dir)
        else:
            pending.append(target)
    raise_problems(problems)
    return replace(plan, pending=pending, published=published)
