"""Corruption corpus: every damaged artifact is refused with a GencacheError at open, on read, or by verify;
never a crash, never wrong data.

Each case damages a writable copy of one small artifact, then opens it, reads every entry and verifies it. The
only bytes whose change goes unnoticed are the manifest summary's informational ``data_configs[i].unique``
counts and ``shard.run_digest`` (the summary is informational: no digest covers it); for those the test checks that
every entry still reads back exactly.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gencache.artifact.names import make_shard_info, shard_of
from gencache.artifact.reader import CacheReader, verify
from gencache.core.canonical import canonical_bytes, json_digest
from gencache.core.errors import GencacheError
from support.storage_helpers import Entry, make_entries, overwrite, writable_copy, write_artifact

MASKS = (0x01, 0x20, 0x80)


class Corpus:
    """One pristine artifact and a writable copy that each case damages and then restores."""

    def __init__(self, root: Path, sequences: int) -> None:
        entries = make_entries(4, length=6, sequences=sequences)
        texts = ('naïve ✓ "quoted"', "日本語")[:sequences]
        entries[1] = Entry(entries[1].key, entries[1].sequences, texts, entries[1].finish_reasons)
        self.sequences = sequences
        self.entries = entries
        count = 1
        shard = make_shard_info(shard_of(entries[0].key, count), count, "c" * 64)
        self.pristine = write_artifact(
            root / "pristine",
            entries,
            summary={
                "data_configs": [{"index": 0, "samples": 4, "unique": 4}, {"index": 1, "samples": 1, "unique": 1}],
                "shard": shard,
                "duplicates": 1,
            },
        )
        self.work = writable_copy(self.pristine, root / "work")
        self.files = {name: (self.pristine / name).read_bytes() for name in os.listdir(self.pristine)}
        self.expected = {e.key: ([list(s) for s in e.sequences], e.texts, e.finish_reasons) for e in entries}

    def restore(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
        writable_copy(self.pristine, self.work)

    def rewrite(self, name: str, data: bytes) -> None:
        self.dirty.add(name)
        overwrite(self.work / name, data)

    def outcome(self) -> str:
        """Where the damage was noticed: ``open``, ``read``, ``verify``, or ``accepted`` (then with exact data)."""
        try:
            reader = CacheReader(self.work)
        except GencacheError:
            return "open"
        got = {}
        try:
            for k in reader:
                generation = reader[k]
                got[k] = ([t.tolist() for t in generation.sequences], generation.texts, generation.finish_reasons)
        except GencacheError:
            return "read"
        if verify(self.work):
            return "verify"
        assert got == self.expected, "damage went unnoticed and changed the data"
        return "accepted"

    def check(self, damage: Callable[[], None], label: str) -> str:
        """Apply ``damage`` to the working copy, report where it was noticed, and undo it."""
        self.dirty: set[str] = set()
        damage()
        try:
            return self.outcome()
        finally:
            if self.dirty and sorted(os.listdir(self.work)) == sorted(self.files):
                for name in self.dirty:
                    overwrite(self.work / name, self.files[name])
            else:
                self.restore()


@pytest.fixture(scope="module", params=[2, 1], ids=["two-sequences", "one-sequence"])
def corpus(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Corpus]:
    """Entries of two sequences (the reader's general path) and of one (its canonical scan, checked here)."""
    yield Corpus(tmp_path_factory.mktemp("corpus"), request.param)


def test_the_pristine_artifact_is_accepted(corpus: Corpus) -> None:
    assert corpus.outcome() == "accepted"


def test_truncations_of_the_payload_at_every_offset(corpus: Corpus) -> None:
    data = corpus.files["cache.safetensors"]
    for size in range(len(data)):
        assert (
            corpus.check(lambda size=size: corpus.rewrite("cache.safetensors", data[:size]), f"payload[:{size}]")
            == "open"
        )


def test_truncations_of_the_manifest_and_resolved_config(corpus: Corpus) -> None:
    manifest = corpus.files["manifest.json"]
    for size in range(len(manifest)):
        outcome = corpus.check(lambda size=size: corpus.rewrite("manifest.json", manifest[:size]), f"manifest[:{size}]")
        assert outcome == ("verify" if size == len(manifest) - 1 else "open"), size  # only the newline is missing
    resolved = corpus.files["resolved_config.json"]
    for size in range(len(resolved)):
        assert (
            corpus.check(lambda size=size: corpus.rewrite("resolved_config.json", resolved[:size]), "resolved")
            == "verify"
        )


def flipped(data: bytes, offset: int, mask: int) -> bytes:
    return data[:offset] + bytes([data[offset] ^ mask]) + data[offset + 1 :]


def test_byte_flips_in_the_length_prefix_and_header(corpus: Corpus) -> None:
    """Refused at open; a tensor's key changed into another key is refused when that entry is read (the open
    does not read the manifest's entries, which name the keys too)."""
    data = corpus.files["cache.safetensors"]
    capacity = int.from_bytes(data[:8], "little")
    json_end = 8 + len(data[8 : 8 + capacity].rstrip(b" "))
    in_keys = {data.index(e.key.encode()) + i for e in corpus.entries for i in range(len(e.key))}
    offsets = [*range(min(json_end + 8, 8 + capacity)), *range(json_end + 8, 8 + capacity, 13)]
    for offset in offsets:
        for mask in MASKS:
            damaged = flipped(data, offset, mask)
            outcome = corpus.check(lambda d=damaged: corpus.rewrite("cache.safetensors", d), f"header {offset}^{mask}")
            assert outcome in (("open", "read") if offset in in_keys else ("open",)), (offset, mask)


def test_byte_flips_in_the_tensor_data_are_found_on_read(corpus: Corpus) -> None:
    data = corpus.files["cache.safetensors"]
    start = 8 + int.from_bytes(data[:8], "little")
    for offset in range(start, len(data)):
        for mask in (0x01, 0x80):
            damaged = flipped(data, offset, mask)
            outcome = corpus.check(lambda d=damaged: corpus.rewrite("cache.safetensors", d), f"data {offset}")
            assert outcome == "read", offset


def informational_spans(manifest: bytes) -> list[range]:
    text = manifest.decode("utf-8")
    spans = [range(m.start(1), m.end(1)) for m in re.finditer(r'"unique":(\d+)', text)]
    spans += [range(m.start(1), m.end(1)) for m in re.finditer(r'"run_digest":"([0-9a-f]{64})"', text)]
    assert len(spans) == 3
    return [range(len(text[: s.start].encode()), len(text[: s.stop].encode())) for s in spans]


@pytest.mark.slow  # every byte of the manifest, three flips each, under both corpora
def test_byte_flips_everywhere_in_the_manifest(corpus: Corpus) -> None:
    manifest = corpus.files["manifest.json"]
    unprotected = informational_spans(manifest)
    outcomes: dict[str, int] = {}
    for offset in range(len(manifest)):
        for mask in MASKS:
            damaged = flipped(manifest, offset, mask)
            outcome = corpus.check(lambda d=damaged: corpus.rewrite("manifest.json", d), f"manifest {offset}^{mask}")
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if not any(offset in span for span in unprotected):
                assert outcome != "accepted", (offset, mask, manifest[max(0, offset - 30) : offset + 30])
    assert outcomes.get("read", 0) > 0 and outcomes.get("open", 0) > 0


# -- structural damage ---------------------------------------------------------------------------------------------
def test_extra_missing_and_linked_files(corpus: Corpus, tmp_path: Path) -> None:
    work = corpus.work
    outside = tmp_path / "outside"
    outside.mkdir()

    def extra(name: str) -> Callable[[], None]:
        return lambda: (work / name).write_text("x")

    def missing(name: str) -> Callable[[], None]:
        return lambda: (work / name).unlink()

    def linked(name: str) -> Callable[[], None]:
        def damage() -> None:
            shutil.copy(work / name, outside / name)
            (work / name).unlink()
            (work / name).symlink_to(outside / name)

        return damage

    def directory(name: str) -> Callable[[], None]:
        def damage() -> None:
            (work / name).unlink()
            (work / name).mkdir()

        return damage

    cases = [extra("README.md"), extra(".cache.safetensors.tmp"), extra(".hidden")]
    for name in ("cache.safetensors", "manifest.json", "resolved_config.json"):
        cases += [missing(name), linked(name), directory(name)]
    for damage in cases:
        assert corpus.check(damage, "structure") == "open"
    assert corpus.outcome() == "accepted"


def test_the_artifact_path_itself_must_be_a_directory(corpus: Corpus, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for path in (tmp_path / "file", tmp_path / "missing"):
        with pytest.raises(GencacheError):
            CacheReader(path)
        assert verify(path) and "does not exist" in verify(tmp_path / "missing")[0]


def rewritten_manifest(corpus: Corpus, edit: Callable[[dict], None]) -> Callable[[], None]:  # type: ignore[type-arg]
    def damage() -> None:
        manifest = json.loads(corpus.files["manifest.json"])
        edit(manifest)
        corpus.rewrite("manifest.json", canonical_bytes(manifest) + b"\n")

    return damage


@pytest.mark.parametrize("version", [2, 4, 3.0, True, "3", None])
def test_wrong_format_versions(corpus: Corpus, version: object) -> None:
    assert (
        corpus.check(rewritten_manifest(corpus, lambda m: m.__setitem__("format_version", version)), "version")
        == "open"
    )


def test_tampered_digests_and_provenance(corpus: Corpus) -> None:
    first, second = corpus.entries[0].key, corpus.entries[1].key

    def other_tensor_digest(m: dict) -> None:  # type: ignore[type-arg]
        entry = m["entries"][first]
        entry["sequences"][0]["digest"] = "0" * 64
        # an attacker who also fixes the content digest is still caught by the payload bytes
        entry["content_digest"] = json_digest(
            {
                "sequences": [{k: r[k] for k in ("dtype", "shape", "digest")} for r in entry["sequences"]],
                "text": entry["text"],
                "finish_reasons": entry["finish_reasons"],
            }
        )

    def swapped_reasons(m: dict) -> None:  # type: ignore[type-arg]
        # the summary's finish-reason counts stay right; both entries' content digests no longer match
        a, b = m["entries"][first]["finish_reasons"], m["entries"][second]["finish_reasons"]
        assert a[0] != b[0]
        a[0], b[0] = b[0], a[0]

    edits: list[tuple[Callable[[dict], None], str]] = [  # type: ignore[type-arg]
        (other_tensor_digest, "read"),
        (lambda m: m["entries"][first].__setitem__("content_digest", "0" * 64), "read"),
        (lambda m: m["entries"][second]["text"].__setitem__(0, "forged"), "read"),
        # reversing the reasons of a one-sequence entry changes nothing
        (lambda m: m["entries"][second]["finish_reasons"].reverse(), "read" if corpus.sequences > 1 else "accepted"),
        (swapped_reasons, "read"),
        (lambda m: m["provenance"].__setitem__("model_path", "other"), "open"),
        (lambda m: m.__setitem__("provenance_digest", "0" * 64), "open"),
        # an entry is checked when it is first read (the open reads the header and the manifest's other members)
        (lambda m: m["entries"][first]["sequences"][0].__setitem__("digest", "A" * 64), "read"),
        (lambda m: m["entries"].pop(second), "read"),
        (lambda m: m["summary"].__setitem__("tokens", 1), "open"),
        (lambda m: m["summary"].__setitem__("shard", None), "accepted"),
        (lambda m: m.__setitem__("extra", 1), "open"),
    ]
    for edit, expected in edits:
        assert corpus.check(rewritten_manifest(corpus, edit), "tamper") == expected

    def consistent_provenance(m: dict) -> None:  # type: ignore[type-arg]
        m["provenance"]["model_path"] = "other"
        m["provenance_digest"] = json_digest(m["provenance"])  # the payload metadata still names the old digest

    assert corpus.check(rewritten_manifest(corpus, consistent_provenance), "provenance") == "open"

    def non_canonical() -> None:
        corpus.rewrite("manifest.json", json.dumps(json.loads(corpus.files["manifest.json"]), indent=1).encode())

    assert corpus.check(non_canonical, "indent") == "verify"


def test_a_lone_surrogate_in_a_manifest_text_is_an_integrity_error(corpus: Corpus) -> None:
    def damage() -> None:
        manifest = json.loads(corpus.files["manifest.json"])
        manifest["entries"][corpus.entries[2].key]["text"][0] = "\ud800"
        corpus.rewrite("manifest.json", json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode() + b"\n")

    assert corpus.check(damage, "surrogate") == "read"


def test_swapped_tensor_offsets_never_serve_another_entrys_tokens(corpus: Corpus) -> None:
    data = corpus.files["cache.safetensors"]
    capacity = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + capacity])
    names = sorted((n for n in header if n != "__metadata__"), key=lambda n: header[n]["data_offsets"])
    same = [(a, b) for a in names for b in names if a < b and header[a]["shape"] == header[b]["shape"]]
    assert same
    a, b = same[0]
    header[a]["data_offsets"], header[b]["data_offsets"] = header[b]["data_offsets"], header[a]["data_offsets"]
    body = canonical_bytes(header)
    damaged = data[:8] + body + b" " * (capacity - len(body)) + data[8 + capacity :]
    assert corpus.check(lambda: corpus.rewrite("cache.safetensors", damaged), "swap") == "read"


