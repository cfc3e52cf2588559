"""CacheReader on real artifacts: round-trips, zero-copy views, lazy integrity, compatibility, coverage, pickling,
and interoperability with safetensors' own loaders."""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import safetensors
import safetensors.torch
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gencache.artifact.cache import Generation
from gencache.artifact.mixture import open_caches
from gencache.artifact.reader import CacheReader, is_published, verify
from gencache.core.errors import CompatibilityError, FormatError, IntegrityError, MissingEntriesError, MissingEntryError
from support.storage_helpers import (
    PROVENANCE,
    TOKENIZER,
    Entry,
    key,
    make_entries,
    overwrite,
    writable_copy,
    write_artifact,
    write_shard,
)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Entry]]:
    entries = make_entries(12, length=9, sequences=2)
    return write_artifact(tmp_path_factory.mktemp("reader") / "out", entries), entries


def test_entries_round_trip(artifact: tuple[Path, list[Entry]]) -> None:
    path, entries = artifact
    reader = CacheReader(path)
    assert len(reader) == 12 and list(reader.keys()) == sorted(e.key for e in entries)
    for e in entries:
        generation = reader[e.key]
        assert isinstance(generation, Generation) and generation.key == e.key
        assert [t.tolist() for t in generation.sequences] == [list(s) for s in e.sequences]
        assert all(t.dtype == torch.int64 and t.dim() == 1 and t.device.type == "cpu" for t in generation.sequences)
        assert generation.texts == e.texts and generation.finish_reasons == e.finish_reasons
        assert e.key in reader and reader.get(e.key) is not None
    assert reader.provenance == PROVENANCE
    assert reader.summary["entries"] == 12


def test_missing_keys(artifact: tuple[Path, list[Entry]]) -> None:
    reader = CacheReader(artifact[0])
    assert reader.get(key("absent")) is None and key("absent") not in reader
    with pytest.raises(MissingEntryError, match="not in the cache") as caught:
        reader[key("absent")]
    assert isinstance(caught.value, KeyError)
    assert reader.metadata(key("absent")) is None


def test_entries_are_zero_copy_views_of_one_map(artifact: tuple[Path, list[Entry]]) -> None:
    reader = CacheReader(artifact[0])
    assert reader._tokens is None  # opening maps nothing: the map is made with the first read
    first, again = reader[artifact[1][0].key], reader[artifact[1][0].key]
    tokens = reader._tokens
    assert tokens is not None
    base, end = tokens.ctypes.data, tokens.ctypes.data + tokens.nbytes
    for a, b in zip(first.sequences, again.sequences, strict=True):
        # each view has its own storage: a slice of the map (zero-copy) holding exactly the entry's bytes
        assert a.untyped_storage().data_ptr() == a.data_ptr() and a.untyped_storage().nbytes() == a.numel() * 8
        assert base <= a.data_ptr() < end and a.data_ptr() == b.data_ptr()
    offsets = sorted(t.data_ptr() - base for e in artifact[1] for t in reader[e.key].sequences)
    assert offsets[0] == 8 + reader.header_capacity


def test_views_outlive_the_reader(artifact: tuple[Path, list[Entry]]) -> None:
    reader = CacheReader(artifact[0])
    e = artifact[1][3]
    sequences = reader[e.key].sequences
    del reader
    import gc

    gc.collect()
    assert [t.tolist() for t in sequences] == [list(s) for s in e.sequences]


def test_metadata_is_the_manifest_entry_and_a_copy(artifact: tuple[Path, list[Entry]]) -> None:
    reader = CacheReader(artifact[0])
    e = artifact[1][0]
    meta = reader.metadata(e.key)
    assert meta is not None and meta["text"] == list(e.texts) and meta["sequences"][1]["tensor"] == f"{e.key}.1"
    meta["text"][0] = "changed"
    assert reader[e.key].texts == e.texts


def test_the_reader_is_picklable(artifact: tuple[Path, list[Entry]]) -> None:
    reader = CacheReader(artifact[0])
    clone = pickle.loads(pickle.dumps(reader))
    e = artifact[1][5]
    assert clone.path == reader.path and [t.tolist() for t in clone[e.key].sequences] == [list(s) for s in e.sequences]
    mixture = open_caches([artifact[0]])
    assert len(pickle.loads(pickle.dumps(mixture))) == 12


