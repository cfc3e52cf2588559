"""The reader's compact index of one artifact: flat numpy arrays instead of a parsed manifest.

:func:`build_index` checks a manifest and a payload header exactly as :func:`gencache.artifact.manifest.
check_manifest` and :func:`gencache.artifact.header.check_header` do, and keeps the result as a handful of flat
arrays (sorted keys, per-sequence offsets, lengths, digests and finish-reason codes, per-entry content digests
and the byte span of each entry's texts). A forked process shares them without copying (no reference counts in
the buffers), and their size does not depend on Python object overheads.

Two paths reach the same arrays. The fast one scans the canonical bytes the writer produces (single-sequence
entries) with vectorised numpy checks: every fixed byte of every entry and header member is compared, every hex
digest and decimal number is validated, keys are sorted and unique, and the members tile the objects exactly,
so a document it accepts parses to the same values. The texts are not scanned: each entry's text list is
decoded (and its content digest checked) when the entry is first read. Anything the fast scan does not
recognise goes through the general path: the full JSON parse and the format's own checks, whose errors are
then what the caller sees.
"""

from __future__ import annotations

import json
import mmap
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gencache.artifact.header import Header, check_header, parse_header
from gencache.artifact.manifest import MANIFEST_FIELDS, check_manifest, check_provenance, provenance_digest
from gencache.artifact.names import FINISH_REASONS, FORMAT_VERSION, PAYLOAD_NAME, STORAGE, TOKEN_BYTES, TOKEN_DTYPE
from gencache.artifact.summary import check_summary
from gencache.core.canonical import canonical_json
from gencache.core.errors import FormatError

Buffer = bytes | mmap.mmap
ENTRY_WINDOW = 1 << 13
_REASON_INDEX = {reason: code for code, reason in enumerate(FINISH_REASONS)}
_HEX = np.full(256, 255, dtype=np.uint8)
_HEX[np.frombuffer(b"0123456789", dtype=np.uint8)] = np.arange(10, dtype=np.uint8)
_HEX[np.frombuffer(b"abcdef", dtype=np.uint8)] = np.arange(10, 16, dtype=np.uint8)
_POW10 = 10 ** np.arange(18, dtype=np.int64)

# Canonical layout of one single-sequence manifest entry (keys sorted):
# "<key>":{"content_digest":"<hex>","finish_reasons":["<reason>"],"sequences":[{"digest":"<hex>","dtype":"I64",
# "shape":[<n>],"tensor":"<key>.0"}],"text":[<texts>]}
_ENTRY_OPEN = b'":{"content_digest":"'
_AFTER_CONTENT = b'","finish_reasons":["'
_AFTER_REASON = b'"],"sequences":[{"digest":"'
_AFTER_DIGEST = b'","dtype":"' + TOKEN_DTYPE.encode() + b'","shape":['
_AFTER_LENGTH = b'],"tensor":"'
_AFTER_TENSOR = b'.0"}],"text":['
_ENTRY_CLOSE = b"]}"
_MANIFEST_OPEN = b'{"entries":{'
_MANIFEST_TAIL = b'}},"format_version":'
_EMPTY_TAIL = b'{"entries":{},"format_version":'
# "<key>.0":{"data_offsets":[<start>,<end>],"dtype":"I64","shape":[<n>]}
_MEMBER_OPEN = b'.0":{"data_offsets":['
_AFTER_END = b'],"dtype":"' + TOKEN_DTYPE.encode() + b'","shape":['
_MEMBER_CLOSE = b"]}"
_ENTRY_OPEN_RE = re.compile(re.escape(_ENTRY_OPEN))
_MEMBER_OPEN_RE = re.compile(re.escape(_MEMBER_OPEN))


class _Mismatch(Exception):
    """The bytes are not the canonical single-sequence layout (the general path decides)."""


