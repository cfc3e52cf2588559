"""The one check of a set of shard directories, shared by ``open_caches``, ``inspect`` and ``verify``.

An unsuffixed output path ``<base>`` that does not exist stands for its shard siblings
``<base>-shard-IIIII-of-NNNNN``. The set is whole when all N shards are present, no directory of another split
sits beside them, every shard's manifest records the index and count its name says, and all of them record one
``run_digest``. A directory at ``<base>`` itself that is not an artifact (an empty directory made by hand or by a
tool) hides the set: :func:`stray_directory` names it. This module only looks at names, directory listings and the
``summary.shard`` records its callers read; it opens no artifact itself. Before a run, :func:`split_conflict`
refuses to start a split of ``<base>`` beside another one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gencache.artifact.names import ARTIFACT_FILES, parse_shard_dir_name
from gencache.core.errors import ShardError

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class ShardSet:
    """The shard directories ``<base>-shard-IIIII-of-NNNNN`` found beside an unsuffixed output path."""

    base: Path
    count: int
    present: dict[int, Path]
    missing: tuple[int, ...]
    other_splits: dict[int, tuple[Path, ...]]

    def describe_missing(self) -> str:
        return ", ".join(f"{i:05d}" for i in self.missing)


def find_shards(path: PathLike) -> ShardSet | None:
    """The shard siblings of an unsuffixed ``path`` (None when there are none). The split with the most
    directories is the one described; directories of other splits are listed in ``other_splits``."""
    base = Path(path).expanduser().absolute()
    parent, name = base.parent, base.name
    try:
        names = os.listdir(parent)
    except OSError:
        return None
    splits: dict[int, dict[int, Path]] = {}
    for candidate in names:
        parsed = parse_shard_dir_name(candidate)
        if parsed is None or parsed[0] != name:
            continue
        _, index, count = parsed
        splits.setdefault(count, {})[index] = parent / candidate
    if not splits:
        return None
    count = max(splits, key=lambda c: (len(splits[c]), c))
    present = dict(sorted(splits[count].items()))
    missing = tuple(i for i in range(count) if i not in present)
    others = {c: tuple(p for _, p in sorted(found.items())) for c, found in splits.items() if c != count}
    return ShardSet(base, count, present, missing, others)


@dataclass(frozen=True)
class ShardCheck:
    """The verdict on one :class:`ShardSet`: which shards are missing, unreadable, mislabeled or of another run."""

    shards: ShardSet
    run_digest: str | None
    unreadable: tuple[int, ...] = ()
    mislabeled: dict[int, Any] = field(default_factory=dict)
    other_run: tuple[int, ...] = ()
    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def problems(self) -> list[str]:
        """One plain sentence per problem, each naming the directories concerned and what to do."""
        shards = self.shards
        found: list[str] = []
        if shards.missing:
            found.append(
                f"{shards.base} is split {shards.count} ways but shards {shards.describe_missing()} are missing; "
                f"rerun the same command (gencache generate CONFIG --shards {shards.count} regenerates only the "
                f"missing ones; one shard alone is --shard I/{shards.count})."
            )
        if shards.other_splits:
            stray = ", ".join(p.name for paths in shards.other_splits.values() for p in paths)
            found.append(
                f"{shards.base} has shard directories of {len(shards.other_splits) + 1} different splits; the "
                f"{shards.count}-way split is kept and these belong to another split: {stray}. Move them away."
            )
        for index, info in self.mislabeled.items():
            found.append(
                f"{shards.present[index]} is named shard {index} of {shards.count} but its manifest records shard "
                f"{_describe_info(info)}; it was renamed or copied from another run."
            )
        if len(self.groups) > 1:
            described = "; ".join(
                f"shards {', '.join(f'{i:05d}' for i in indices)} have run_digest {digest[:12]}"
                for digest, indices in self.groups.items()
            )
            found.append(
                f"The shards of {shards.base} come from different runs ({described}); remove the shards of the "
                "wrong run and rerun them with the same config."
            )
        return found


def _describe_info(info: Any) -> str:
    if not isinstance(info, Mapping):
        return "none (it is not a shard)"
    return f"{info.get('index')} of {info.get('count')}"


def check_shard_set(shards: ShardSet, infos: Mapping[int, Mapping[str, Any] | None]) -> ShardCheck:
    """Check ``shards`` given the manifest ``summary.shard`` record of each readable shard (``infos`` maps a
    present index to it; a present index missing from ``infos`` could not be opened).

    The run of the set is the ``run_digest`` recorded by most correctly named shards (the lowest index wins a tie);
    every other correctly named shard is of another run.
    """
    unreadable = tuple(i for i in shards.present if i not in infos)
    mislabeled: dict[int, Any] = {}
    groups: dict[str, list[int]] = {}
    for index in shards.present:
        if index not in infos:
            continue
        info = infos[index]
        if not isinstance(info, Mapping) or info.get("index") != index or info.get("count") != shards.count:
            mislabeled[index] = info
            continue
        groups.setdefault(str(info.get("run_digest")), []).append(index)
    run_digest = max(groups, key=lambda d: (len(groups[d]), -groups[d][0])) if groups else None
    other_run = tuple(i for d, indices in groups.items() if d != run_digest for i in indices)
    return ShardCheck(
        shards=shards,
        run_digest=run_digest,
        unreadable=unreadable,
        mislabeled=mislabeled,
        other_run=tuple(sorted(other_run)),
        groups={d: tuple(indices) for d, indices in groups.items()},
    )


def stray_directory(path: PathLike) -> str | None:
    """Why ``path`` hides the shard directories beside it, or None: it is a directory holding none of the artifact
    files (empty, say) while ``<path>-shard-IIIII-of-NNNNN`` directories exist. One sentence naming the stray
    directory and the fix."""
    full = Path(path).expanduser().absolute()
    try:
        names = set(os.listdir(full)) if full.is_dir() and not full.is_symlink() else None
    except OSError:
        return None
    if names is None or names & ARTIFACT_FILES:
        return None
    shards = find_shards(full)
    if shards is None:
        return None
    what, fix = ("an empty directory", f"rmdir {full}") if not names else ("not an artifact", "move it away")
    return (
        f"{full} is {what} and hides the {len(shards.present)} shard directories "
        f"{full.name}-shard-*-of-{shards.count:05d} beside it: remove the stray directory ({fix}) so that the path "
        "stands for its shards, or name one shard directory."
    )


def split_conflict(path: PathLike, count: int | None) -> str | None:
    """Why a run may not write its split of the unsharded output path ``path`` (``count`` ways, or unsplit when
    None), or None when it may: shard directories of another split already sit beside ``path``, so the two splits
    could never be read as one artifact, and an unsplit run would publish ``path`` itself over the split's name.
    One sentence naming both splits and what to do. An unsplit run over a path that exists is left to the output
    check (it refuses any existing path)."""
    if count is None and os.path.lexists(Path(path).expanduser().absolute()):
        return None
    found = find_shards(path)
    if found is None:
        return None
    splits = {found.count: tuple(found.present.values()), **found.other_splits}
    other = [c for c in sorted(splits) if c != count]
    if not other:
        return None
    existing = "; ".join(
        f"a {c}-way split ({len(splits[c])} of its {c} directories, {splits[c][0].name}"
        f"{', ...' if len(splits[c]) > 1 else ''})"
        for c in other
    )
    if count is None:
        ours = f"publish {found.base} itself, which would hide it"
    else:
        ours = f"write a {count}-way split ({found.base.name}-shard-*-of-{count:05d}) beside it"
    advice = "choose a new output_dir or move the existing shard directories away"
    if len(other) == 1:
        advice = f"rerun with --shards {other[0]} (or {other[0]} launcher processes) to finish or reuse it, or {advice}"
    return (
        f"{found.base} already has {existing}; this run would {ours}: the two cannot be read as one artifact; {advice}."
    )


def expand_output(path: PathLike) -> tuple[list[Path], ShardSet | None]:
    """The directories an artifact path stands for: itself when it exists, else its shard siblings (all of
    them, even when some are missing: the caller checks the set). ``([path], None)`` when there are none.
    :class:`ShardError` when the path is a stray directory that hides its shard siblings (:func:`stray_directory`)."""
    full = Path(path).expanduser().absolute()
    if os.path.lexists(full):
        stray = stray_directory(full)
        if stray is not None:
            raise ShardError(stray)
        return [full], None
    shards = find_shards(full)
    if shards is None:
        return [full], None
    return list(shards.present.values()), shards
