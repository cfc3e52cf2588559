"""The one check of a set of shard directories, shared by ``open_caches``, ``inspect`` and ``verify``.

An unsuffixed output path ``<base>`` that does not exist stands for its shard siblings
``<base>-shard-IIIII-of-NNNNN``. The set is whole when all N shards are present, no directory of another split
sits beside them, every shard's manifest records the index and count its name says, and all of them record one
``run_digest``. This module looks only at names, directory listings and the ``summary.shard`` records its callers
read; it opens no artifact itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gencache.artifact.names import ARTIFACT_FILES, parse_shard_dir_name
from gencache.artifact.store import Location, PathLike, exists, listdir, location
from gencache.config.paths import S3Url
from gencache.core.errors import ShardError


@dataclass(frozen=True)
class ShardSet:
    """The shard directories found beside an unsuffixed output path: the split with the most directories, and
    the directories of other splits by their count."""

    base: Location
    count: int
    present: dict[int, Location]
    missing: tuple[int, ...]
    other_splits: dict[int, tuple[Location, ...]]


def find_shards(base: Location) -> ShardSet | None:
    """The shard siblings of an unsuffixed ``base`` (None when there are none)."""
    splits: dict[int, dict[int, Location]] = {}
    for name in listdir(base.parent) or ():
        parsed = parse_shard_dir_name(name)
        if parsed is not None and parsed[0] == base.name:
            splits.setdefault(parsed[2], {})[parsed[1]] = base.parent / name
    if not splits:
        return None
    count = max(splits, key=lambda c: (len(splits[c]), c))
    present = dict(sorted(splits[count].items()))
    others = {c: tuple(p for _, p in sorted(found.items())) for c, found in splits.items() if c != count}
    return ShardSet(base, count, present, tuple(i for i in range(count) if i not in present), others)


def check_shard_set(shards: ShardSet, infos: Mapping[int, Any]) -> dict[str, Any]:
    """The verdict on ``shards`` given the ``summary.shard`` record of each readable shard (a present index missing
    from ``infos`` could not be opened): the shard names (``00003``) present, missing, unreadable, misnamed or of
    another run, the directories of other splits, the set's run (the ``run_digest`` most correctly named shards
    record, the lowest index winning a tie) and its ``problems``, one sentence each."""

    def names(indices: Any) -> list[str]:
        return [f"{i:05d}" for i in indices]

    base, count = shards.base, shards.count
    problems: list[str] = []
    if shards.missing:
        problems.append(
            f"{base} is split {count} ways but shards {', '.join(names(shards.missing))} are missing; "
            f"rerun the same command (gencache generate CONFIG --shards {count} regenerates only the missing ones; "
            f"one shard alone is --shard I/{count})."
        )
    other_splits = [p.name for paths in shards.other_splits.values() for p in paths]
    if other_splits:
        problems.append(
            f"{base} has shard directories of {len(shards.other_splits) + 1} different splits; the {count}-way split "
            f"is kept and these belong to another split: {', '.join(other_splits)}. Move them away."
        )
    mislabeled: list[int] = []
    groups: dict[str, list[int]] = {}
    for index, info in sorted(infos.items()):
        if isinstance(info, Mapping) and info.get("index") == index and info.get("count") == count:
            groups.setdefault(str(info.get("run_digest")), []).append(index)
            continue
        mislabeled.append(index)
        recorded = (
            f"{info.get('index')} of {info.get('count')}" if isinstance(info, Mapping) else "none (it is not a shard)"
        )
        problems.append(
            f"{shards.present[index]} is named shard {index} of {count} but its manifest records shard {recorded}; it "
            "was renamed or copied from another run."
        )
    if len(groups) > 1:
        described = "; ".join(
            f"shards {', '.join(names(indices))} have run_digest {digest[:12]}" for digest, indices in groups.items()
        )
        problems.append(
            f"The shards of {base} come from different runs ({described}); remove the shards of the wrong run and "
            "rerun them with the same config."
        )
    run_digest = max(groups, key=lambda d: (len(groups[d]), -groups[d][0])) if groups else None
    other_run = sorted(i for d, indices in groups.items() if d != run_digest for i in indices)
    return {
        "count": count,
        "present": names(shards.present),
        "missing": names(shards.missing),
        "unreadable": names(i for i in shards.present if i not in infos),
        "mislabeled": names(mislabeled),
        "other_run": names(other_run),
        "other_splits": other_splits,
        "run_digest": run_digest,
        "problems": problems,
    }


def stray_directory(path: Location) -> str | None:
    """Why ``path`` hides the shard directories beside it, or None: it is a directory holding none of the artifact
    files (empty, say) while ``<path>-shard-IIIII-of-NNNNN`` directories exist."""
    listed = None if isinstance(path, Path) and path.is_symlink() else listdir(path)
    names = None if listed is None else set(listed)
    shards = None if names is None or names & ARTIFACT_FILES else find_shards(path)
    if shards is None:
        return None
    what, fix = ("an empty directory", f"rmdir {path}") if not names else ("not an artifact", "move it away")
    return (
        f"{path} is {what} and hides the {len(shards.present)} shard directories "
        f"{path.name}-shard-*-of-{shards.count:05d} beside it: remove the stray directory ({fix}) so that the path "
        "stands for its shards, or name one shard directory."
    )


def split_conflict(path: Location, count: int | None) -> str | None:
    """Why a run may not write its split of the unsharded output path ``path`` (``count`` ways, or unsplit when
    None), or None when it may: the two splits could never be read as one artifact, and an unsplit run would
    publish ``path`` itself over the split's name. An unsplit run over a path that exists is left to the output
    check (it refuses any existing path)."""
    if count is None and exists(path):
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


def expand_output(path: PathLike | S3Url) -> tuple[list[Location], ShardSet | None]:
    """The directories an artifact path stands for: itself when it exists, else its shard siblings (the caller
    checks the set); ``([path], None)`` when there are none. :class:`ShardError` when the path is a stray directory
    that hides its shard siblings."""
    full = location(path)
    if (stray := stray_directory(full)) is not None:
        raise ShardError(stray)
    shards = None if exists(full) else find_shards(full)
    return ([full], None) if shards is None else (list(shards.present.values()), shards)
