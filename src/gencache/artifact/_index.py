"""The reader's index of one artifact: the payload header in flat numpy arrays, the manifest's entries on demand.

:func:`build_index` checks the whole header (a vectorised scan of its bytes: a JSON parser building half a million
objects is several times slower) and the manifest's members after its entries, and keeps sorted keys, per-sequence
offsets and lengths: a few arrays that a forked process shares without copying. The manifest's entries (about 1 KB
each, mostly texts, against about 140 bytes of header) are not read at open: :meth:`CompactIndex.entry` finds one
by a search of the manifest's bytes (its keys are sorted) and checks it when it is first read, so opening costs
O(header), not O(manifest).
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Iterator
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
from gencache.core.errors import FormatError

Buffer = bytes | mmap.mmap
TEXTS = msgspec.json.Decoder(tuple[str, ...])

# The canonical manifest: {"entries":{"<key>":{"content_digest":...,"text":[...]},...},"format_version":...}.
# What follows a key in an entry's member never occurs elsewhere (a quote inside a JSON string is escaped), so it
# marks where each entry is; the text list is the entry's last member.
_MANIFEST_OPEN = b'{"entries":{'
_ENTRY_OPEN = b'":{"content_digest":"'
_BEFORE_KEY = b',"'
_TEXT_OPEN = b'"text":['  # a member name, so never inside a string either
OTHERS = b'},"format_version":'  # where the members after the entries begin


@dataclass(frozen=True, eq=False)
class CompactIndex:
    """The checked header of one artifact in flat arrays (``n`` entries, ``s`` sequences) and its manifest."""

    keys: np.ndarray  # (n,) S64: the hex keys, sorted
    first: np.ndarray  # (n+1,) int64: entry i's sequences are first[i]:first[i+1]
    starts: np.ndarray  # (s,) int64: byte offset of each sequence relative to the data start
    lengths: np.ndarray  # (s,) int64: tokens of each sequence
    manifest: Buffer  # canonical manifest bytes
    entries_end: int  # where the entries' object closes in ``manifest``
    members: dict[str, Any]  # the manifest's members after its entries, checked

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
        for at in range(0, len(keys), 4096):  # a chunk of keys decoded at a time
            for raw in keys[at : at + 4096].tolist():
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

    def entry(self, position: int) -> tuple[dict[str, Any], tuple[int, int]]:
        """The manifest entry of ``position``, checked as :func:`check_manifest` checks an entry and against that
        key's tensors in the header, and the byte span of its text list's JSON in the manifest."""
        key = self.key(position)
        start, end = self._locate(position, key)
        raw = self.manifest[start:end]
        try:
            entry = msgspec.json.decode(raw)
        except msgspec.DecodeError as error:
            raise FormatError(f"manifest.json entry {key} is not valid JSON ({error}) (damaged).") from None
        lo, hi = self.first[position : position + 2].tolist()
        if (lengths := check_entry(key, entry)) != self.lengths[lo:hi].tolist():
            raise FormatError(
                f"manifest.json entry {key} lists sequences of {lengths} tokens but {PAYLOAD_NAME} holds "
                f"{self.lengths[lo:hi].tolist()}."
            )
        texts_at = start + raw.rfind(_TEXT_OPEN) + len(_TEXT_OPEN) - 1  # the text list's opening bracket
        try:
            texts = TEXTS.decode(self.manifest[texts_at : end - 1])
        except msgspec.DecodeError:
            texts = None
        if texts != tuple(entry["text"]):
            raise FormatError(f"manifest.json entry {key} is not in the canonical layout (its text is not last).")
        return entry, (texts_at, end - 1)


def build_index(manifest: Buffer, header_raw: bytes, payload_size: int) -> CompactIndex:
    """Check the manifest's members after its entries (``manifest``, its bytes) and the payload header bytes
    ``header_raw`` (the ``H`` bytes after the length prefix) of a payload of ``payload_size`` bytes, and each
    against the other (the summary against the header's entries, sequences and tokens; its finish-reason counts,
    what only the entries tell and ``gencache verify`` counts, must count every sequence); :class:`FormatError`
    names the first problem."""
    try:
        entries_end, top = manifest_tail(manifest)
        if entries_end > len(_MANIFEST_OPEN):  # the first entry's key comes first
            _require(manifest.find(_ENTRY_OPEN, len(_MANIFEST_OPEN)) == len(_MANIFEST_OPEN) + 1 + DIGEST_HEX_CHARS)
        _require(manifest[: len(_MANIFEST_OPEN)] == _MANIFEST_OPEN)
    except FormatError:
        manifest = _canonical_manifest(manifest)
        entries_end, top = manifest_tail(manifest)
    keys, first, starts, lengths = check_payload(top, header_raw, payload_size)
    return CompactIndex(keys, first, starts, lengths, manifest, entries_end, top)


def check_payload(
    top: dict[str, Any], header_raw: bytes, payload_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The scanned header of a payload of ``payload_size`` bytes, checked against that size and the manifest's
    members after its entries ``top`` (also when only they were read, by range from a bucket)."""
    keys, first, starts, lengths = scan_header(header_raw.rstrip(b" "), top["provenance_digest"])
    tokens = int(lengths.sum())
    if payload_size != (expected := 8 + len(header_raw) + TOKEN_BYTES * tokens):
        raise FormatError(
            f"{PAYLOAD_NAME} is {payload_size} bytes but its header describes {expected} (truncated or extended)."
        )
    names = (raw.decode() for raw in keys.tolist())
    check_summary(top["summary"], names, entries=len(keys), sequences=len(lengths), tokens=tokens)
    reasons = top["summary"]["finish_reasons"]
    if reasons.keys() != set(FINISH_REASONS) or min(reasons.values()) < 0 or sum(reasons.values()) != len(lengths):
        raise FormatError(f"manifest.json summary.finish_reasons {reasons!r} does not count {len(lengths)} sequences.")
    return keys, first, starts, lengths