def test_payload_corruption_is_found_on_first_read_of_that_entry(
    artifact: tuple[Path, list[Entry]], tmp_path: Path
) -> None:
    path = writable_copy(artifact[0], tmp_path / "copy")
    payload = path / "cache.safetensors"
    raw = bytearray(payload.read_bytes())
    raw[-1] ^= 0x01  # the last byte belongs to the last entry written
    payload.write_bytes(bytes(raw))
    reader = CacheReader(path)  # opening reads no tensor data, so it cannot notice
    last = artifact[1][-1]
    for e in artifact[1][:-1]:
        reader[e.key]
    with pytest.raises(IntegrityError, match="digest mismatch"):
        reader[last.key]
    with pytest.raises(IntegrityError):
        reader.get(last.key)
    assert any("digest mismatch" in p for p in verify(path))


def test_check_compatible_names_every_differing_field(artifact: tuple[Path, list[Entry]]) -> None:
    reader = CacheReader(artifact[0])
    reader.check_compatible(
        model_path="tiny/teacher", tokenizer_path="tiny/teacher", dtype="float32", tokenizer=TOKENIZER
    )
    reader.check_compatible(
        model_path="tiny/teacher",
        tokenizer_path="tiny/teacher",
        dtype=torch.float32,
        tokenizer=SimpleNamespace(**TOKENIZER),
    )
    with pytest.raises(CompatibilityError) as caught:
        reader.check_compatible(
            model_path="other/teacher",
            tokenizer_path="other/tok",
            dtype=torch.bfloat16,
            tokenizer={**TOKENIZER, "padding_side": "right"},
        )
    message = str(caught.value)
    for field in ("model_path", "tokenizer_path", "dtype", "tokenizer", "prepare_tokenizer", "'bfloat16'"):
        assert field in message
    assert "\n" not in message
    with pytest.raises(CompatibilityError) as caught:
        reader.check_compatible(
            model_path="tiny/teacher", tokenizer_path="tiny/teacher", dtype="bfloat16", tokenizer=TOKENIZER
        )
    assert "dtype" in str(caught.value) and "prepare_tokenizer" not in str(caught.value)


def test_require_reports_the_number_of_missing_keys(artifact: tuple[Path, list[Entry]]) -> None:
    reader = CacheReader(artifact[0])
    present = [e.key for e in artifact[1]]
    reader.require(present + present)
    with pytest.raises(MissingEntriesError, match="is missing 2 required semantic samples") as caught:
        reader.require([*present, key("x"), key("y"), key("x")])
    assert isinstance(caught.value, KeyError)


def test_safetensors_loaders_read_gencache_artifacts(artifact: tuple[Path, list[Entry]]) -> None:
    path, entries = artifact
    loaded = safetensors.torch.load_file(path / "cache.safetensors")
    assert len(loaded) == 24
    with safetensors.safe_open(path / "cache.safetensors", framework="pt") as handle:
        for e in entries:
            for i, s in enumerate(e.sequences):
                assert handle.get_tensor(f"{e.key}.{i}").tolist() == list(s) == loaded[f"{e.key}.{i}"].tolist()
    with safetensors.safe_open(path / "cache.safetensors", framework="numpy") as handle:
        assert handle.get_tensor(f"{entries[0].key}.0").tolist() == list(entries[0].sequences[0])


def test_the_artifact_directory_may_be_reached_through_a_symlink(
    artifact: tuple[Path, list[Entry]], tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(artifact[0])
    assert len(CacheReader(link)) == 12 and CacheReader(link).path == link


texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
entry_plans = st.lists(
    st.tuples(
        st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=70), min_size=1, max_size=3),
        st.data(),
    ),
    min_size=0,
    max_size=12,
)


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(plans=entry_plans)
def test_hypothesis_round_trips(plans: list[tuple[list[list[int]], st.DataObject]]) -> None:
    entries = []
    for i, (sequences, data) in enumerate(plans):
        n = len(sequences)
        entry_texts = data.draw(st.lists(texts, min_size=n, max_size=n))
        reasons = data.draw(st.lists(st.sampled_from(["eos", "stop_string", "length"]), min_size=n, max_size=n))
        entries.append(Entry(key(f"h{i}"), tuple(map(tuple, sequences)), tuple(entry_texts), tuple(reasons)))
    with tempfile.TemporaryDirectory() as tmp:
        out = write_artifact(Path(tmp) / "out", entries)
        reader = CacheReader(out)
        assert len(reader) == len(entries)
        for e in entries:
            generation = reader[e.key]
            assert [t.tolist() for t in generation.sequences] == [list(s) for s in e.sequences]
            assert generation.texts == e.texts and generation.finish_reasons == e.finish_reasons
        assert verify(out) == []
        loaded = safetensors.torch.load_file(out / "cache.safetensors")
        assert len(loaded) == sum(len(e.sequences) for e in entries)
        assert sorted(os.listdir(out)) == ["cache.safetensors", "manifest.json", "resolved_config.json"]


