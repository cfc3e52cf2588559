"""The reader's index of one artifact: the payload header in flat numpy arrays, the manifest's entries on demand.

:func:`build_index` checks the whole header and the manifest's members after its entries (format, provenance,
summary), and keeps sorted keys, per-sequence offsets and lengths: a few arrays that a forked process shares
without copying. The manifest's entries (about 1 KB each, mostly texts, against about 140 bytes of header) are not
read at open: :meth:`CompactIndex.entry` finds one by a search of the manifest's bytes (its keys are sorted) and
checks it when it is first read, so opening costs O(header), not O(manifest). A manifest in another JSON layout is
parsed and checked whole, then searched in its canonical form.

The header is read by one regular expression per tensor member (a JSON parser building half a million objects is
several times slower) and accepted only in the canonical layout the writer writes: the members it matches, the
metadata and the braces must tile the header's JSON exactly, in sorted order.
"""

from __future__ import annotations

import json
import mmap
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from gencache.artifact.header import metadata_member
from gencache.artifact.manifest import (
    MANIFEST_FIELDS,
    check_entry,
    check_manifest,
    check_provenance,
    check_summary,
    provenance_digest,
)
from gencache.artifact.names import DIGEST_HEX_CHARS, FINISH_REASONS, FORMAT_VERSION, PAYLOAD_NAME, STORAGE, TOKEN_BYTES
from gencache.core.canonical import is_int
from gencache.core.errors import FormatError

Buffer = bytes | mmap.mmap
_KEY_CHUNK = 4096  # keys decoded at a time by CompactIndex.iter_keys
_KEY_DTYPE = f"S{DIGEST_HEX_CHARS}"  # a key as numpy bytes
_TEXTS = msgspec.json.Decoder(tuple[str, ...])

# The canonical manifest: {"entries":{"<key>":{"content_digest":...,"text":[...]},...},"format_version":...}.
# What follows a key in an entry's member never occurs elsewhere (a quote inside a JSON string is escaped), so it
# marks where each entry is; the text list is the entry's last member.
_MANIFEST_OPEN = b'{"entries":{'
_ENTRY_OPEN = b'":{"content_digest":"'
_BEFORE_KEY = b',"'
_TEXT_OPEN = b'"text":['  # a member name, so never inside a string either
OTHERS = b'},"format_version":'  # where the members after the entries begin


def _tensor_member(first: bytes) -> re.Pattern[bytes]:
    """A tensor's header member and the separator after it, for keys whose first character is in ``first``; a
    number has no leading zero and fits an int64."""
    number = rb"(0|[1-9][0-9]{0,17})"
    member = rb'"(%s[0-9a-f]{63})\.(0|[1-9][0-9]{0,8})":\{"data_offsets":\[%s,%s\],"dtype":"I64","shape":\[%s\]\}[,}]'
    return re.compile(member % (first, number, number, number.replace(b"0|", b"")))


# "__metadata__" sorts after the keys that start with a digit and before those that start with a letter
_MEMBERS_BEFORE, _MEMBERS_AFTER = _tensor_member(rb"[0-9]"), _tensor_member(rb"[a-f]")
# what the vectorised scan of single-sequence headers reads around a member's key, offsets and length
_NAME_OPEN, _MEMBER_OPEN, _OFFSET_SEPARATOR, _AFTER_END, _MEMBER_CLOSE = (
    b'"',
    b'.0":{"data_offsets":[',
    b",",
    b'],"dtype":"I64","shape":[',
    b"]}",
)
_BRACE = ord("{")
_HEX_DIGITS = b"0123456789abcdef"
ENTRY_WINDOW = 1 << 13
_MEMBER_LITERALS = len(b'"' + b"." + b'":{"data_offsets":[' + b"," + b'],"dtype":"I64","shape":[' + b"]}" + b",")


