"""The reader's compact index of one artifact: flat numpy arrays instead of a parsed manifest.

:func:`build_index` checks a manifest and a payload header exactly as :func:`gencache.artifact.manifest.
check_manifest` and :func:`gencache.artifact.header.check_header` do, and keeps the result as a handful of flat
arrays (sorted keys, per-sequence offsets, lengths, digests and finish-reason codes, per-entry content digests
and the byte span of each entry's texts) that a forked process shares without copying.

The fast path scans the canonical bytes of single-sequence entries with vectorised numpy checks (every fixed byte
compared, every digest and number validated, keys sorted and unique, members tiling the objects exactly, so a
document it accepts parses to the same values; texts are checked on an entry's first read). Anything else goes
through the full JSON parse and the format's own checks, whose errors are what the caller sees. Every literal the
scan matches comes from the layouts the encoders write with, so a change to the format is made once.
"""

from __future__ import annotations

import json
import mmap
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gencache.artifact._scan import Mismatch, expect, hex_at, hex_rows, number_at, require, window
from gencache.artifact.header import (
    HEADER_FRAME,
    HEADER_PADDING,
    SINGLE_TENSOR,
    Header,
    check_header,
    metadata_member,
    parse_header,
)
from gencache.artifact.manifest import (
    MANIFEST_FIELDS,
    MANIFEST_FRAME,
    MANIFEST_OTHERS,
    SINGLE_ENTRY,
    check_manifest,
    check_provenance,
    provenance_digest,
)
from gencache.artifact.names import (
    DIGEST_BYTES,
    DIGEST_HEX_CHARS,
    FINISH_REASONS,
    FORMAT_VERSION,
    LENGTH_PREFIX_BYTES,
    PAYLOAD_NAME,
    STORAGE,
    TOKEN_BYTES,
    TOKEN_DTYPE,
    Layout,
    tensor_name,
)
from gencache.artifact.summary import check_summary
from gencache.core.canonical import canonical_bytes
from gencache.core.errors import FormatError

Buffer = bytes | mmap.mmap
ENTRY_WINDOW = 1 << 13
_KEY_CHUNK = 4096  # keys decoded at a time by CompactIndex.iter_keys
_REASON_INDEX = {reason: code for code, reason in enumerate(FINISH_REASONS)}
_KEY_DTYPE = f"S{DIGEST_HEX_CHARS}"  # a key as numpy bytes
_NO_REASON = 0xFF  # a reason code no finish reason has


def _key_bytes(keys: np.ndarray) -> np.ndarray:
    """The keys' characters as a (n, DIGEST_HEX_CHARS) uint8 view."""
    view: np.ndarray = keys.view(np.uint8).reshape(len(keys), DIGEST_HEX_CHARS)
    return view


def _pieces(layout: Layout, fields: tuple[str, ...]) -> tuple[bytes, ...]:
    """The pieces of an encoder's layout as bytes, once its fields come in the order the scan below reads them."""
    if layout.fields != fields:
        raise RuntimeError(f"the canonical scan reads the fields {fields}, but the encoder writes {layout.fields}")
    return tuple(piece.encode() for piece in layout.pieces)


def _first_distinct_byte(words: tuple[bytes, ...]) -> int:
    """The first offset at which every word has a byte of its own (what tells them apart)."""
    for at in range(min(map(len, words))):
        if len({word[at] for word in words}) == len(words):
            return at
    raise RuntimeError(f"no byte tells {words} apart")