# -- the mapping API ---------------------------------------------------------------------------------------------
def test_readers_are_mappings(artifact: tuple[Path, list[Entry]], tmp_path: Path) -> None:
    from collections.abc import Mapping

    path, entries = artifact
    reader = CacheReader(path)
    other = write_artifact(tmp_path / "other", make_entries(3, start=50))
    mixture = open_caches([path, other])
    for cache, count in ((reader, 12), (mixture, 15)):
        assert isinstance(cache, Mapping) and len(cache) == count
        assert list(cache) == sorted(cache) == list(cache.keys())
        items = dict(cache.items())
        assert list(items) == list(cache) and all(isinstance(g, Generation) for g in cache.values())
        assert [g.key for g in cache.values()] == list(cache)
        assert cache.get(key("absent"), "default") == "default" and cache.get(key("absent")) is None
        assert 42 not in cache and key("absent").upper() not in cache
        for odd in (entries[0].key + "\n", "\ud800", entries[0].key[:63] + "é", "a" * 1_000_000):
            assert odd not in cache and cache.get(odd) is None  # at once, whatever the string
        assert cache == cache and cache != CacheReader(path) and len({cache}) == 1
    assert items[entries[0].key].texts == entries[0].texts


def test_threads_that_read_a_fresh_reader_at_once_all_get_their_entries(tmp_path: Path) -> None:
    entries = make_entries(6)
    path = write_artifact(tmp_path / "a", entries)

    def work(reader: CacheReader, start: threading.Barrier, entry: Entry, read: list[list[int]]) -> None:
        start.wait()
        read.append(reader.get_arrays(entry.key).sequences[0].tolist())

    for _ in range(20):  # the payload is mapped on the first read: every thread's read races for it
        reader, start, read = CacheReader(path), threading.Barrier(len(entries)), []
        threads = [threading.Thread(target=work, args=(reader, start, entry, read)) for entry in entries]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(read) == sorted(list(entry.sequences[0]) for entry in entries)


def test_get_many_reads_in_order_and_checks_every_key_first(artifact: tuple[Path, list[Entry]]) -> None:
    reader = CacheReader(artifact[0])
    wanted = [e.key for e in artifact[1][:3]]
    got = reader.get_many([wanted[2], wanted[0], wanted[2]])
    assert [g.key for g in got] == [wanted[2], wanted[0], wanted[2]]
    with pytest.raises(MissingEntriesError, match="missing 1 required"):
        reader.get_many([wanted[0], key("absent")])


def test_one_string_is_not_an_iterable_of_keys(artifact: tuple[Path, list[Entry]]) -> None:
    reader = CacheReader(artifact[0])
    present = artifact[1][0].key
    for method in (reader.require, reader.get_many, open_caches([artifact[0]]).require):
        with pytest.raises(TypeError, match="iterable of keys, not one str"):
            method(present)  # type: ignore[arg-type]
    reader.require([present])


def test_a_pickled_reader_refuses_a_regenerated_artifact(tmp_path: Path) -> None:
    out = write_artifact(tmp_path / "out", make_entries(4))
    reader = CacheReader(out)
    state = pickle.dumps(reader)
    assert len(pickle.loads(state)) == 4  # the same artifact reopens
    import shutil

    shutil.rmtree(out)
    regenerated = make_entries(4)
    regenerated[1] = Entry(regenerated[1].key, regenerated[1].sequences, ("another answer",), ("eos",))
    write_artifact(out, regenerated)  # same path, same provenance, other content
    assert CacheReader(out).provenance_digest == reader.provenance_digest
    with pytest.raises(FormatError, match="not the one the reader was pickled from"):
        pickle.loads(state)