@dataclass(frozen=True, eq=False)
class CompactIndex:
    """The checked header of one artifact in flat arrays (``n`` entries, ``s`` sequences) and its manifest."""

    keys: np.ndarray  # (n,) S64: the hex keys, sorted
    first: np.ndarray  # (n+1,) int64: entry i's sequences are first[i]:first[i+1]
    starts: np.ndarray  # (s,) int64: byte offset of each sequence relative to the data start
    lengths: np.ndarray  # (s,) int64: tokens of each sequence
    manifest: Buffer  # canonical manifest bytes
    entries_end: int  # where the entries' object closes in ``manifest``
    summary: dict[str, Any]
    provenance: dict[str, Any]
    provenance_digest: str
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

    def _locate(self, position: int, key: str) -> tuple[int, int]:
        """Where the object of ``key``'s entry (at ``position``) starts and ends in the manifest: a search of its
        bytes that guesses by how many entries lie on each side, with every other step a bisection (at most about
        twice a binary search's steps, whatever the entries' sizes; a few where they are alike)."""
        manifest, raw, width = self.manifest, key.encode(), len(_ENTRY_OPEN)
        lo, hi = len(_MANIFEST_OPEN), self.entries_end  # the _ENTRY_OPEN after the key sought lies in lo:hi
        below, above = 0, len(self.keys)  # and the entries from position below to position above - 1 too
        bisect = False
        while lo < hi:
            mid = (lo + hi) // 2 if bisect else lo + (hi - lo) * (position - below) // (above - below)
            bisect = not bisect
            at = manifest.find(_ENTRY_OPEN, mid, hi + width - 1)  # the first entry from mid on
            if at < 0:
                hi = mid
                continue
            found = manifest[at - DIGEST_HEX_CHARS : at]
            if found == raw:
                following = manifest.find(_ENTRY_OPEN, at + width, self.entries_end)
                end = self.entries_end if following < 0 else following - DIGEST_HEX_CHARS - len(_BEFORE_KEY)
                before = manifest[at - DIGEST_HEX_CHARS - len(_BEFORE_KEY) : at - DIGEST_HEX_CHARS]
                if before not in (b'{"', _BEFORE_KEY) or (following >= 0 and manifest[end : end + 2] != _BEFORE_KEY):
                    raise FormatError(f"manifest.json is damaged around its entry {key} (not the canonical layout).")
                return at + len('":'), end  # the entry's object, from its brace
            if found < raw:
                lo, below = at + 1, int(self.keys.searchsorted(found, side="right"))
            else:
                hi, above = mid, int(self.keys.searchsorted(found))
        raise FormatError(f"manifest.json has no entry {key}, which {PAYLOAD_NAME} holds.")

    def check_entry(self, position: int, entry: object) -> dict[str, Any]:
        """``entry`` checked as the entry of ``position``: as :func:`check_manifest` checks an entry, and that it
        describes exactly that key's tensors in the header."""
        key = self.key(position)
        lengths = check_entry(key, entry)
        lo, hi = self.first[position : position + 2].tolist()
        if lengths != self.lengths[lo:hi].tolist():
            raise FormatError(
                f"manifest.json entry {key} lists sequences of {lengths} tokens but {PAYLOAD_NAME} holds "
                f"{self.lengths[lo:hi].tolist()}."
            )
        assert isinstance(entry, dict)
        return entry

    def entry(self, position: int) -> tuple[dict[str, Any], tuple[int, int]]:
        """The checked manifest entry of ``position`` and the byte span of its text list's JSON in the manifest."""
        key = self.key(position)
        start, end = self._locate(position, key)
        raw = self.manifest[start:end]
        try:
            entry = msgspec.json.decode(raw)
        except msgspec.DecodeError as error:
            raise FormatError(f"manifest.json entry {key} is not valid JSON ({error}) (damaged).") from None
        entry = self.check_entry(position, entry)
        texts_at = start + raw.rfind(_TEXT_OPEN) + len(_TEXT_OPEN) - 1  # the text list's opening bracket
        try:
            texts = _TEXTS.decode(self.manifest[texts_at : end - 1])
        except msgspec.DecodeError:
            texts = None
        if texts != tuple(entry["text"]):
            raise FormatError(f"manifest.json entry {key} is not in the canonical layout (its text is not last).")
        return entry, (texts_at, end - 1)


