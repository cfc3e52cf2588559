"""An entry proves itself on its first read (its digests), batches read what single reads do, and ``get_arrays``
serves the same entries without torch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gencache.artifact.mixture import open_caches
from gencache.artifact.reader import CacheReader
from gencache.core.errors import IntegrityError
from support.storage_helpers import Entry, make_entries, writable_copy, write_artifact, write_shard


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Entry]]:
    entries = make_entries(12, length=9, sequences=2)
    return write_artifact(tmp_path_factory.mktemp("check") / "out", entries), entries


def tokens(generation: object) -> list[list[int]]:
    return [t.tolist() for t in generation.sequences]  # type: ignore[attr-defined]


def rewrite_one_token(path: Path, sequence: bytes) -> None:
    """Change one token of ``sequence`` in the payload in place (same size, a later modification time)."""
    payload = path / "cache.safetensors"
    data = bytearray(payload.read_bytes())
    data[data.index(sequence)] ^= 0xFF
    stamp = os.stat(payload)
    with open(payload, "r+b") as handle:
        handle.write(data)
    os.utime(payload, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1_000_000))  # a coarse clock still moves


def test_a_token_changed_in_place_fails_the_first_read_of_its_entry(
    artifact: tuple[Path, list[Entry]], tmp_path: Path
) -> None:
    path = writable_copy(artifact[0], tmp_path / "copy")
    first, second = artifact[1][:2]
    rewrite_one_token(path, bytes(CacheReader(path)[first.key].sequences[0].numpy().data))
    reader = CacheReader(path)
    assert tokens(reader[second.key]) == [list(s) for s in second.sequences]
    with pytest.raises(IntegrityError, match="digest mismatch"):
        reader[first.key]


def test_a_shard_set_batch_returns_individual_reads(tmp_path: Path) -> None:
    entries = make_entries(10)
    for index in range(2):
        write_shard(tmp_path / "out", index, 2, entries, "d" * 64)
    mixture = open_caches(tmp_path / "out")
    keys = sorted(e.key for e in entries)
    assert [tokens(g) for g in mixture.get_many(keys)] == [tokens(mixture[k]) for k in keys]


def test_get_arrays_serves_the_same_entries_as_numpy(artifact: tuple[Path, list[Entry]], tmp_path: Path) -> None:
    path = writable_copy(artifact[0], tmp_path / "copy")
    reader = CacheReader(path)
    for e in artifact[1]:
        arrays = reader.get_arrays(e.key)
        assert [a.tolist() for a in arrays.sequences] == [list(s) for s in e.sequences]
        assert arrays.texts == e.texts and arrays.finish_reasons == e.finish_reasons
        assert all(a.dtype.str == "<i8" and not a.flags.writeable for a in arrays.sequences)
    assert tokens(reader[artifact[1][0].key]) == [list(s) for s in artifact[1][0].sequences]
    assert [a.tolist() for a in reader.get_arrays(artifact[1][1].key).sequences] == list(
        map(list, artifact[1][1].sequences)
    )
    first = artifact[1][2]
    rewrite_one_token(path, bytes(reader[first.key].sequences[0].numpy().data))
    fresh = CacheReader(path)
    with pytest.raises(IntegrityError, match="digest mismatch"):
        fresh.get_arrays(first.key)