# The canonical layout the scan matches, taken from the encoders (gencache.artifact.manifest and .header): each
# piece is named by the field it comes before. One single-sequence manifest entry (keys sorted):
# "<key>":{"content_digest":"<hex>","finish_reasons":[<reason>],"sequences":[{"digest":"<hex>","dtype":"I64",
# "shape":[<n>],"tensor":"<key>.0"}],"text":[<texts>]}
_KEY_OPEN, _ENTRY_OPEN, _AFTER_CONTENT, _AFTER_REASON, _AFTER_DIGEST, _AFTER_LENGTH, _AFTER_TENSOR, _ENTRY_CLOSE = (
    _pieces(SINGLE_ENTRY, ("key", "content_digest", "finish_reason", "digest", "length", "key", "text"))
)
_MANIFEST_OPEN, _ENTRY_SEPARATOR, _ENTRIES_CLOSE, _ = _pieces(MANIFEST_FRAME, ("entry", "entry", "others"))
_FIRST_OTHER = MANIFEST_OTHERS.pieces[0].encode()  # "format_version":
_BETWEEN_ENTRIES = _ENTRY_CLOSE + _ENTRY_SEPARATOR + _KEY_OPEN  # from one entry's texts to the next key
_LIST_OPEN, _LIST_CLOSE = b"[", b"]"  # a text span is the JSON list, brackets included
_OBJECT_OPEN = b"{"  # the manifest's other members parse as one object
if not (_AFTER_TENSOR.endswith(_LIST_OPEN) and _ENTRY_CLOSE.startswith(_LIST_CLOSE)):
    raise RuntimeError("the encoder no longer writes an entry's texts as a list right before the entry's end")
# the tail: the last entry's end after its list, the end of entries, the first other member
_MANIFEST_TAIL = _ENTRY_CLOSE[len(_LIST_CLOSE) :] + _ENTRIES_CLOSE + _FIRST_OTHER
_EMPTY_TAIL = _MANIFEST_OPEN + _ENTRIES_CLOSE + _FIRST_OTHER
_REASON_JSON = {code: canonical_bytes(reason) for reason, code in _REASON_INDEX.items()}
_REASON_PICK = _first_distinct_byte(tuple(_REASON_JSON.values()))
# One tensor's header member and the header around its members:
# "<key>.0":{"data_offsets":[<start>,<end>],"dtype":"I64","shape":[<n>]}
_NAME_OPEN, _MEMBER_OPEN, _OFFSET_SEPARATOR, _AFTER_END, _MEMBER_CLOSE = _pieces(
    SINGLE_TENSOR, ("key", "start", "end", "length")
)
_HEADER_OPEN, _MEMBER_SEPARATOR, _HEADER_CLOSE = _pieces(HEADER_FRAME, ("member", "member"))
_ENTRY_OPEN_RE = re.compile(re.escape(_ENTRY_OPEN))
_MEMBER_OPEN_RE = re.compile(re.escape(_MEMBER_OPEN))


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
        if type(key) is not str or len(key) != DIGEST_HEX_CHARS or not key.isascii():
            return -1
        raw = key.encode()
        keys = self.keys
        position = int(keys.searchsorted(raw))
        return position if position < len(keys) and keys[position] == raw else -1

    def key(self, position: int) -> str:
        return bytes(self.keys[position]).decode()

    def iter_keys(self) -> Iterator[str]:
        keys = self.keys
        for at in range(0, len(keys), _KEY_CHUNK):
            for raw in keys[at : at + _KEY_CHUNK].tolist():
                yield raw.decode()

    def texts_json(self, position: int) -> bytes:
        start, end = self.text_spans[position].tolist()
        return self.text_source[start:end]

    def sequence_refs(self, position: int) -> list[dict[str, Any]]:
        """The entry's ``sequences`` list as the manifest holds it."""
        key = self.key(position)
        lo, hi = self.first[position], self.first[position + 1]
        return [
            {"tensor": tensor_name(key, i), "dtype": TOKEN_DTYPE, "shape": [int(n)], "digest": bytes(digest).hex()}
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
    except Mismatch:
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
        keys=np.array(keys, dtype=_KEY_DTYPE),
        first=np.array(first, dtype=np.int64),
        starts=np.array(starts, dtype=np.int64),
        lengths=np.array(lengths, dtype=np.int64),
        digests=hex_rows("".join(digests).encode(), len(digests), DIGEST_HEX_CHARS),
        reasons=np.array(reasons, dtype=np.uint8),
        content=hex_rows("".join(content).encode(), len(content), DIGEST_HEX_CHARS),
        text_spans=spans,
        text_source=b"".join(texts),
        summary=manifest.summary,
        provenance=manifest.provenance,
        provenance_digest=manifest.provenance_digest,
        fast=False,
        header_used=header.json_length,
    )