def test_appended_bytes_and_other_length_prefixes(corpus: Corpus) -> None:
    data = corpus.files["cache.safetensors"]
    capacity = int.from_bytes(data[:8], "little")
    variants = [data + b"\0" * 8, data + b" ", data[:-8]]
    for value in (0, 8, capacity - 8, capacity + 8, capacity + 4, 100_000_008, 2**64 - 8):
        variants.append(value.to_bytes(8, "little") + data[8:])
    spaces_only = data[:8] + b" " * capacity + data[8 + capacity :]
    variants.append(spaces_only)  # what a crash before finalize leaves
    for damaged in variants:
        assert corpus.check(lambda d=damaged: corpus.rewrite("cache.safetensors", d), "prefix") == "open"


def test_deeply_nested_json_is_refused_not_a_crash(corpus: Corpus) -> None:
    nested = b"[" * 200_000 + b"]" * 200_000
    assert corpus.check(lambda: corpus.rewrite("manifest.json", nested + b"\n"), "nested manifest") == "open"
    assert corpus.check(lambda: corpus.rewrite("resolved_config.json", nested + b"\n"), "nested resolved") == "verify"
    data = corpus.files["cache.safetensors"]
    capacity = int.from_bytes(data[:8], "little")
    depth = (capacity - 7) // 2
    deep = b'{"a":' + b"[" * depth + b"]" * depth + b"}"
    deep += b" " * (capacity - len(deep))
    assert (
        corpus.check(lambda: corpus.rewrite("cache.safetensors", data[:8] + deep + data[8 + capacity :]), "deep")
        == "open"
    )


def test_a_resolved_config_that_is_not_a_json_object(corpus: Corpus) -> None:
    for data in (b"[1]\n", b"\xff\n", b"{\n"):
        assert corpus.check(lambda d=data: corpus.rewrite("resolved_config.json", d), "resolved") == "verify"