def test_a_manifest_in_another_json_layout_reads_the_same(tmp_path: Path) -> None:
    entries = make_entries(30, length=7)
    out = write_artifact(tmp_path / "canonical", entries)
    canonical = CacheReader(out)
    other_path = writable_copy(out, tmp_path / "other")
    manifest = json.loads((other_path / "manifest.json").read_bytes())
    (other_path / "manifest.json").write_bytes(json.dumps(manifest, indent=1).encode())  # same content, other layout
    other = CacheReader(other_path)
    for name in ("keys", "first", "starts", "lengths"):
        assert (getattr(canonical.index, name) == getattr(other.index, name)).all(), name
    assert canonical.summary == other.summary and canonical.provenance == other.provenance
    for e in entries:
        assert canonical.metadata(e.key) == other.metadata(e.key) == manifest["entries"][e.key]
        assert canonical[e.key].texts == other[e.key].texts == e.texts
    assert verify(other_path) and not verify(out)  # verify names the layout


def test_touching_the_payload_under_a_live_reader_changes_nothing(
    artifact: tuple[Path, list[Entry]], tmp_path: Path
) -> None:
    path = writable_copy(artifact[0], tmp_path / "copy")
    reader = CacheReader(path)
    e = artifact[1][0]
    before = [t.tolist() for t in reader[e.key].sequences]
    stamp = os.stat(path / "cache.safetensors")
    os.utime(path / "cache.safetensors", ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 5_000_000_000))  # touch
    assert [t.tolist() for t in reader[e.key].sequences] == before


def test_open_caches_refuses_an_empty_path_and_bytes() -> None:
    with pytest.raises(FormatError, match="empty path"):
        open_caches("")
    with pytest.raises(FormatError, match="empty path"):
        open_caches(["", ""])
    with pytest.raises(TypeError, match=r"is not a str or os\.PathLike path"):
        open_caches(b"/tmp")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda r: r["model"].update(model_path="other/teacher"), "model.model_path is 'other/teacher'"),
        (lambda r: r["config"]["model"].update(dtype="bfloat16"), "config.model.dtype is 'bfloat16'"),
        (lambda r: r["tokenizer"].update(pad_token_id=5), "resolved_config.json tokenizer is"),
        (lambda r: r.update(config=[1, 2]), "got `array` - at `$.config`"),
        (lambda r: r.pop("generation"), "missing required field `generation`"),
    ],
)
def test_verify_checks_the_resolved_config_against_the_manifest(
    artifact: tuple[Path, list[Entry]], tmp_path: Path, edit: Any, says: str
) -> None:
    from gencache.artifact.manifest import json_file_bytes
    from gencache.cli.app import run as cli_run

    path = writable_copy(artifact[0], tmp_path / "copy")
    resolved = json.loads((path / "resolved_config.json").read_text(encoding="utf-8"))
    edit(resolved)
    (path / "resolved_config.json").write_bytes(json_file_bytes(resolved))  # canonical: only the content is wrong
    problems = verify(path)
    assert any(says in problem for problem in problems), problems
    assert cli_run(["inspect", str(path)]) == 0  # provenance for humans: inspect still shows the artifact


def test_a_published_artifact_is_recognised_by_its_run_without_reading_its_payload(tmp_path: Path) -> None:
    out = writable_copy(write_shard(tmp_path / "run", 0, 2, make_entries(8, sequences=2), "d" * 64), tmp_path / "c")
    assert is_published(out, "d" * 64)
    assert not is_published(out, "e" * 64)  # another run's
    payload = out / "cache.safetensors"
    data = bytearray(payload.read_bytes())
    data[-1] ^= 0xFF  # a token changed in place: what verify finds, not the publish's promise
    overwrite(payload, bytes(data))
    assert is_published(out, "d" * 64) and verify(out) != []
    overwrite(payload, bytes(data[:-8]))
    with pytest.raises(FormatError, match="truncated or extended"):
        is_published(out, "d" * 64)
    overwrite(payload, bytes(data))
    manifest = out / "manifest.json"
    overwrite(manifest, manifest.read_bytes()[:-40])
    with pytest.raises(FormatError, match="manifest"):
        is_published(out, "d" * 64)
    with pytest.raises(FormatError, match="does not exist"):
        is_published(tmp_path / "missing", "d" * 64)