@dataclass(frozen=True, eq=False)
class CompactIndex:
    """The checked content of one artifact in flat arrays (``n`` entries, ``s`` sequences)."""

    keys: np.ndarray  # (n,) S64: the hex keys, sorted
    first: np.ndarray  # (n+1,) int64: entry i's sequences are first[i]:first[i+1]
    starts: np.ndarray  # (s,) int64: byte offset of each sequence relative to the data start
    lengths: np.ndarray  # (s,) int64: tokens of each sequence
    digests: np.ndarray  # (s, 32) uint8: SHA-256 of each sequence's bytes
    reasons: np.ndarray  # (s,) uint8: index into FINISH_REASONS
    content: np.ndarray  # (n, 32) uint8: content digests
    text_spans: np.ndarray  # (n, 2) int64: the JSON of each entry's text list (brackets included) in text_source
    text_source: Buffer
    summary: dict[str, Any]
    provenance: dict[str, Any]
    provenance_digest: str
    fast: bool  # whether the canonical scan built it
    header_used: int  # bytes of header JSON before the padding

    def __len__(self) -> int:
        return len(self.keys)

    def find(self, key: object) -> int:
        """The position of ``key``, or -1."""
        if type(key) is not str or len(key) != 64 or not key.isascii():
            return -1
        raw = key.encode()
        keys = self.keys
        position = int(keys.searchsorted(raw))
        return position if position < len(keys) and keys[position] == raw else -1

    def key(self, position: int) -> str:
        return bytes(self.keys[position]).decode()

    def iter_keys(self) -> Iterator[str]:
        keys = self.keys
        for at in range(0, len(keys), 4096):
            for raw in keys[at : at + 4096].tolist():
                yield raw.decode()

    def texts_json(self, position: int) -> bytes:
        start, end = self.text_spans[position].tolist()
        return self.text_source[start:end]

    def sequence_refs(self, position: int) -> list[dict[str, Any]]:
        """The entry's ``sequences`` list as the manifest holds it."""
        key = self.key(position)
        lo, hi = self.first[position], self.first[position + 1]
        return [
            {"tensor": f"{key}.{i}", "dtype": TOKEN_DTYPE, "shape": [int(n)], "digest": bytes(digest).hex()}
            for i, (n, digest) in enumerate(zip(self.lengths[lo:hi], self.digests[lo:hi], strict=True))
        ]

    def finish_reasons(self, position: int) -> tuple[str, ...]:
        lo, hi = self.first[position : position + 2].tolist()
        if hi == lo + 1:
            return (FINISH_REASONS[self.reasons[lo]],)
        return tuple(FINISH_REASONS[code] for code in self.reasons[lo:hi].tolist())


def build_index(manifest: Buffer, header_raw: bytes, payload_size: int) -> CompactIndex:
    """Check ``manifest`` (its bytes) against the payload header bytes ``header_raw`` (the ``H`` bytes after the
    length prefix) and a payload of ``payload_size`` bytes; :class:`FormatError` names the first problem."""
    try:
        return _fast_index(manifest, header_raw, payload_size)
    except _Mismatch:
        return _general_index(bytes(manifest), header_raw, payload_size)