def build_index(manifest: Buffer, header_raw: bytes, payload_size: int) -> CompactIndex:
    """Check the manifest's members after its entries (``manifest``, its bytes) and the payload header bytes
    ``header_raw`` (the ``H`` bytes after the length prefix) of a payload of ``payload_size`` bytes, and each
    against the other; :class:`FormatError` names the first problem."""
    try:
        entries_end, top = manifest_tail(len(manifest), lambda n, at: manifest[at : at + n])
        if entries_end > len(_MANIFEST_OPEN):  # the first entry's key comes first
            _require(manifest.find(_ENTRY_OPEN, len(_MANIFEST_OPEN)) == len(_MANIFEST_OPEN) + 1 + DIGEST_HEX_CHARS)
        _require(manifest[: len(_MANIFEST_OPEN)] == _MANIFEST_OPEN)
    except FormatError:
        manifest = _canonical_manifest(manifest)
        entries_end, top = manifest_tail(len(manifest), lambda n, at: manifest[at : at + n])
    body = header_raw.rstrip(b" ")  # the header's JSON, without the reserved capacity's padding
    keys, first, starts, lengths = scan_header(body, top["provenance_digest"])
    expected = 8 + len(header_raw) + TOKEN_BYTES * int(lengths.sum())
    if payload_size != expected:
        raise FormatError(
            f"{PAYLOAD_NAME} is {payload_size} bytes but its header describes {expected} (truncated or extended)."
        )
    return CompactIndex(
        keys=keys,
        first=first,
        starts=starts,
        lengths=lengths,
        manifest=manifest,
        entries_end=entries_end,
        summary=_check_summary(top["summary"], keys, lengths),
        provenance=top["provenance"],
        provenance_digest=top["provenance_digest"],
        header_used=len(body),
    )


def _require(condition: bool) -> None:
    if not condition:
        raise FormatError(f"manifest.json does not hold a format-{FORMAT_VERSION} manifest (damaged).")


# -- the manifest ------------------------------------------------------------------------------------------------
def manifest_tail(size: int, read: Callable[[int, int], bytes]) -> tuple[int, dict[str, Any]]:
    """Where the entries' object closes in a canonical manifest of ``size`` bytes and its members after it,
    checked as :func:`check_manifest` checks them, read from its end with ``read(length, offset)``."""
    length = 4096
    while True:  # the members after the entries are small: a few KiB, read from the end
        tail = read(min(length, size), max(size - length, 0))
        at = tail.rfind(OTHERS)
        if at >= 0 or length >= size:
            break
        length *= 4
    try:
        _require(at >= 0)
        top = json.loads(b"{" + tail[at + 2 :])  # small; the standard library's parser
    except (ValueError, RecursionError):
        top = None
    _require(isinstance(top, dict) and set(top) == MANIFEST_FIELDS - {"entries"})
    _require(type(top["format_version"]) is int and top["format_version"] == FORMAT_VERSION)
    _require(top["storage"] == STORAGE and top["payload"] == PAYLOAD_NAME)
    top["provenance"] = check_provenance(top["provenance"], "manifest.json provenance")
    _require(top["provenance_digest"] == provenance_digest(top["provenance"]))
    summary = top["summary"]
    _require(isinstance(summary, dict) and all(is_int(summary.get(field)) for field in ("sequences", "tokens")))
    return max(size - length, 0) + at, top