def _require(condition: bool) -> None:
    if not condition:
        raise FormatError(f"manifest.json does not hold a format-{FORMAT_VERSION} manifest (damaged).")


# -- the manifest ------------------------------------------------------------------------------------------------
def manifest_tail(manifest: Buffer) -> tuple[int, dict[str, Any]]:
    """Where the entries' object closes in a canonical manifest and its members after it, checked as
    :func:`check_manifest` checks them."""
    at = manifest.rfind(OTHERS)
    try:
        _require(at >= 0)
        top = json.loads(b"{" + manifest[at + 2 :])  # small; the standard library's parser
    except (ValueError, RecursionError):
        top = None
    _require(isinstance(top, dict) and set(top) == MANIFEST_FIELDS - {"entries"})
    _require(type(top["format_version"]) is int and top["format_version"] == FORMAT_VERSION)
    _require(top["storage"] == STORAGE and top["payload"] == PAYLOAD_NAME)
    top["provenance"] = check_provenance(top["provenance"], "manifest.json provenance")
    _require(top["provenance_digest"] == provenance_digest(top["provenance"]))
    return at, top


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


# -- the header --------------------------------------------------------------------------------------------------
MAX_DIGITS = len(str(np.iinfo(np.int64).max)) - 1
"""The most digits of a number :func:`number_at` reads: every such number fits an int64."""
_POW10 = 10 ** np.arange(MAX_DIGITS, dtype=np.int64)
#: Row ``n``: the place value of each of the first :data:`MAX_DIGITS` bytes of a number of ``n`` digits (0 past them).
_SCALES = np.array(
    [[_POW10[n - 1 - i] if i < n else 0 for i in range(MAX_DIGITS)] for n in range(MAX_DIGITS + 1)], dtype=np.int64
)
_DAMAGED = (
    f"{PAYLOAD_NAME} header is not the one gencache writes for this manifest (its metadata, a tensor's name, dtype, "
    "shape or offsets, their order, or its layout differ); the artifact is damaged."
)


def require(condition: bool | np.bool_) -> None:
    if not condition:
        raise FormatError(_DAMAGED)