# -- the canonical scan --------------------------------------------------------------------------------------
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
        keys = np.empty(count, dtype=_KEY_DTYPE)
        return cls(
            keys=keys,
            key_bytes=_key_bytes(keys),
            content=np.empty((count, DIGEST_BYTES), dtype=np.uint8),
            digests=np.empty((count, DIGEST_BYTES), dtype=np.uint8),
            reasons=np.empty(count, dtype=np.uint8),
            lengths=np.empty(count, dtype=np.int64),
            spans=np.empty((count, 2), dtype=np.int64),
        )


def _entry_opens(manifest: Buffer) -> tuple[np.ndarray, int]:
    """Where each entry's ``_ENTRY_OPEN`` (right after its key) starts, and where the manifest's tail does (``<= 0``
    in a manifest without entries), once its opening and tail are the canonical ones."""
    size = len(manifest)
    tail_at = manifest.rfind(_MANIFEST_TAIL)
    empty = manifest[: len(_EMPTY_TAIL)] == _EMPTY_TAIL
    require(manifest[: len(_MANIFEST_OPEN)] == _MANIFEST_OPEN and (tail_at > 0 or empty))
    opens = np.array(
        [m.start() for m in _ENTRY_OPEN_RE.finditer(manifest, 0, tail_at if tail_at > 0 else size)], dtype=np.int64
    )
    require(empty == (len(opens) == 0))
    if len(opens):
        require(opens[0] == len(_MANIFEST_OPEN) + len(_KEY_OPEN) + DIGEST_HEX_CHARS)
    return opens, tail_at


