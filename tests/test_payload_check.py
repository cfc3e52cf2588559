"""The reader notices a payload changed under it: truncated or rewritten in place, checked on every first read of
an entry, once per batch (``__getitems__``, ``get_many``) and at most once per ``payload_check_interval`` for
repeated reads of verified entries."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest

from gencache.artifact.mixture import open_caches
from gencache.artifact.reader import PAYLOAD_CHECK_INTERVAL, CacheReader
from gencache.core.errors import ConfigError, IntegrityError, MissingEntryError
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


def test_the_interval_is_a_documented_default_and_checked() -> None:
    assert PAYLOAD_CHECK_INTERVAL == 1.0
    for bad in (-1, "1", True, math.nan):
        with pytest.raises(ConfigError, match="payload_check_interval"):
            CacheReader("/nonexistent", payload_check_interval=bad)  # type: ignore[arg-type]


def test_a_truncated_payload_is_refused_by_every_read_when_checking_each_read(
    artifact: tuple[Path, list[Entry]], tmp_path: Path
) -> None:
    path = writable_copy(artifact[0], tmp_path / "copy")
    entries = artifact[1]
    reader = CacheReader(path, payload_check_interval=0)
    for e in entries[:8]:
        assert tokens(reader[e.key]) == [list(s) for s in e.sequences]
    os.truncate(path / "cache.safetensors", 8)
    for e in entries:  # read before (verified) or not: every read refuses
        with pytest.raises(IntegrityError, match="changed while it was open"):
            reader[e.key]


def test_a_truncated_payload_is_refused_by_first_reads_and_the_next_batch_within_the_window(
    artifact: tuple[Path, list[Entry]], tmp_path: Path
) -> None:
    path = writable_copy(artifact[0], tmp_path / "copy")
    entries = artifact[1]
    reader = CacheReader(path, payload_check_interval=math.inf)
    for e in entries[:8]:
        reader[e.key]
    os.truncate(path / "cache.safetensors", 8)
    for e in entries[8:]:  # never verified: the first read checks before it hashes the entry's bytes
        with pytest.raises(IntegrityError, match="changed while it was open"):
            reader[e.key]
    with pytest.raises(IntegrityError, match="changed while it was open"):
        reader.__getitems__([entries[0].key])  # verified, but a batch checks once
    with pytest.raises(IntegrityError, match="changed while it was open"):
        reader.get_many([entries[1].key])


def test_a_rewrite_in_place_is_noticed_on_the_next_batch(artifact: tuple[Path, list[Entry]], tmp_path: Path) -> None:
    path = writable_copy(artifact[0], tmp_path / "copy")
    e, other = artifact[1][0], artifact[1][1]
    reader = CacheReader(path, payload_check_interval=math.inf)
    first = reader[e.key].sequences[0].clone()
    reader[other.key]
    rewrite_one_token(path, bytes(first.numpy().data))
    with pytest.raises(IntegrityError, match="digest mismatch"):
        reader.__getitems__([other.key, e.key])  # verified before the rewrite, checked again after it
    with pytest.raises(IntegrityError, match="digest mismatch"):
        CacheReader(path)[e.key]
    assert tokens(reader[other.key]) == [list(s) for s in other.sequences]


def test_a_rewrite_in_place_is_noticed_once_the_interval_has_passed(
    artifact: tuple[Path, list[Entry]], tmp_path: Path
) -> None:
    path = writable_copy(artifact[0], tmp_path / "copy")
    e = artifact[1][0]
    reader = CacheReader(path, payload_check_interval=0.05)
    first = reader[e.key].sequences[0].clone()
    rewrite_one_token(path, bytes(first.numpy().data))
    time.sleep(0.1)
    with pytest.raises(IntegrityError, match="digest mismatch"):
        reader[e.key]
    immediate = CacheReader(writable_copy(artifact[0], tmp_path / "again"), payload_check_interval=0)
    first = immediate[e.key].sequences[0].clone()
    rewrite_one_token(immediate.path, bytes(first.numpy().data))
    with pytest.raises(IntegrityError, match="digest mismatch"):
        immediate[e.key]  # 0: every read checks


def test_repeated_reads_within_the_window_stat_nothing_and_a_batch_stats_once(
    artifact: tuple[Path, list[Entry]], monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = CacheReader(artifact[0], payload_check_interval=math.inf)
    keys = [e.key for e in artifact[1]]
    for key in keys:
        reader[key]  # first reads: each checks
    calls: list[str] = []
    real_stat = os.stat

    def counting(path: object, *args: object, **kwargs: object) -> os.stat_result:
        calls.append(os.fspath(path))  # type: ignore[arg-type]
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", counting)
    for _ in range(20):
        for key in keys:
            reader[key]
    assert calls == []
    reader.__getitems__(keys)
    reader.get_many(keys)
    assert calls == [str(reader.path / "cache.safetensors")] * 2


def test_getitems_returns_what_individual_reads_return(artifact: tuple[Path, list[Entry]], tmp_path: Path) -> None:
    reader = CacheReader(artifact[0])
    keys = [*[e.key for e in artifact[1]][::-1], artifact[1][0].key]  # any order, repeats allowed
    batch = reader.__getitems__(keys)
    assert [g.key for g in batch] == keys
    for generation, key in zip(batch, keys, strict=True):
        single = reader[key]
        assert tokens(generation) == tokens(single)
        assert (generation.texts, generation.finish_reasons) == (single.texts, single.finish_reasons)
    with pytest.raises(MissingEntryError):
        reader.__getitems__([keys[0], "0" * 64])


def test_a_shard_set_batch_checks_every_shard_and_returns_individual_reads(tmp_path: Path) -> None:
    entries = make_entries(10)
    for index in range(2):
        write_shard(tmp_path / "out", index, 2, entries, "d" * 64)
    mixture = open_caches(tmp_path / "out")
    keys = sorted(e.key for e in entries)
    assert [tokens(g) for g in mixture.__getitems__(keys)] == [tokens(mixture[k]) for k in keys]
    readers = mixture.readers  # type: ignore[union-attr]
    for reader in readers:
        reader._next_check = math.inf
    mixture.__getitems__(keys[:1])
    assert all(reader._next_check < math.inf for reader in readers)  # every shard checks on its next read


def test_get_arrays_serves_the_same_entries_as_numpy(artifact: tuple[Path, list[Entry]], tmp_path: Path) -> None:
    path = writable_copy(artifact[0], tmp_path / "copy")
    reader = CacheReader(path)
    for e in artifact[1]:
        arrays = reader.get_arrays(e.key)
        assert [a.tolist() for a in arrays.sequences] == [list(s) for s in e.sequences]
        assert arrays.texts == e.texts and arrays.finish_reasons == e.finish_reasons
        assert all(a.dtype.str == "<i8" and not a.flags.writeable for a in arrays.sequences)
    assert reader._storage is None  # read from the file: no map, no tensor
    assert tokens(reader[artifact[1][0].key]) == [list(s) for s in artifact[1][0].sequences]
    assert [a.tolist() for a in reader.get_arrays(artifact[1][1].key).sequences] == list(
        map(list, artifact[1][1].sequences)
    )  # views of the map once it is made
    first = artifact[1][2]
    rewrite_one_token(path, bytes(reader[first.key].sequences[0].numpy().data))
    fresh = CacheReader(path)
    with pytest.raises(IntegrityError, match="digest mismatch"):
        fresh.get_arrays(first.key)
