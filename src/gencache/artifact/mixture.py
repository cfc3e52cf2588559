"""Several artifacts read as one cache: :class:`MultiCacheReader` and :func:`open_caches`."""

from __future__ import annotations

import heapq
import itertools
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gencache.artifact.cache import GenerationCache
from gencache.artifact.manifest import PROVENANCE_FIELDS
from gencache.artifact.names import shard_of
from gencache.artifact.reader import CacheReader
from gencache.artifact.shards import check_shard_set, expand_output
from gencache.artifact.store import Location, PathLike
from gencache.config.paths import S3Url
from gencache.core.errors import CompatibilityError, FormatError, ShardError


def _incompatible(first: CacheReader, other: CacheReader) -> str:
    """Why two artifacts cannot be mixed; paths are compared as recorded (one run's path is the other's only by
    regenerating)."""
    fields = [f for f in PROVENANCE_FIELDS if other.provenance[f] != first.provenance[f]]
    paths = [f"{f} {first.provenance[f]!r} vs {other.provenance[f]!r}" for f in fields if f.endswith("_path")]
    return (
        f"Generation caches {first.path} and {other.path} have incompatible provenance (differing: "
        f"{', '.join(fields)}); mix only artifacts of one teacher, tokenizer state and dtype"
        + (f" (paths compare as recorded: {'; '.join(paths)}; regenerate one with the other's path)." if paths else ".")
    )


class MultiCacheReader(GenerationCache):
    """Several artifacts with identical provenance read as one cache. Keys are the union, iterated in sorted
    order; a key present in several artifacts must have the same content digest everywhere (checked at open,
    reading those keys' entries), and the first artifact holding it serves it. Picklable (each reader reopens and
    checks its artifact).

    When the artifacts are exactly the shards ``0..N-1`` of one run (each shard's keys were checked at its open to
    follow the key-mod rule, so shards never share a key), a key is looked up only in its shard, by the rule:
    opening a shard set costs nothing beyond opening its shards.
    """

    def __init__(self, readers: Sequence[CacheReader]) -> None:
        self.readers = tuple(readers)
        self.paths = tuple(reader.path for reader in self.readers)
        first = self.readers[0]
        for reader in self.readers[1:]:
            if reader.provenance_digest != first.provenance_digest:
                raise CompatibilityError(_incompatible(first, reader))
        self.provenance = first.provenance
        self.provenance_digest = first.provenance_digest
        self._len = sum(len(reader) for reader in self.readers)
        infos = [reader.summary["shard"] for reader in self.readers]
        route = {info["index"]: at for at, info in enumerate(infos) if info and info["count"] == len(infos)}
        if len(route) == len(infos) and len({info["run_digest"] for info in infos}) == 1:
            self._route: list[int] | None = [route[index] for index in range(len(infos))]  # reader of each shard
            return
        self._route = None
        keys = np.sort(np.concatenate([reader.index.keys for reader in self.readers]))
        repeated = keys[1:][keys[1:] == keys[:-1]]
        self._len -= len(repeated)
        for key in map(bytes.decode, np.unique(repeated).tolist()):  # read only for the keys that repeat
            holders = [reader for reader in self.readers if key in reader]
            digests = [(reader.metadata(key) or {}).get("content_digest") for reader in holders]
            if len(set(digests)) > 1:
                other = holders[next(i for i, digest in enumerate(digests) if digest != digests[0])]
                raise FormatError(
                    f"Generation caches contain conflicting duplicate key {key}: {holders[0].path} and {other.path} "
                    "store different generations for it; drop one of the artifacts."
                )

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in itertools.groupby(heapq.merge(*self.readers)))  # each key once, sorted

    def _position(self, key: object) -> int:
        """``local * len(readers) + owner``: the key's position in the first reader that holds it, and that
        reader's."""
        count = len(self.readers)
        if self._route is not None:
            try:
                owner = self._route[shard_of(key, count)]  # type: ignore[arg-type]
            except (TypeError, ValueError):
                return -1
            local = self.readers[owner].index.find(key)
            return -1 if local < 0 else local * count + owner
        for owner, reader in enumerate(self.readers):
            local = reader.index.find(key)
            if local >= 0:
                return local * count + owner
        return -1

    def _entry(self, position: int) -> tuple[list[np.ndarray[Any, Any]], tuple[str, ...], tuple[str, ...]]:
        local, owner = divmod(position, len(self.readers))
        return self.readers[owner]._entry(local)

    def metadata(self, key: str) -> dict[str, Any] | None:
        position = self._position(key)
        return None if position < 0 else self.readers[position % len(self.readers)].metadata(key)


def open_caches(paths: PathLike | Sequence[PathLike]) -> CacheReader | MultiCacheReader:
    """Open one artifact or a mixture.

    A path that does not exist but has shard siblings ``<path>-shard-IIIII-of-NNNNN`` stands for all N shards
    (every shard must exist and come from the same run). The same directory twice (even through a symlink),
    differing provenance or a key stored with different content in two artifacts are errors.
    """
    items = [paths] if isinstance(paths, (str, bytes, os.PathLike, S3Url)) else list(paths)
    if not items:
        raise FormatError("open_caches needs at least one artifact path.")
    for item in items:
        if not isinstance(item, (str, os.PathLike, S3Url)):
            raise TypeError(f"open_caches: {item!r} is not a str or os.PathLike path.")
    if "" in items:
        raise FormatError("open_caches: an empty path names no artifact; give the artifact's directory.")
    groups = [expand_output(item) for item in items]
    for _, shards in groups:
        if shards is not None and (shards.missing or shards.other_splits):
            raise ShardError(" ".join(check_shard_set(shards, {})["problems"]))
    seen: dict[str, Location] = {}
    for path in (path for expanded, _ in groups for path in expanded):
        real = os.path.realpath(path) if isinstance(path, Path) else str(path)
        if real in seen:
            raise FormatError(
                f"Cache paths {seen[real]} and {path} are the same directory ({real}); list each artifact once."
            )
        seen[real] = path
    readers: list[CacheReader] = []
    for expanded, shards in groups:
        opened = [CacheReader(path) for path in expanded]
        if shards is not None:
            infos = {index: reader.summary["shard"] for index, reader in zip(shards.present, opened, strict=True)}
            problems = check_shard_set(shards, infos)["problems"]
            if problems:
                raise ShardError(" ".join(problems))
        readers.extend(opened)
    return readers[0] if len(readers) == 1 else MultiCacheReader(readers)
