"""The writer and publish protocol on real files: golden bytes, reservation, backfill, rollback, duplicates,
cleanup on failure, publishing modes, permissions and ``clean``."""

from __future__ import annotations

import errno
import gc
import hashlib
import os
import signal
import socket
import struct
import subprocess
import weakref
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.torch

from gencache.artifact import publish as publish_module
from gencache.artifact.header import header_capacity
from gencache.artifact.manifest import MANIFEST_CHUNK_BYTES, build_summary, json_file_bytes
from gencache.artifact.publish import check_output_path, clean, probe_rename, publish
from gencache.artifact.reader import CacheReader, verify
from gencache.artifact.writer import ArtifactBuild, CacheWriter
from gencache.core.errors import FormatError, HeaderCapacityError, OutputExistsError, WriteError
from support.format_reference import manifest_object
from support.storage_helpers import PROVENANCE, RESOLVED, make_entries, tokens, write_artifact

A, B = "a" * 64, "b" * 64


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- golden bytes ----------------------------------------------------------------------------------------------
def test_golden_bytes_of_a_small_artifact(tmp_path: Path) -> None:
    out = tmp_path / "golden"
    with ArtifactBuild(out, provenance=PROVENANCE, header_capacity=header_capacity(2, 2, 3)) as build:
        assert build.writer.add(A, [tokens([1, 2, 3])], ["hi"], ["eos"])
        assert build.writer.add(B, [tokens([7]), tokens([8, 9])], ["x", "ÿ"], ["length", "stop_string"])
        build.writer.finalize(resolved_config={"seed": 1, "model": {"dtype": "float32"}}, summary={})
        assert build.publish() == probe_rename(tmp_path)  # renameat2 where the file system has it
    assert sorted(os.listdir(out)) == ["cache.safetensors", "manifest.json", "resolved_config.json"]

    provenance_json = (
        '{"dtype":"float32","model_path":"tiny/teacher","tokenizer":{"eos_token_id":2,"pad_token_id":0,'
        '"padding_side":"left"},"tokenizer_path":"tiny/teacher"}'
    )
    provenance_digest = sha(provenance_json.encode())
    # the header budget, by hand: metadata + 4 tensors x the longest member of this plan (2 entries x 2 x 3 tokens)
    metadata = '{"__metadata__":{"format_version":"3","provenance_digest":"' + "0" * 64 + '"}}'
    longest_member = ',"' + "a" * 64 + '.1":{"data_offsets":[96,96],"dtype":"I64","shape":[3]}'
    capacity = -(-(len(metadata) + 4 * len(longest_member)) // 8) * 8
    assert capacity == header_capacity(2, 2, 3) == 608

    header_json = (
        '{"__metadata__":{"format_version":"3","provenance_digest":"' + provenance_digest + '"},'
        f'"{A}.0":{{"data_offsets":[0,24],"dtype":"I64","shape":[3]}},'
        f'"{B}.0":{{"data_offsets":[24,32],"dtype":"I64","shape":[1]}},'
        f'"{B}.1":{{"data_offsets":[32,48],"dtype":"I64","shape":[2]}}}}'
    ).encode()
    data = struct.pack("<6q", 1, 2, 3, 7, 8, 9)
    payload = (out / "cache.safetensors").read_bytes()
    assert payload[:8] == b"\x60\x02\x00\x00\x00\x00\x00\x00"  # 608, little-endian
    assert payload[8 : 8 + len(header_json)] == header_json
    assert payload[8 + len(header_json) : 8 + 608] == b" " * (608 - len(header_json))
    assert payload[616:] == data
    assert len(payload) == 616 + 48

    d_a0, d_b0, d_b1 = sha(data[:24]), sha(data[24:32]), sha(data[32:])
    content_a = sha(
        (
            '{"finish_reasons":["eos"],"sequences":[{"digest":"' + d_a0 + '","dtype":"I64","shape":[3]}],"text":["hi"]}'
        ).encode()
    )
    content_b = sha(
        (
            '{"finish_reasons":["length","stop_string"],"sequences":[{"digest":"'
            + d_b0
            + '","dtype":"I64","shape":[1]},'
            '{"digest":"' + d_b1 + '","dtype":"I64","shape":[2]}],"text":["x","ÿ"]}'
        ).encode()
    )
    manifest = (
        '{"entries":{'
        f'"{A}":{{"content_digest":"{content_a}","finish_reasons":["eos"],"sequences":[{{"digest":"{d_a0}",'
        f'"dtype":"I64","shape":[3],"tensor":"{A}.0"}}],"text":["hi"]}},'
        f'"{B}":{{"content_digest":"{content_b}","finish_reasons":["length","stop_string"],"sequences":['
        f'{{"digest":"{d_b0}","dtype":"I64","shape":[1],"tensor":"{B}.0"}},'
        f'{{"digest":"{d_b1}","dtype":"I64","shape":[2],"tensor":"{B}.1"}}],"text":["x","ÿ"]}}}},'
        '"format_version":3,"payload":"cache.safetensors","provenance":' + provenance_json + ","
        f'"provenance_digest":"{provenance_digest}",'
        '"storage":"safetensors","summary":{"data_configs":[],"duplicates":0,'
        '"entries":2,"finish_reasons":{"eos":1,"length":1,"stop_string":1},"sequences":3,"shard":null,"tokens":6}}\n'
    )
    assert (out / "manifest.json").read_bytes() == manifest.encode()
    assert (out / "resolved_config.json").read_bytes() == b'{"model":{"dtype":"float32"},"seed":1}\n'

    loaded = safetensors.torch.load_file(out / "cache.safetensors")
    assert {name: t.tolist() for name, t in loaded.items()} == {f"{A}.0": [1, 2, 3], f"{B}.0": [7], f"{B}.1": [8, 9]}
    with safetensors.safe_open(out / "cache.safetensors", framework="pt") as handle:
        assert handle.metadata() == {"format_version": "3", "provenance_digest": provenance_digest}
        assert handle.get_tensor(f"{B}.1").tolist() == [8, 9]


# -- the reservation and the backfill ------------------------------------------------------------------------------
def test_an_unfinished_payload_is_rejected_by_safetensors_loaders(tmp_path: Path) -> None:
    w = CacheWriter(tmp_path, provenance=PROVENANCE, header_capacity=header_capacity(3, 1, 10))
    path = w.path
    for stage in range(3):
        raw = path.read_bytes()
        assert raw[8 : 8 + w.header_capacity] == b" " * w.header_capacity
        for load in (
            lambda: safetensors.safe_open(path, framework="pt"),
            lambda: safetensors.safe_open(path, framework="numpy"),
            lambda: safetensors.torch.load_file(path),
        ):
            with pytest.raises(Exception):  # noqa: B017 (safetensors raises its own error types)
                load()
        entry = make_entries(3)[stage]
        w.add(entry.key, entry.payload(), entry.texts, entry.finish_reasons)
    w.abort()
    assert os.listdir(tmp_path) == []


def test_finalize_backfills_the_header_in_place(tmp_path: Path) -> None:
    entries = make_entries(20, length=30)
    w = CacheWriter(tmp_path, provenance=PROVENANCE, header_capacity=header_capacity(20, 1, 40))
    for e in entries:
        w.add(e.key, e.payload(), e.texts, e.finish_reasons)
    before = w.path.read_bytes()
    inode = os.stat(w.path).st_ino
    w.finalize(resolved_config=RESOLVED, summary={})
    after = w.path.read_bytes()
    assert os.stat(w.path).st_ino == inode
    start = 8 + w.header_capacity
    assert after[start:] == before[start:] == b"".join(p for e in entries for p in e.payload())
    assert after[:8] == before[:8]
    assert sorted(os.listdir(tmp_path)) == ["cache.safetensors", "manifest.json", "resolved_config.json"]
    assert all(os.stat(tmp_path / n).st_mode & 0o777 == 0o444 for n in os.listdir(tmp_path))
    with safetensors.safe_open(w.path, framework="pt") as handle:
        assert sorted(handle.keys()) == sorted(f"{e.key}.0" for e in entries)


def test_header_capacity_overflow_removes_the_private_payload(tmp_path: Path) -> None:
    w = CacheWriter(tmp_path, provenance=PROVENANCE, header_capacity=header_capacity(1, 1, 5))
    for e in make_entries(3):
        w.add(e.key, e.payload(), e.texts, e.finish_reasons)
    with pytest.raises(HeaderCapacityError, match="reserved"):
        w.finalize(resolved_config=RESOLVED, summary={})
    assert os.listdir(tmp_path) == []
    with pytest.raises(WriteError, match="aborted"):
        w.finalize(resolved_config=RESOLVED, summary={})
    with pytest.raises(WriteError, match="aborted"):
        w.add(*_args(make_entries(1, start=9)[0]))


def test_capacity_overflow_in_a_build_publishes_nothing(tmp_path: Path) -> None:
    with pytest.raises(HeaderCapacityError):
        write_artifact(tmp_path / "out", make_entries(4), capacity=header_capacity(1, 1, 5))
    assert os.listdir(tmp_path) == []


def _args(e):  # type: ignore[no-untyped-def]
    return e.key, e.payload(), e.texts, e.finish_reasons


# -- duplicates and invalid input ------------------------------------------------------------------------------------
def test_identical_re_adds_are_no_ops_and_conflicting_ones_are_rejected(tmp_path: Path) -> None:
    e = make_entries(1, sequences=2)[0]
    w = CacheWriter(tmp_path, provenance=PROVENANCE, header_capacity=header_capacity(2, 2, 20))
    assert w.add(*_args(e)) is True
    size = os.stat(w.path).st_size
    assert w.add(e.key, [bytearray(p) for p in e.payload()], list(e.texts), list(e.finish_reasons)) is False
    assert os.stat(w.path).st_size == size
    for change in (
        {"seqs": [e.payload()[0], tokens([1])]},
        {"texts": [e.texts[0], "other"]},
        {"reasons": ["length", "length"]},
        {"seqs": e.payload()[:1], "texts": e.texts[:1], "reasons": e.finish_reasons[:1]},
    ):
        with pytest.raises(FormatError, match="Conflicting duplicate key"):
            w.add(
                e.key,
                change.get("seqs", e.payload()),
                change.get("texts", e.texts),
                change.get("reasons", e.finish_reasons),
            )
        assert os.stat(w.path).st_size == size
    assert list(w._records) == [e.key] and len(w._records) == 1


@pytest.mark.parametrize(
    ("key", "sequences", "texts", "reasons", "fragment"),
    [
        ("A" * 64, [tokens([1])], ["t"], ["eos"], "lowercase hex"),
        ("a" * 63, [tokens([1])], ["t"], ["eos"], "lowercase hex"),
        ("a" * 64, [], [], [], "no sequences"),
        ("a" * 64, [b""], ["t"], ["eos"], "at least one int64"),
        ("a" * 64, [b"\x01\x02\x03"], ["t"], ["eos"], "at least one int64"),
        ("a" * 64, tokens([1]), ["t"], ["eos"], "bytes-like"),
        ("a" * 64, [[1, 2]], ["t"], ["eos"], "bytes-like"),
        ("a" * 64, [tokens([1])], ["t", "u"], ["eos"], "one text and one finish reason"),
        ("a" * 64, [tokens([1])], ["t"], ["stop"], "finish reason"),
        ("a" * 64, [tokens([1])], [b"t"], ["eos"], "must be a str"),
        ("a" * 64, [tokens([1])], ["\ud800"], ["eos"], "not valid Unicode"),
        ("a" * 64, [np.arange(4, dtype=np.int64)[::2]], ["t"], ["eos"], "contiguous"),
        ("a" * 64, [np.arange(2, dtype=np.int32)], ["t"], ["eos"], "format 'i'"),
        ("a" * 64, [np.arange(2, dtype=np.float64)], ["t"], ["eos"], "format 'd'"),
        ("a" * 64, [np.arange(2, dtype=">i8")], ["t"], ["eos"], "format '>q'"),
        ("aa " * 21 + "a", [tokens([1])], ["t"], ["eos"], "lowercase hex"),
        (" " + "a" * 63, [tokens([1])], ["t"], ["eos"], "lowercase hex"),
        ("g" * 64, [tokens([1])], ["t"], ["eos"], "lowercase hex"),
        ("\u0660" * 64, [tokens([1])], ["t"], ["eos"], "lowercase hex"),
        (b"a" * 64, [tokens([1])], ["t"], ["eos"], "lowercase hex"),
        ("a" * 64, [tokens([1])], "t", ["eos"], "texts must be a list"),
        ("a" * 64, [tokens([1])], ["t"], "eos", "finish reasons must be a list"),
        ("a" * 64, [tokens([1])], [None], ["eos"], "must be a str"),
        ("a" * 64, [tokens([1])], ["t"], [["eos"]], "finish reason"),
        ("a" * 64, [tokens([1])], ["t"], [np.array(["eos"])], "finish reason"),
        ("a" * 64, [tokens([1]), tokens([2])], ["t", "\udfff"], ["eos", "eos"], "not valid Unicode"),
    ],
)
def test_invalid_entries_are_rejected_and_leave_the_writer_usable(
    tmp_path: Path, key: str, sequences: object, texts: list[object], reasons: list[str], fragment: str
) -> None:
    w = CacheWriter(tmp_path, provenance=PROVENANCE, header_capacity=header_capacity(2, 2, 20))
    size = os.stat(w.path).st_size
    with pytest.raises(FormatError, match=fragment):
        w.add(key, sequences, texts, reasons)  # type: ignore[arg-type]
    assert os.stat(w.path).st_size == size and len(w._records) == 0
    assert w.add(*_args(make_entries(1)[0]))


def test_int64_arrays_and_raw_bytes_are_accepted(tmp_path: Path) -> None:
    w = CacheWriter(tmp_path, provenance=PROVENANCE, header_capacity=header_capacity(4, 1, 3))
    for i, sequence in enumerate(
        [
            np.array([1, 2, 3], dtype=np.int64),
            bytearray(tokens([1, 2, 3])),
            memoryview(tokens([1, 2, 3])),
            tokens([1, 2, 3]),
        ]
    ):
        assert w.add(hashlib.sha256(bytes([i])).hexdigest(), [sequence], ["t"], ["eos"])
    assert len({r[2] for r in w._records.values()}) == 1  # one digest


def test_the_writer_keeps_no_reference_to_token_buffers(tmp_path: Path) -> None:
    w = CacheWriter(tmp_path, provenance=PROVENANCE, header_capacity=header_capacity(50, 1, 64))
    refs = []
    for i in range(50):
        array = np.arange(i, i + 64, dtype="<i8")
        refs.append(weakref.ref(array))
        w.add(hashlib.sha256(bytes([i])).hexdigest(), [array], ["t"], ["eos"])
        del array
    gc.collect()
    assert all(ref() is None for ref in refs)


def test_abort_is_idempotent_and_closes_the_writer(tmp_path: Path) -> None:
    w = CacheWriter(tmp_path, provenance=PROVENANCE, header_capacity=64)
    w.abort()
    w.abort()
    assert os.listdir(tmp_path) == []
    with pytest.raises(WriteError, match="aborted"):
        w.add(*_args(make_entries(1)[0]))


def test_invalid_writer_settings(tmp_path: Path) -> None:
    with pytest.raises(HeaderCapacityError, match="multiple of 8"):
        CacheWriter(tmp_path, provenance=PROVENANCE, header_capacity=100)
    with pytest.raises(FormatError, match="dtype"):
        CacheWriter(tmp_path, provenance={**PROVENANCE, "dtype": "int8"}, header_capacity=64)
    (tmp_path / "cache.safetensors").write_bytes(b"")
    with pytest.raises(WriteError, match="File exists"):
        CacheWriter(tmp_path, provenance=PROVENANCE, header_capacity=64)
    assert os.listdir(tmp_path) == ["cache.safetensors"]


def test_summary_and_resolved_config_of_a_finalized_artifact(tmp_path: Path) -> None:
    entries = make_entries(6, sequences=2)
    out = write_artifact(
        tmp_path / "out",
        entries,
        summary={"data_configs": [{"index": 0, "samples": 5, "unique": 5}, {"index": 1, "samples": 3, "unique": 2}]},
        resolved_config={"b": [1.5, None], "a": "é"},
    )
    summary = CacheReader(out).summary
    assert summary["entries"] == 6 and summary["sequences"] == 12 and summary["duplicates"] == 2
    assert sum(summary["finish_reasons"].values()) == 12
    assert summary["tokens"] == sum(len(s) for e in entries for s in e.sequences)
    assert (out / "resolved_config.json").read_text(encoding="utf-8") == '{"a":"é","b":[1.5,null]}\n'


def test_an_artifact_without_entries_publishes_and_reads(tmp_path: Path) -> None:
    out = write_artifact(tmp_path / "empty", [], capacity=header_capacity(0, 1, 1))
    reader = CacheReader(out)
    assert len(reader) == 0 and verify(out) == []
    assert safetensors.torch.load_file(out / "cache.safetensors") == {}


# -- the build context ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_any_error_in_a_build_removes_the_temporary_directory(tmp_path: Path, error: BaseException) -> None:
    handler = signal.getsignal(signal.SIGTERM)  # the build leaves the process's signals alone
    with (
        pytest.raises(type(error)),
        ArtifactBuild(tmp_path / "out", provenance=PROVENANCE, header_capacity=256) as build,
    ):
        assert build.temp_dir is not None and build.temp_dir.is_dir()
        assert signal.getsignal(signal.SIGTERM) is handler
        build.writer.add(*_args(make_entries(1)[0]))
        raise error
    assert os.listdir(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) is handler


def test_a_stop_as_the_temporary_directory_is_created_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal that lands the moment the temporary directory exists (before the build has noted it)."""
    make_directory = Path.mkdir

    def mkdir_then_stop(path: Path, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
        make_directory(path, mode, parents, exist_ok)
        if ".gencache-" in path.name:
            raise KeyboardInterrupt

    monkeypatch.setattr(Path, "mkdir", mkdir_then_stop)
    with pytest.raises(KeyboardInterrupt), ArtifactBuild(tmp_path / "out", provenance=PROVENANCE, header_capacity=256):
        pass
    assert os.listdir(tmp_path) == []


def test_a_stop_while_the_lock_is_taken_leaves_no_lock_file_and_no_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stopped(fd: int, operation: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(publish_module.fcntl, "flock", stopped)
    descriptors = set(os.listdir("/proc/self/fd"))
    with pytest.raises(KeyboardInterrupt):
        publish_module.hold_lock(tmp_path / ".out.gencache-test")
    assert os.listdir(tmp_path) == []
    assert set(os.listdir("/proc/self/fd")) <= descriptors


def test_temporary_directory_is_private_and_named_for_clean(tmp_path: Path) -> None:
    with ArtifactBuild(tmp_path / "runs" / "out", provenance=PROVENANCE, header_capacity=256) as build:
        assert build.temp_dir is not None
        name = build.temp_dir.name
        assert build.temp_dir.parent == tmp_path / "runs"
        assert name.startswith(".out.gencache-") and f"-{os.getpid()}-" in name
        assert os.stat(build.temp_dir).st_mode & 0o777 == 0o700
        assert clean(tmp_path / "runs") == []  # our own process is alive
    assert os.listdir(tmp_path / "runs") == []  # left without publishing: nothing published, nothing left


def test_publish_requires_a_finalized_writer(tmp_path: Path) -> None:
    with (
        ArtifactBuild(tmp_path / "out", provenance=PROVENANCE, header_capacity=256) as build,
        pytest.raises(WriteError, match="Finalize the writer"),
    ):
        build.publish()
    with pytest.raises(WriteError, match="inside the with block"):
        ArtifactBuild(tmp_path / "out", provenance=PROVENANCE, header_capacity=256).publish()
    assert os.listdir(tmp_path) == []


def test_a_second_publish_says_the_artifact_is_published_already(tmp_path: Path) -> None:
    with ArtifactBuild(tmp_path / "out", provenance=PROVENANCE, header_capacity=256) as build:
        build.writer.finalize(resolved_config={}, summary={})
        assert build.publish() in ("renameat2", "rename")
        with pytest.raises(WriteError, match="published already"):
            build.publish()
    assert verify(tmp_path / "out") == []


@pytest.mark.parametrize("kind", ["file", "dir", "empty-dir", "dangling-symlink"])
def test_an_existing_output_path_is_refused_before_anything_is_created(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("x")
    elif kind == "dangling-symlink":
        out.symlink_to(tmp_path / "missing")
    else:
        out.mkdir()
        if kind == "dir":
            (out / "f").write_text("x")
    shown = " as a dangling symlink to .*missing; choose a new" if kind == "dangling-symlink" else "; choose a new"
    with pytest.raises(OutputExistsError, match=f"already exists{shown}"):
        check_output_path(out)
    with pytest.raises(OutputExistsError), ArtifactBuild(out, provenance=PROVENANCE, header_capacity=256):
        pass
    assert os.listdir(tmp_path) == ["out"]
    assert OutputExistsError.exit_code == 2


def test_an_empty_directory_at_the_output_is_never_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with (
        pytest.raises(OutputExistsError, match="appeared while generating"),
        ArtifactBuild(out, provenance=PROVENANCE, header_capacity=256) as build,
    ):
        build.writer.add(*_args(make_entries(1)[0]))
        build.writer.finalize(resolved_config=RESOLVED, summary={})
        out.mkdir()
        build.publish()
    assert os.listdir(tmp_path) == ["out"] and os.listdir(out) == []


def test_published_files_are_read_only_and_the_directory_follows_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        out = write_artifact(tmp_path / "out", make_entries(2))
    finally:
        os.umask(previous)
    assert os.stat(out).st_mode & 0o777 == 0o750
    assert {os.stat(out / n).st_mode & 0o777 for n in os.listdir(out)} == {0o444}


def _publish_over(tmp_path: Path, name: str, occupant: str | None) -> tuple[Path, str | None]:
    """Publish a finished build to ``tmp_path / name`` where ``occupant`` (an empty directory, a file, a symlink)
    appeared meanwhile; return the output and the mode publish used (None when it refused)."""
    out = tmp_path / name
    with ArtifactBuild(out, provenance=PROVENANCE, header_capacity=256) as build:
        build.writer.add(*_args(make_entries(1)[0]))
        build.writer.finalize(resolved_config=RESOLVED, summary={})
        if occupant == "directory":
            out.mkdir()
        elif occupant == "file":
            out.write_text("mine")
        elif occupant == "symlink":
            out.symlink_to(tmp_path / "nowhere")
        try:
            return out, build.publish()
        except OutputExistsError:
            return out, None


@pytest.mark.parametrize("occupant", ["directory", "file", "symlink"])
def test_publish_never_replaces_what_appeared_at_the_output_and_records_how_it_renamed(
    tmp_path: Path, occupant: str
) -> None:
    out, mode = _publish_over(tmp_path, "out", occupant)
    assert mode is None  # refused, whichever rename the file system offers
    if occupant == "directory":
        assert os.listdir(out) == []
    elif occupant == "file":
        assert out.read_text() == "mine"
    else:
        assert os.path.islink(out)
    assert sorted(os.listdir(tmp_path)) == ["out"]  # the build's temporary directory went with the refusal
    published, mode = _publish_over(tmp_path, "free", None)
    assert mode in ("renameat2", "rename") and verify(published) == []
    supported = probe_rename(tmp_path)
    if supported != "renameat2":
        pytest.skip("this file system has no renameat2(RENAME_NOREPLACE): only the guarantee was checked")
    assert mode == "renameat2"


def test_a_finished_but_unpublished_temporary_directory_is_no_artifact(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with ArtifactBuild(out, provenance=PROVENANCE, header_capacity=256) as build:
        build.writer.add(*_args(make_entries(1)[0]))
        build.writer.finalize(resolved_config=RESOLVED, summary={})
        temp = build.temp_dir
        assert temp is not None and sorted(os.listdir(temp)) == sorted(
            os.listdir(write_artifact(tmp_path / "w", make_entries(1)))
        )
        with pytest.raises(FormatError, match="never published"):  # what a kill -9 just before the rename leaves
            CacheReader(temp)
        assert any("never published" in problem for problem in verify(temp))
        build.publish()
    assert verify(out) == [] and len(CacheReader(out)) == 1


def test_publish_falls_back_to_a_plain_rename_and_reports_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert probe_rename(tmp_path / "new" / "parent") in ("renameat2", "rename")
    assert os.listdir(tmp_path / "new" / "parent") == []
    # a filesystem without RENAME_NOREPLACE answers EINVAL: probe and publish fall back to rename
    monkeypatch.setattr(publish_module, "_renameat2", lambda source, target: errno.EINVAL)
    assert probe_rename(tmp_path) == "rename"
    with ArtifactBuild(tmp_path / "b", provenance=PROVENANCE, header_capacity=256) as build:
        build.writer.add(*_args(make_entries(1)[0]))
        build.writer.finalize(resolved_config=RESOLVED, summary={})
        assert build.publish() == "rename"
    assert verify(tmp_path / "b") == []
    # the fallback still never replaces an existing path, empty or not
    temp = tmp_path / ".c.tmp"
    temp.mkdir()
    (temp / "f").write_text("x")
    (tmp_path / "c").mkdir()
    with pytest.raises(OutputExistsError):
        publish(temp, tmp_path / "c")
    assert os.listdir(tmp_path / "c") == []


# -- clean ------------------------------------------------------------------------------------------------------------
def test_clean_removes_only_directories_of_dead_writers(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = publish_module.host_tag()
    names = {
        "dead": f".out.gencache-{host}-{dead.pid}-0123abcd",
        "alive": f".out.gencache-{host}-{os.getpid()}-0123abcd",
        "other-host": f".out.gencache-{host}x-{dead.pid}-0123abcd",
        "unrelated": f".out.other-{host}-{dead.pid}-0123abcd",
        "probe": f".probe.rename-probe-a.gencache-{host}-{dead.pid}-89abcdef",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "cache.safetensors").write_bytes(b"x")
    (tmp_path / f"{names['dead']}.lock").write_bytes(b"")  # its writer's lock file, which nobody holds
    os.chmod(tmp_path / names["dead"] / "cache.safetensors", 0o444)
    (tmp_path / f".link.gencache-{host}-{dead.pid}-0123abcd").symlink_to(tmp_path / names["alive"])
    removed = clean(tmp_path)
    assert sorted(p.name for p in removed) == sorted([names["dead"], names["probe"]])
    assert sorted(os.listdir(tmp_path)) == sorted(
        [names["alive"], names["other-host"], names["unrelated"], f".link.gencache-{host}-{dead.pid}-0123abcd"]
    )
    assert socket.gethostname()  # the host tag is derived from it


# -- the append fast path and its fallbacks ----------------------------------------------------------------------------
class _Str(str):
    pass


def test_single_sequence_re_adds_and_conflicts(tmp_path: Path) -> None:
    seq = tokens([1, 2, 3])
    w = CacheWriter(tmp_path, provenance=PROVENANCE, header_capacity=header_capacity(3, 1, 3))
    assert w.add(A, [seq], ["tëxt"], ["length"]) is True
    size = os.stat(w.path).st_size
    for same in (
        ([seq], ["tëxt"], ["length"]),
        ((seq,), ("tëxt",), ("length",)),
        ([bytearray(seq)], ["tëxt"], ["length"]),
        ([np.array([1, 2, 3], dtype=np.int64)], [_Str("tëxt")], [_Str("length")]),
    ):
        assert w.add(A, *same) is False
    for different in (
        ([tokens([1, 2, 4])], ["tëxt"], ["length"]),
        ([tokens([1, 2])], ["tëxt"], ["length"]),
        ([seq], ["text"], ["length"]),
        ([seq], ["tëxt"], ["eos"]),
        ([seq, seq], ["tëxt", "tëxt"], ["length", "length"]),
    ):
        with pytest.raises(FormatError, match="Conflicting duplicate key"):
            w.add(A, *different)
    assert w.add(B, [tokens([5]), tokens([6])], [_Str("a"), "b"], [_Str("eos"), "eos"]) is True
    assert w.add(B, [tokens([5]), tokens([6])], ["a", "b"], ["eos", "eos"]) is False
    assert os.stat(w.path).st_size == size + 16
    w.finalize(resolved_config=RESOLVED, summary={})
    assert verify(tmp_path) == []


def test_a_manifest_of_many_pieces_is_streamed_whole(tmp_path: Path) -> None:
    count = 1_500  # about 1.6 MB of manifest: more than one MANIFEST_CHUNK_BYTES piece
    w = CacheWriter(tmp_path, provenance=PROVENANCE, header_capacity=header_capacity(count, 1, 2))
    for i in range(count):
        w.add(hashlib.sha256(b"%d" % i).hexdigest(), [tokens([i, i + 1])], [f"{i} " + "é" * 500], ["eos"])
    records = dict(w._records)
    w.finalize(resolved_config=RESOLVED, summary={})
    manifest = (tmp_path / "manifest.json").read_bytes()
    assert len(manifest) > MANIFEST_CHUNK_BYTES
    assert manifest == json_file_bytes(manifest_object(PROVENANCE, records, build_summary(records, {})))
    assert verify(tmp_path) == []


def test_clean_of_a_missing_parent_is_bad_input(tmp_path: Path) -> None:
    from gencache.core.errors import ConfigError

    with pytest.raises(ConfigError, match="not a directory"):
        publish_module.clean(tmp_path / "missing")


def test_a_failed_parent_sync_after_the_rename_says_the_artifact_was_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / ".out.tmp"
    temp.mkdir()
    (temp / "f").write_text("x")
    real_fsync_dir = publish_module.fsync_dir

    def failing_for_parent(path: Path) -> None:
        if Path(path) == tmp_path:
            raise OSError(errno.EIO, "Input/output error")
        real_fsync_dir(path)

    monkeypatch.setattr(publish_module, "fsync_dir", failing_for_parent)
    with pytest.raises(WriteError, match="was published, but syncing"):
        publish_module.publish(temp, tmp_path / "out")
    assert (tmp_path / "out" / "f").read_text() == "x"