def window(buf: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each position (rows of a strided view: no index matrix)."""
    try:
        rows: np.ndarray = np.lib.stride_tricks.sliding_window_view(buf, width)[positions]
    except IndexError:  # a position whose window runs past the end
        raise FormatError(_DAMAGED) from None
    return rows


def expect(buf: np.ndarray, positions: np.ndarray, literal: bytes) -> None:
    """``literal`` at each position."""
    require(bool((window(buf, positions, len(literal)) == np.frombuffer(literal, np.uint8)).all()))


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


def scan_header(body: bytes, digest: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The sorted keys, each entry's first sequence, and every sequence's start (relative to the data) and token
    count, of the header JSON ``body`` (its padding stripped) of an artifact of provenance ``digest``.

    A vectorised scan of the bytes, refused (:class:`FormatError`) unless they are the canonical header the writer
    writes: every fixed byte compared, every key and number validated, the members tiling the object in sorted
    order, each key's sequences counted from 0 and the tensors back to back from the data start. Each member holds
    ten quotes (the metadata too), so the quotes give where every member's name starts and ends.
    """
    buf = np.frombuffer(body + b" " * (MAX_DIGITS + 1), dtype=np.uint8)  # every number with a byte past its longest
    meta = metadata_member(digest).encode()
    meta_at = body.find(meta)
    require(meta_at > 0 and body.find(meta, meta_at + 1) < 0 and body[:1] == b"{")
    closes = np.flatnonzero(buf[: len(body)] == ord("}"))  # each member's last byte (one each), the header's
    require(len(closes) >= 2 and closes[-1] == len(body) - 1 == closes[-2] + 1)
    expect(buf, closes[:-2] + 1, b",")
    members = np.append(1, closes[:-2] + 2)  # where each member starts: they tile the object, {m,m,...,m}
    tensor = members != meta_at
    require(not tensor.all())
    names, closes = members[tensor], closes[:-1][tensor]  # each tensor member's opening quote and closing brace
    count = len(names)
    keys = np.empty(count, dtype=f"S{DIGEST_HEX_CHARS}")
    key_bytes = keys.view(np.uint8).reshape(count, DIGEST_HEX_CHARS)
    index, rank, starts, lengths = (np.empty(count, dtype=np.int64) for _ in range(4))
    for at in range(0, count, 1 << 13):
        rows = slice(at, at + (1 << 13))
        o = names[rows]
        expect(buf, o, b'"')
        key_bytes[rows] = window(buf, o + 1, DIGEST_HEX_CHARS)
        p = o + 1 + DIGEST_HEX_CHARS
        expect(buf, p, b".")
        index[rows], digits = number_at(buf, p + 1)
        rank[rows] = index[rows] * _POW10[MAX_DIGITS - digits] + digits  # orders the indices as texts: "10" < "2"
        p = p + 1 + digits
        expect(buf, p, b'":{"data_offsets":[')
        begin, digits = number_at(buf, p + len(b'":{"data_offsets":['))
        p = p + len(b'":{"data_offsets":[') + digits
        expect(buf, p, b",")
        end, digits = number_at(buf, p + 1)
        p = p + 1 + digits
        expect(buf, p, b'],"dtype":"I64","shape":[')
        shape, digits = number_at(buf, p + len(b'],"dtype":"I64","shape":['))
        p = p + len(b'],"dtype":"I64","shape":[') + digits
        require(bool((p + 1 == closes[rows]).all()))
        expect(buf, p, b"]")
        require(bool((shape >= 1).all() and (end - begin == shape * TOKEN_BYTES).all()))
        starts[rows], lengths[rows] = begin, shape
    require(not keys.tobytes().translate(None, b"0123456789abcdef"))
    # in sorted order, each key's indices 0..n-1
    same = keys[1:] == keys[:-1]
    require(bool(((keys[1:] > keys[:-1]) | (same & (rank[1:] > rank[:-1]))).all()))
    # "__metadata__" sorts after the keys that start with a digit and before those that start with a letter
    require(int(np.flatnonzero(~tensor)[0]) == int(np.count_nonzero(key_bytes[:, 0] <= ord("9"))))
    new = np.ones(count, dtype=np.bool_)
    new[1:] = ~same
    first = np.append(np.flatnonzero(new), count).astype(np.int64)
    counts = np.diff(first)
    require(bool((index < np.repeat(counts, counts)).all()))
    order = np.empty(count, dtype=np.int64)
    order[np.repeat(first[:-1], counts) + index] = np.arange(count)  # each entry's sequences in their order
    starts, lengths = starts[order], lengths[order]
    by_offset = np.argsort(starts)
    require(not count or starts[by_offset[0]] == 0)
    require(bool((starts[by_offset[1:]] == starts[by_offset[:-1]] + lengths[by_offset[:-1]] * TOKEN_BYTES).all()))
    return keys[new], first, starts, lengths
