"""The reader's index: it returns exactly what the encoders wrote, refuses a header byte or a manifest literal
changed (at open, or when that entry is read), and reads the same content in another manifest layout the same."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gencache.artifact._index import CompactIndex, build_index
from gencache.artifact.header import build_header
from gencache.artifact.manifest import build_summary, iter_manifest_bytes, provenance_digest
from gencache.artifact.names import FINISH_REASONS, LENGTH_PREFIX_BYTES, TOKEN_BYTES, Record
from gencache.core.errors import FormatError
from support.format_reference import make_record, record_fields
from support.storage_helpers import PROVENANCE, key


def encoded(records: dict[str, Record], *, padding: int = 8) -> tuple[bytes, bytes, int]:
    """``(manifest, header bytes after the length prefix, payload size)`` as the writer writes them."""
    manifest = b"".join(iter_manifest_bytes(PROVENANCE, records, build_summary(records, {})))
    body = build_header(records, provenance_digest(PROVENANCE))
    capacity = -(-len(body) // 8) * 8 + padding
    data = sum(TOKEN_BYTES * sum(record_fields(r)[1]) for r in records.values())
    return manifest, body + b" " * (capacity - len(body)), LENGTH_PREFIX_BYTES + capacity + data


def contents(index: CompactIndex) -> dict[str, Any]:
    """What a reader gets from an index."""
    entries = [index.entry(i) for i in range(len(index.keys))]
    return {
        **{name: getattr(index, name).tolist() for name in ("keys", "first", "starts", "lengths")},
        "entries": [entry for entry, _ in entries],
        "texts": [json.loads(index.manifest[start:end]) for _, (start, end) in entries],
        "members": index.members,
    }


def check_index(records: dict[str, Record]) -> None:
    """The index of what the encoders write for ``records`` holds each entry, text and length they wrote."""
    manifest, header, size = encoded(records)
    index = build_index(manifest, header, size)
    expected = json.loads(manifest)["entries"]
    assert len(index.keys) == len(records)
    for position, k in enumerate(sorted(records)):
        _, lengths, _, texts, _ = record_fields(records[k])
        assert index.key(position) == k and index.find(k) == position
        assert index.entry(position)[0] == expected[k]
        assert index.lengths[index.first[position] : index.first[position + 1]].tolist() == list(lengths)
        start, end = index.entry(position)[1]
        assert json.loads(index.manifest[start:end]) == list(texts)


_keys = st.text("0123456789abcdef", min_size=64, max_size=64)  # around "__metadata__" in the header's order
_texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)


@st.composite
def _records(draw: Any) -> dict[str, Record]:
    """Entries of one sequence (most) or several, every finish reason, any Unicode text JSON can carry."""
    keys = draw(st.lists(_keys, max_size=12, unique=True))
    several = draw(st.booleans())
    records, cursor = {}, 0
    for k in keys:
        lengths = draw(st.lists(st.integers(1, 10**12), min_size=1, max_size=3 if several else 1))
        digests = [draw(st.binary(min_size=32, max_size=32)) for _ in lengths]
        texts = [draw(_texts) for _ in lengths]
        reasons = [draw(st.sampled_from(FINISH_REASONS)) for _ in lengths]
        records[k] = make_record(cursor, lengths, digests, texts, reasons)
        cursor += TOKEN_BYTES * sum(lengths)
    return records


@settings(deadline=None, max_examples=300)
@given(records=_records())
def test_the_index_returns_what_the_encoders_wrote(records: dict[str, Record]) -> None:
    check_index(records)


def make_records(count: int, sequences: int = 1) -> dict[str, Record]:
    """``count`` entries with every finish reason, Unicode and escaped texts, lengths of 1 to 13 digits."""
    records, cursor = {}, 0
    texts = ("", "plain", 'naïve ✓ "quoted" \\', "日本語\n\t\x00", "\U0001f600\u2028")
    for i in range(count):
        lengths = [10 ** (i % 13) + s for s in range(sequences)]
        digests = [hashlib.sha256(f"{i}.{s}".encode()).digest() for s in range(sequences)]
        reasons = [FINISH_REASONS[(i + s) % len(FINISH_REASONS)] for s in range(sequences)]
        records[key(i)] = make_record(cursor, lengths, digests, [texts[i % len(texts)]] * sequences, reasons)
        cursor += TOKEN_BYTES * sum(lengths)
    return records


@pytest.mark.parametrize(("count", "sequences"), [(0, 1), (1, 1), (5, 1), (9000, 1), (1, 2), (7, 3), (3, 12)])
def test_from_no_entry_to_entries_of_many_sequences(count: int, sequences: int) -> None:
    check_index(make_records(count, sequences))


def refused(manifest: bytes, header: bytes, size: int) -> bool:
    """Whether the index refuses these bytes: at open, or when one of its entries is read."""
    try:
        index = build_index(manifest, header, size)
        for position in range(len(index.keys)):
            index.entry(position)
    except FormatError:
        return True
    return False


def changed(data: bytes, offset: int) -> list[bytes]:
    """``data`` with the byte at ``offset`` changed: a bit flipped (two ways) or a space (unless it is one)."""
    return [
        data[:offset] + bytes([byte]) + data[offset + 1 :]
        for byte in {data[offset] ^ 0x01, data[offset] ^ 0x20, ord(" ")} - {data[offset]}
    ]


MANIFEST_LITERALS = (
    '":{"content_digest":"',
    '","finish_reasons":[',
    '],"sequences":[{"digest":"',
    '","dtype":"I64","shape":[',
    '],"tensor":"',
    '"}],"text":[',
)


@pytest.mark.parametrize("sequences", [1, 2])
def test_a_byte_changed_in_the_header_or_a_manifest_literal_is_refused(sequences: int) -> None:
    """Any change (a bit flipped, a space) of a header byte outside the keys, or of a literal the manifest
    encoder writes around an entry's values, makes a header or manifest the format refuses: at open (the header)
    or when the entry is read (the manifest)."""
    records = make_records(3, sequences)
    manifest, header, size = encoded(records)
    assert not refused(manifest, header, size)
    in_keys = {
        at + i for k in records for at in range(len(header)) if header.startswith(k.encode(), at) for i in range(64)
    }
    for offset in range(len(header.rstrip(b" ")) + 1):
        if offset not in in_keys:
            for damaged in changed(header, offset):
                with pytest.raises(FormatError):
                    build_index(manifest, damaged, size)
    for literal in MANIFEST_LITERALS:
        at = manifest.index(literal.encode())
        for offset in range(at, at + len(literal)):
            for damaged in changed(manifest, offset):
                assert refused(damaged, header, size), (literal, offset)


@pytest.mark.parametrize("sequences", [1, 2])
def test_a_header_with_its_metadata_out_of_sorted_order_is_refused(sequences: int) -> None:
    """The same members with ``__metadata__`` moved to the front or the end: not the canonical header."""
    records = make_records(16, sequences)
    assert {k[0].isdigit() for k in records} == {True, False}  # "__metadata__" sorts between the two kinds
    manifest, header, size = encoded(records)
    document = json.loads(header)
    metadata = document.pop("__metadata__")

    def body(members: dict[str, Any]) -> bytes:
        text = json.dumps(members, separators=(",", ":")).encode()
        return text + b" " * (len(header) - len(text))

    assert not refused(manifest, body(dict(sorted((document | {"__metadata__": metadata}).items()))), size)
    for moved in ({"__metadata__": metadata} | document, document | {"__metadata__": metadata}):
        assert refused(manifest, body(moved), size)


@pytest.mark.parametrize(
    "layout",
    [
        lambda m: json.dumps(json.loads(m), indent=1).encode(),
        lambda m: json.dumps(json.loads(m), separators=(",", ":"), ensure_ascii=True).encode(),
        lambda m: json.dumps(dict(reversed(json.loads(m).items())), separators=(",", ":")).encode(),
        lambda m: b" " + m,
    ],
    ids=["indented", "ascii-escaped", "members-reordered", "leading-space"],
)
def test_the_same_content_in_another_layout_reads_the_same(layout: Any) -> None:
    records = make_records(4)
    manifest, header, size = encoded(records)
    assert contents(build_index(layout(manifest), header, size)) == contents(build_index(manifest, header, size))