def _canonical_manifest(manifest: Buffer) -> bytes:
    """A manifest in another layout, parsed and checked whole (:class:`FormatError` names the problem), in its
    canonical layout with every character past ASCII escaped (a text that is not valid Unicode stays escaped,
    and its entry's first read refuses it)."""
    try:
        parsed = json.loads(bytes(manifest).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise FormatError(f"manifest.json is not valid UTF-8 JSON ({error}); the artifact is damaged.") from None
    check_manifest(parsed)
    return json.dumps(parsed, sort_keys=True, separators=(",", ":")).encode()


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


def _check_summary(summary: object, keys: np.ndarray, lengths: np.ndarray) -> dict[str, Any]:
    """The summary checked against the header's entries, sequences and tokens; its finish-reason counts (what only
    the entries tell: ``gencache verify`` counts them) must count every sequence."""
    reasons: Any = summary.get("finish_reasons") if isinstance(summary, dict) else {}
    if isinstance(summary, dict) and not (
        isinstance(reasons, dict)
        and reasons.keys() == set(FINISH_REASONS)
        and all(is_int(count) and count >= 0 for count in reasons.values())
        and sum(reasons.values()) == len(lengths)
    ):
        raise FormatError(f"manifest.json summary.finish_reasons {reasons!r} does not count {len(lengths)} sequences.")
    return check_summary(summary, _KeySet(keys), len(lengths), int(lengths.sum()), reasons)


# -- the header --------------------------------------------------------------------------------------------------
MAX_DIGITS = len(str(np.iinfo(np.int64).max)) - 1
"""The most digits of a number :func:`number_at` reads: every such number fits an int64."""
_POW10 = 10 ** np.arange(MAX_DIGITS, dtype=np.int64)
#: Row ``n``: the place value of each of the first :data:`MAX_DIGITS` bytes of a number of ``n`` digits (0 past them).
_SCALES = np.array(
    [[_POW10[n - 1 - i] if i < n else 0 for i in range(MAX_DIGITS)] for n in range(MAX_DIGITS + 1)], dtype=np.int64
)


class Mismatch(Exception):
    """The bytes are not the canonical layout the scan reads (the general path decides)."""


def require(condition: bool | np.bool_) -> None:
    if not condition:
        raise Mismatch


def window(buf: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each position (rows of a strided view: no index matrix)."""
    require(len(buf) >= width and (len(positions) == 0 or int(positions.min()) >= 0))
    try:
        rows: np.ndarray = np.lib.stride_tricks.sliding_window_view(buf, width)[positions]
    except IndexError:  # a position whose window runs past the end
        raise Mismatch from None
    return rows


def expect(buf: np.ndarray, positions: np.ndarray, literal: bytes) -> None:
    """``literal`` at each position."""
    require(
        len(positions) == 0 or bool((window(buf, positions, len(literal)) == np.frombuffer(literal, np.uint8)).all())
    )


def number_at(buf: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The JSON non-negative integers at each position (at most :data:`MAX_DIGITS` digits, each followed by at
    least one more byte than its digits in ``buf``) and their digit counts."""
    digits = window(buf, positions, MAX_DIGITS + 1) - np.uint8(ord("0"))  # wraps below "0": >= 10 is not a digit
    digit = digits <= 9
    count = np.argmin(digit, axis=1)
    require(bool(((count >= 1) & ~digit.all(axis=1)).all()))
    require(bool(((digits[:, 0] != 0) | (count == 1)).all()))  # no leading zeros
    value = (digits[:, :MAX_DIGITS].astype(np.int64) * _SCALES[count]).sum(axis=1)  # 0 past each number's digits
    return value, count


def _span(members: list[tuple[bytes, ...]]) -> int:
    """How many bytes of the header the matched tensor ``members`` cover, their separators included."""
    return sum(len(b"".join(column)) for column in zip(*members, strict=True)) + _MEMBER_LITERALS * len(members)


def scan_header(body: bytes, digest: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The sorted keys, each entry's first sequence, and every sequence's start (relative to the data) and token
    count, of the header JSON ``body`` (its padding stripped) of an artifact of provenance ``digest``: refused
    unless it is the canonical header the writer writes, its tensors back to back from the data start."""
    try:
        return _scan_single(body, digest)
    except Mismatch:
        pass
    meta = metadata_member(digest).encode()
    meta_at = body.find(meta)
    meta_end = meta_at + len(meta)
    before = _MEMBERS_BEFORE.findall(body, 1, max(meta_at, 0))
    after = _MEMBERS_AFTER.findall(body, meta_end + 1)
    if not (  # the opening brace, the members before the metadata, the metadata, a separator, the members after
        body[:1] == b"{"
        and meta_at == 1 + _span(before)
        and body[meta_end : meta_end + 1] in (b",", b"}")
        and meta_end + 1 + _span(after) == len(body)
        and body.count(b"}") == len(before) + len(after) + 2  # only the last separator closes the header
    ):
        raise FormatError(
            f"{PAYLOAD_NAME} header is not the one gencache writes for this manifest (its metadata, a tensor's "
            "name, dtype, shape or offsets, or its layout differ); the artifact is damaged."
        )
    columns = list(zip(*before, *after, strict=True)) or [()] * 5
    keys = np.array(columns[0], dtype=_KEY_DTYPE)
    names = np.array(columns[1], dtype="S")
    index, begins, ends, lengths = (np.array(column, dtype="S").astype(np.int64) for column in columns[1:])
    same = keys[1:] == keys[:-1]
    new = np.ones(len(keys), dtype=np.bool_)
    new[1:] = ~same
    first = np.append(np.flatnonzero(new), len(keys)).astype(np.int64)
    counts = np.diff(first)
    order = np.lexsort((index, np.cumsum(new)))  # each entry's sequences in their order
    begins, ends, lengths = begins[order], ends[order], lengths[order]
    by_offset = np.argsort(begins)
    if not (
        bool(((keys[1:] > keys[:-1]) | (same & (names[1:] > names[:-1]))).all())  # sorted, so each name once
        and bool((index < np.repeat(counts, counts)).all())  # so 0..n-1 for each key
        and bool((ends - begins == lengths * TOKEN_BYTES).all())
        and (not len(begins) or begins[by_offset[0]] == 0)
        and bool((begins[by_offset[1:]] == ends[by_offset[:-1]]).all())  # back to back
    ):
        raise FormatError(
            f"{PAYLOAD_NAME} header lists tensors out of order, not counted from 0 for each key, or not back to "
            "back from the data start; the artifact is damaged."
        )
    return keys[new], first, begins, lengths


def _scan_single(body: bytes, digest: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`scan_header` of a header of single-sequence entries, by a vectorised scan of its bytes (every fixed
    byte compared, every number and key validated, members tiling the object exactly); :class:`Mismatch` when the
    bytes are anything else."""
    buf = np.frombuffer(body + b" " * 19, dtype=np.uint8)  # every number with a byte past its longest
    meta = metadata_member(digest).encode()
    meta_at = body.find(meta)
    require(meta_at > 0 and body.find(meta, meta_at + 1) < 0)
    require(body.startswith(b"{") and body.endswith(b"}"))
    braces = np.flatnonzero(buf[: len(body)] == _BRACE)  # the header's, each tensor member's and the metadata's
    meta_brace = meta_at + meta.index(b"{")
    require(len(braces) >= 2 and braces[0] == 0 and meta_brace in braces)
    opens = braces[(braces != 0) & (braces != meta_brace)] - _MEMBER_OPEN.index(b"{")  # where each _MEMBER_OPEN is
    count = len(opens)
    keys = np.empty(count, dtype=_KEY_DTYPE)
    key_bytes = keys.view(np.uint8).reshape(count, DIGEST_HEX_CHARS)
    starts = np.empty(count, dtype=np.int64)
    lengths = np.empty(count, dtype=np.int64)
    member_ends = np.empty(count, dtype=np.int64)
    for at in range(0, count, ENTRY_WINDOW):
        rows = slice(at, at + ENTRY_WINDOW)
        o = opens[rows]
        expect(buf, o - DIGEST_HEX_CHARS - len(_NAME_OPEN), _NAME_OPEN)
        key_bytes[rows] = window(buf, o - DIGEST_HEX_CHARS, DIGEST_HEX_CHARS)
        expect(buf, o, _MEMBER_OPEN)
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
        require(bool((shape >= 1).all() and (end - begin == shape * TOKEN_BYTES).all()))
        starts[rows], lengths[rows], member_ends[rows] = begin, shape, p + len(_MEMBER_CLOSE)
    require(not keys.tobytes().translate(None, _HEX_DIGITS) and bool((keys[1:] > keys[:-1]).all()))
    _check_members_tile(buf, len(body), opens - DIGEST_HEX_CHARS - len(_NAME_OPEN), member_ends, meta_at, len(meta))
    _check_contiguous(starts, lengths)
    return keys, np.arange(count + 1, dtype=np.int64), starts, lengths


def _check_members_tile(
    buf: np.ndarray, size: int, starts: np.ndarray, ends: np.ndarray, meta_at: int, meta_size: int
) -> None:
    """The tensors' members (``starts``, ``ends``) and the metadata tile the header object: ``{m,m,...,m}``."""
    at = int(np.searchsorted(starts, meta_at))
    member_starts = np.insert(starts, at, meta_at)
    member_ends = np.insert(ends, at, meta_at + meta_size)
    require(member_starts[0] == len(b"{") and member_ends[-1] == size - len(b"}"))
    require(bool((member_starts[1:] == member_ends[:-1] + 1).all()))
    expect(buf, member_ends[:-1], b",")


def _check_contiguous(starts: np.ndarray, lengths: np.ndarray) -> None:
    """The tensors lie back to back from the data start."""
    order = np.argsort(starts)
    by_offset, lengths_by_offset = starts[order], lengths[order]
    require(not len(starts) or by_offset[0] == 0)
    require(bool((by_offset[1:] == by_offset[:-1] + lengths_by_offset[:-1] * TOKEN_BYTES).all()))