# -- the general path ----------------------------------------------------------------------------------------
def _general_index(raw_manifest: bytes, header_raw: bytes, payload_size: int) -> CompactIndex:
    try:
        parsed = json.loads(raw_manifest.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise FormatError(f"manifest.json is not valid UTF-8 JSON ({error}); the artifact is damaged.") from None
    manifest = check_manifest(parsed)
    header: Header = parse_header(header_raw)
    starts_by_key = check_header(header, manifest, payload_size)
    keys = sorted(manifest.entries)
    first = [0]
    starts: list[int] = []
    lengths: list[int] = []
    digests: list[str] = []
    reasons: list[int] = []
    content: list[str] = []
    texts: list[bytes] = []
    for key in keys:
        entry = manifest.entries[key]
        refs = entry["sequences"]
        starts.extend(starts_by_key[key])
        lengths.extend(ref["shape"][0] for ref in refs)
        digests.extend(ref["digest"] for ref in refs)
        reasons.extend(_REASON_INDEX[reason] for reason in entry["finish_reasons"])
        content.append(entry["content_digest"])
        texts.append(json.dumps(entry["text"], ensure_ascii=True, separators=(",", ":")).encode())
        first.append(len(starts))
    spans = np.zeros((len(keys), 2), dtype=np.int64)
    sizes = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    spans[:, 1] = np.cumsum(sizes)
    spans[:, 0] = spans[:, 1] - sizes
    return CompactIndex(
        keys=np.array(keys, dtype="S64"),
        first=np.array(first, dtype=np.int64),
        starts=np.array(starts, dtype=np.int64),
        lengths=np.array(lengths, dtype=np.int64),
        digests=_hex_rows("".join(digests).encode(), len(digests)),
        reasons=np.array(reasons, dtype=np.uint8),
        content=_hex_rows("".join(content).encode(), len(content)),
        text_spans=spans,
        text_source=b"".join(texts),
        summary=manifest.summary,
        provenance=manifest.provenance,
        provenance_digest=manifest.provenance_digest,
        fast=False,
        header_used=header.json_length,
    )


def _hex_rows(joined: bytes, count: int) -> np.ndarray:
    nibbles = _HEX[np.frombuffer(joined, dtype=np.uint8)].reshape(count, 64)
    return (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]


# -- the canonical scan --------------------------------------------------------------------------------------
def _require(condition: bool | np.bool_) -> None:
    if not condition:
        raise _Mismatch


def _window(buf: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each position (rows of a strided view: no index matrix)."""
    _require(len(buf) >= width and (len(positions) == 0 or int(positions.max()) + width <= len(buf)))
    _require(len(positions) == 0 or int(positions.min()) >= 0)
    rows: np.ndarray = np.lib.stride_tricks.sliding_window_view(buf, width)[positions]
    return rows


def _expect(buf: np.ndarray, positions: np.ndarray, literal: bytes) -> None:
    _require(
        len(positions) == 0 or bool((_window(buf, positions, len(literal)) == np.frombuffer(literal, np.uint8)).all())
    )


def _hex_at(buf: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The 32 bytes encoded by the 64 lowercase hex characters at each position."""
    nibbles = _HEX[_window(buf, positions, 64)]
    _require(int(nibbles.max(initial=0)) < 16)
    rows: np.ndarray = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
    return rows


def _number_at(buf: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The JSON non-negative integers at each position (at most 18 digits) and their digit counts."""
    width = 19
    near_end = positions > len(buf) - width
    raw = np.empty((len(positions), width), dtype=np.uint8)
    raw[~near_end] = _window(buf, positions[~near_end], width)
    if near_end.any():  # the last number of a document: read it from a zero-padded copy of the tail
        _require(int(positions.max()) < len(buf) and int(positions.min()) >= 0)
        padded = np.concatenate([buf[max(0, len(buf) - width) :], np.zeros(width, dtype=np.uint8)])
        base = len(buf) - (len(padded) - width)
        raw[near_end] = np.lib.stride_tricks.sliding_window_view(padded, width)[positions[near_end] - base]
    digits = raw - np.uint8(48)  # wraps below "0": anything >= 10 is not a digit
    digit = digits <= 9
    count = np.argmin(digit, axis=1)
    _require(bool(((count >= 1) & ~digit.all(axis=1)).all()))
    _require(bool(((digits[:, 0] != 0) | (count == 1)).all()))  # no leading zeros
    exponent = count[:, None] - 1 - np.arange(width - 1)
    scale = np.where(exponent >= 0, _POW10[np.clip(exponent, 0, 17)], 0)
    value = (np.where(digit[:, : width - 1], digits[:, : width - 1], 0).astype(np.int64) * scale).sum(axis=1)
    return value, count


@dataclass(frozen=True, eq=False)
class _EntryColumns:
    """The per-entry arrays the canonical scan fills (``n`` single-sequence entries, in manifest order)."""

    keys: np.ndarray  # (n,) S64: the hex keys
    key_bytes: np.ndarray  # (n, 64) uint8: a view of keys
    content: np.ndarray  # (n, 32) uint8: content digests
    digests: np.ndarray  # (n, 32) uint8: sequence digests
    reasons: np.ndarray  # (n,) uint8: finish-reason codes
    lengths: np.ndarray  # (n,) int64: tokens of each sequence
    spans: np.ndarray  # (n, 2) int64: the byte span of each entry's text list

    @classmethod
    def allocate(cls, count: int) -> _EntryColumns:
        """Uninitialised columns for ``count`` entries."""
        keys = np.empty(count, dtype="S64")
        return cls(
            keys=keys,
            key_bytes=keys.view(np.uint8).reshape(count, 64),
            content=np.empty((count, 32), dtype=np.uint8),
            digests=np.empty((count, 32), dtype=np.uint8),
            reasons=np.empty(count, dtype=np.uint8),
            lengths=np.empty(count, dtype=np.int64),
            spans=np.empty((count, 2), dtype=np.int64),
        )


def _entry_opens(manifest: Buffer) -> tuple[np.ndarray, int]:
    """Where each entry's ``":{"content_digest":"`` starts, and where the manifest's tail does (``<= 0`` in a
    manifest without entries), once its opening and tail are the canonical ones."""
    size = len(manifest)
    tail_at = manifest.rfind(_MANIFEST_TAIL)
    empty = manifest[: len(_EMPTY_TAIL)] == _EMPTY_TAIL
    _require(manifest[: len(_MANIFEST_OPEN)] == _MANIFEST_OPEN and (tail_at > 0 or empty))
    opens = np.array(
        [m.start() for m in _ENTRY_OPEN_RE.finditer(manifest, 0, tail_at if tail_at > 0 else size)], dtype=np.int64
    )
    _require(empty == (len(opens) == 0))
    return opens, tail_at


def _reason_at(buf: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The finish-reason code of the quoted reason at each position and its width in bytes."""
    first_letter = buf[p]
    code = np.full(len(p), 255, dtype=np.uint8)
    width = np.zeros(len(p), dtype=np.int64)
    for reason, value in _REASON_INDEX.items():
        chosen = first_letter == reason.encode()[0]
        _expect(buf, p[chosen], reason.encode())
        code[chosen] = value
        width[chosen] = len(reason)
    _require(bool((code != 255).all()))
    return code, width


def _scan_entries(buf: np.ndarray, s: np.ndarray, columns: _EntryColumns, rows: slice) -> None:
    """Check the entries opening at ``s`` (one window) byte by byte and fill their ``rows`` of ``columns``; each
    text span gets its start (the list's ``[``)."""
    _expect(buf, s - 65, b'"')
    columns.key_bytes[rows] = _window(buf, s - 64, 64)
    _hex_at(buf, s - 64)
    p = s + len(_ENTRY_OPEN)
    columns.content[rows] = _hex_at(buf, p)
    p = p + 64
    _expect(buf, p, _AFTER_CONTENT)
    p = p + len(_AFTER_CONTENT)
    code, width = _reason_at(buf, p)
    columns.reasons[rows] = code
    p = p + width
    _expect(buf, p, _AFTER_REASON)
    p = p + len(_AFTER_REASON)
    columns.digests[rows] = _hex_at(buf, p)
    p = p + 64
    _expect(buf, p, _AFTER_DIGEST)
    p = p + len(_AFTER_DIGEST)
    n, digits = _number_at(buf, p)
    _require(bool((n >= 1).all()))
    columns.lengths[rows] = n
    p = p + digits
    _expect(buf, p, _AFTER_LENGTH)
    p = p + len(_AFTER_LENGTH)
    _require(bool((_window(buf, p, 64) == columns.key_bytes[rows]).all()))
    p = p + 64
    _expect(buf, p, _AFTER_TENSOR)
    columns.spans[rows, 0] = p + len(_AFTER_TENSOR) - 1  # from the list's "["


def _end_text_spans(buf: np.ndarray, opens: np.ndarray, tail_at: int, columns: _EntryColumns) -> None:
    """End each text span at its list's ``]`` (each entry closes right before the next key, the last before the
    tail) and check the keys are sorted and unique; at least one entry."""
    ends = np.empty(len(opens), dtype=np.int64)
    ends[:-1] = opens[1:] - 68  # ...]}  ,"<key>
    ends[-1] = tail_at - 1  # ...]}}  ,"format_version"
    _expect(buf, ends[:-1], b']},"')
    _require(buf[tail_at - 1] == ord("]"))
    _require(bool((ends > columns.spans[:, 0] + 1).all()))
    columns.spans[:, 1] = ends + 1  # through the list's "]"
    keys = columns.keys
    _require(bool((keys[1:] > keys[:-1]).all()))


def _fast_index(manifest: Buffer, header_raw: bytes, payload_size: int) -> CompactIndex:
    """The index of canonical single-sequence bytes by the vectorised scan; :class:`_Mismatch` for anything the
    scan does not recognise."""
    buf = np.frombuffer(manifest, dtype=np.uint8)
    opens, tail_at = _entry_opens(manifest)
    count = len(opens)
    columns = _EntryColumns.allocate(count)
    if count:
        _require(opens[0] == len(_MANIFEST_OPEN) + 65)
    for at in range(0, count, ENTRY_WINDOW):
        _scan_entries(buf, opens[at : at + ENTRY_WINDOW], columns, slice(at, at + ENTRY_WINDOW))
    if count:
        _end_text_spans(buf, opens, tail_at, columns)
    tail = b"{" + bytes(manifest[(tail_at + 3 if count else len(_EMPTY_TAIL) - len(b'"format_version":')) :])
    top = _parse_tail(tail)
    keys, lengths, reasons = columns.keys, columns.lengths, columns.reasons
    tokens = int(lengths.sum())
    reason_counts = {reason: int((reasons == code).sum()) for reason, code in _REASON_INDEX.items()}
    summary = check_summary(top["summary"], _KeySet(keys), count, tokens, reason_counts)
    starts = _check_fast_header(header_raw, keys, lengths, top["provenance_digest"], payload_size)
    return CompactIndex(
        keys=keys,
        first=np.arange(count + 1, dtype=np.int64),
        starts=starts,
        lengths=lengths,
        digests=columns.digests,
        reasons=reasons,
        content=columns.content,
        text_spans=columns.spans,
        text_source=manifest,
        summary=summary,
        provenance=top["provenance"],
        provenance_digest=top["provenance_digest"],
        fast=True,
        header_used=len(header_raw.rstrip(b" ")),
    )


class _KeySet(Mapping[str, None]):
    """The keys of the index as the mapping :func:`check_summary` counts and iterates."""

    def __init__(self, keys: np.ndarray) -> None:
        self._keys = keys

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return (raw.decode() for raw in self._keys.tolist())

    def __getitem__(self, key: str) -> None:
        return None


def _parse_tail(tail: bytes) -> dict[str, Any]:
    """The manifest's fields other than ``entries``, checked as :func:`check_manifest` checks them."""
    try:
        top = json.loads(tail)  # small; the standard library's parser (no msgspec import to open an artifact)
    except (ValueError, RecursionError):
        raise _Mismatch from None
    _require(isinstance(top, dict) and set(top) == MANIFEST_FIELDS - {"entries"})
    _require(type(top["format_version"]) is int and top["format_version"] == FORMAT_VERSION)
    _require(top["storage"] == STORAGE and top["payload"] == PAYLOAD_NAME)
    try:
        top["provenance"] = check_provenance(top["provenance"], "manifest.json provenance")
    except FormatError:
        raise _Mismatch from None
    _require(top["provenance_digest"] == provenance_digest(top["provenance"]))
    checked: dict[str, Any] = top
    return checked


def _check_fast_header(
    header_raw: bytes, keys: np.ndarray, lengths: np.ndarray, digest: str, payload_size: int
) -> np.ndarray:
    """The tensors' start offsets from a canonical header naming exactly ``<key>.0`` for every key, in order."""
    body = header_raw.rstrip(b" ")
    buf = np.frombuffer(body, dtype=np.uint8)
    meta = (
        b'"__metadata__":'
        + canonical_json({"format_version": str(FORMAT_VERSION), "provenance_digest": digest}).encode()
    )
    meta_at = body.find(meta)
    _require(meta_at > 0 and body.find(meta, meta_at + 1) < 0 and body.startswith(b"{") and body.endswith(b"}"))
    opens = np.array([m.start() for m in _MEMBER_OPEN_RE.finditer(body)], dtype=np.int64)
    count = len(keys)
    _require(len(opens) == count)
    starts = np.empty(count, dtype=np.int64)
    member_ends = np.empty(count, dtype=np.int64)
    key_bytes = keys.view(np.uint8).reshape(count, 64)
    for at in range(0, count, ENTRY_WINDOW):
        o = opens[at : at + ENTRY_WINDOW]
        _expect(buf, o - 65, b'"')
        _require(bool((_window(buf, o - 64, 64) == key_bytes[at : at + ENTRY_WINDOW]).all()))
        p = o + len(_MEMBER_OPEN)
        begin, digits = _number_at(buf, p)
        p = p + digits
        _expect(buf, p, b",")
        end, digits = _number_at(buf, p + 1)
        p = p + 1 + digits
        _expect(buf, p, _AFTER_END)
        p = p + len(_AFTER_END)
        shape, digits = _number_at(buf, p)
        p = p + digits
        _expect(buf, p, _MEMBER_CLOSE)
        _require(bool((shape == lengths[at : at + ENTRY_WINDOW]).all()))
        _require(bool((end - begin == shape * TOKEN_BYTES).all()))
        starts[at : at + ENTRY_WINDOW] = begin
        member_ends[at : at + ENTRY_WINDOW] = p + len(_MEMBER_CLOSE)
    # the members and the metadata tile the object: "{" m ("," m)* "}"
    member_starts = np.append(opens - 65, meta_at)
    ends = np.append(member_ends, meta_at + len(meta))
    order = np.argsort(member_starts, kind="stable")
    member_starts, ends = member_starts[order], ends[order]
    _require(member_starts[0] == 1 and ends[-1] == len(body) - 1)
    _require(bool((member_starts[1:] == ends[:-1] + 1).all()))
    _expect(buf, ends[:-1], b",")
    if count:
        by_offset = np.sort(starts)
        lengths_by_offset = lengths[np.argsort(starts, kind="stable")]
        _require(
            by_offset[0] == 0 and bool((by_offset[1:] == by_offset[:-1] + lengths_by_offset[:-1] * TOKEN_BYTES).all())
        )
        data_end = int(by_offset[-1] + lengths_by_offset[-1] * TOKEN_BYTES)
    else:
        data_end = 0
    _require(payload_size == 8 + len(header_raw) + data_end)
    return starts


__all__ = [
    "ENTRY_WINDOW",
    "CompactIndex",
    "build_index",
]