def _reason_at(buf: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The finish-reason code of the reason's JSON string at each position and its width in bytes."""
    require(len(p) == 0 or int(p.max()) + _REASON_PICK < len(buf))
    picked = buf[p + _REASON_PICK]
    code = np.full(len(p), _NO_REASON, dtype=np.uint8)
    width = np.zeros(len(p), dtype=np.int64)
    for value, reason in _REASON_JSON.items():
        chosen = picked == reason[_REASON_PICK]
        expect(buf, p[chosen], reason)
        code[chosen] = value
        width[chosen] = len(reason)
    require(bool((code != _NO_REASON).all()))
    return code, width


def _scan_entries(buf: np.ndarray, s: np.ndarray, columns: _EntryColumns, rows: slice) -> None:
    """Check the entries whose ``_ENTRY_OPEN`` is at ``s`` (one window) byte by byte, in the encoder's field
    order, and fill their ``rows`` of ``columns``; each text span gets its start (the list's opening bracket)."""
    key_at = s - DIGEST_HEX_CHARS
    expect(buf, key_at - len(_KEY_OPEN), _KEY_OPEN)
    columns.key_bytes[rows] = window(buf, key_at, DIGEST_HEX_CHARS)
    hex_at(buf, key_at, DIGEST_HEX_CHARS)
    p = s + len(_ENTRY_OPEN)
    columns.content[rows] = hex_at(buf, p, DIGEST_HEX_CHARS)
    p = p + DIGEST_HEX_CHARS
    expect(buf, p, _AFTER_CONTENT)
    p = p + len(_AFTER_CONTENT)
    code, width = _reason_at(buf, p)
    columns.reasons[rows] = code
    p = p + width
    expect(buf, p, _AFTER_REASON)
    p = p + len(_AFTER_REASON)
    columns.digests[rows] = hex_at(buf, p, DIGEST_HEX_CHARS)
    p = p + DIGEST_HEX_CHARS
    expect(buf, p, _AFTER_DIGEST)
    p = p + len(_AFTER_DIGEST)
    n, digits = number_at(buf, p)
    require(bool((n >= 1).all()))
    columns.lengths[rows] = n
    p = p + digits
    expect(buf, p, _AFTER_LENGTH)
    p = p + len(_AFTER_LENGTH)
    require(bool((window(buf, p, DIGEST_HEX_CHARS) == columns.key_bytes[rows]).all()))
    p = p + DIGEST_HEX_CHARS
    expect(buf, p, _AFTER_TENSOR)
    columns.spans[rows, 0] = p + len(_AFTER_TENSOR) - len(_LIST_OPEN)


def _end_text_spans(buf: np.ndarray, opens: np.ndarray, tail_at: int, columns: _EntryColumns) -> None:
    """End each text span with its list's closing bracket (each entry closes right before the next key, the last
    before the tail) and check the keys are sorted and unique; at least one entry."""
    ends = np.empty(len(opens), dtype=np.int64)  # where each entry's _ENTRY_CLOSE starts
    ends[:-1] = opens[1:] - DIGEST_HEX_CHARS - len(_BETWEEN_ENTRIES)
    ends[-1] = tail_at - len(_LIST_CLOSE)
    expect(buf, ends[:-1], _BETWEEN_ENTRIES)
    expect(buf, ends[-1:], _LIST_CLOSE)
    require(bool((ends > columns.spans[:, 0] + len(_LIST_OPEN)).all()))  # a text between the brackets
    columns.spans[:, 1] = ends + len(_LIST_CLOSE)
    keys = columns.keys
    require(bool((keys[1:] > keys[:-1]).all()))


def _fast_index(manifest: Buffer, header_raw: bytes, payload_size: int) -> CompactIndex:
    """The index of canonical single-sequence bytes by the vectorised scan; :class:`Mismatch` for anything the
    scan does not recognise."""
    buf = np.frombuffer(manifest, dtype=np.uint8)
    opens, tail_at = _entry_opens(manifest)
    count = len(opens)
    columns = _EntryColumns.allocate(count)
    for at in range(0, count, ENTRY_WINDOW):
        _scan_entries(buf, opens[at : at + ENTRY_WINDOW], columns, slice(at, at + ENTRY_WINDOW))
    if count:
        _end_text_spans(buf, opens, tail_at, columns)
    others_at = (tail_at + len(_MANIFEST_TAIL) if count else len(_EMPTY_TAIL)) - len(_FIRST_OTHER)
    top = parse_tail(_OBJECT_OPEN + bytes(manifest[others_at:]))
    keys, lengths, reasons = columns.keys, columns.lengths, columns.reasons
    tokens = int(lengths.sum())
    reason_counts = {reason: int((reasons == code).sum()) for reason, code in _REASON_INDEX.items()}
    summary = check_summary(top["summary"], _KeySet(keys), count, tokens, reason_counts)
    body = header_raw.rstrip(HEADER_PADDING)  # the header's JSON, without the reserved capacity's padding
    starts = _check_fast_header(body, len(header_raw), keys, lengths, top["provenance_digest"], payload_size)
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
        header_used=len(body),
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


def parse_tail(tail: bytes) -> dict[str, Any]:
    """The manifest's fields other than ``entries``, checked as :func:`check_manifest` checks them."""
    try:
        top = json.loads(tail)  # small; the standard library's parser (no msgspec import to open an artifact)
    except (ValueError, RecursionError):
        raise Mismatch from None
    require(isinstance(top, dict) and set(top) == MANIFEST_FIELDS - {"entries"})
    require(type(top["format_version"]) is int and top["format_version"] == FORMAT_VERSION)
    require(top["storage"] == STORAGE and top["payload"] == PAYLOAD_NAME)
    try:
        top["provenance"] = check_provenance(top["provenance"], "manifest.json provenance")
    except FormatError:
        raise Mismatch from None
    require(top["provenance_digest"] == provenance_digest(top["provenance"]))
    checked: dict[str, Any] = top
    return checked


def _check_fast_header(
    body: bytes, header_size: int, keys: np.ndarray, lengths: np.ndarray, digest: str, payload_size: int
) -> np.ndarray:
    """The tensors' start offsets from a canonical header (``body``, its JSON without the padding, of a header of
    ``header_size`` bytes) naming exactly ``<key>.0`` for every key, in order."""
    buf = np.frombuffer(body, dtype=np.uint8)
    meta = metadata_member(digest).encode()
    meta_at = body.find(meta)
    require(meta_at > 0 and body.find(meta, meta_at + 1) < 0)
    require(body.startswith(_HEADER_OPEN) and body.endswith(_HEADER_CLOSE))
    opens = np.array([m.start() for m in _MEMBER_OPEN_RE.finditer(body)], dtype=np.int64)
    count = len(keys)
    require(len(opens) == count)
    starts = np.empty(count, dtype=np.int64)
    member_ends = np.empty(count, dtype=np.int64)
    key_bytes = _key_bytes(keys)
    for at in range(0, count, ENTRY_WINDOW):
        o = opens[at : at + ENTRY_WINDOW]
        expect(buf, o - DIGEST_HEX_CHARS - len(_NAME_OPEN), _NAME_OPEN)
        require(bool((window(buf, o - DIGEST_HEX_CHARS, DIGEST_HEX_CHARS) == key_bytes[at : at + ENTRY_WINDOW]).all()))
        p = o + len(_MEMBER_OPEN)
        begin, digits = number_at(buf, p)
        p = p + digits
        expect(buf, p, _OFFSET_SEPARATOR)
        end, digits = number_at(buf, p + len(_OFFSET_SEPARATOR))
        p = p + len(_OFFSET_SEPARATOR) + digits
        expect(buf, p, _AFTER_END)
        p = p + len(_AFTER_END)
        shape, digits = number_at(buf, p)
        p = p + digits
        expect(buf, p, _MEMBER_CLOSE)
        require(bool((shape == lengths[at : at + ENTRY_WINDOW]).all()))
        require(bool((end - begin == shape * TOKEN_BYTES).all()))
        starts[at : at + ENTRY_WINDOW] = begin
        member_ends[at : at + ENTRY_WINDOW] = p + len(_MEMBER_CLOSE)
    _check_members_tile(buf, opens - DIGEST_HEX_CHARS - len(_NAME_OPEN), member_ends, meta_at, len(meta))
    data_end = _check_contiguous(starts, lengths)
    require(payload_size == LENGTH_PREFIX_BYTES + header_size + data_end)
    return starts


def _check_members_tile(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, meta_at: int, meta_size: int) -> None:
    """The tensors' members (``starts``, ``ends``) and the metadata tile the header object: ``{m,m,...,m}``."""
    member_starts = np.append(starts, meta_at)
    member_ends = np.append(ends, meta_at + meta_size)
    order = np.argsort(member_starts, kind="stable")
    member_starts, member_ends = member_starts[order], member_ends[order]
    require(member_starts[0] == len(_HEADER_OPEN) and member_ends[-1] == len(buf) - len(_HEADER_CLOSE))
    require(bool((member_starts[1:] == member_ends[:-1] + len(_MEMBER_SEPARATOR)).all()))
    expect(buf, member_ends[:-1], _MEMBER_SEPARATOR)


def _check_contiguous(starts: np.ndarray, lengths: np.ndarray) -> int:
    """Where the data ends, once the tensors lie back to back from the data start."""
    if not len(starts):
        return 0
    by_offset = np.sort(starts)
    lengths_by_offset = lengths[np.argsort(starts, kind="stable")]
    require(by_offset[0] == 0 and bool((by_offset[1:] == by_offset[:-1] + lengths_by_offset[:-1] * TOKEN_BYTES).all()))
    return int(by_offset[-1] + lengths_by_offset[-1] * TOKEN_BYTES)
