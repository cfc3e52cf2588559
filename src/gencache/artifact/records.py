"""What the writer keeps of each appended entry, and the order entries are written in (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gencache.artifact.names import DIGEST_HEX_CHARS, is_key
from gencache.core.errors import FormatError

Record = tuple[Any, ...]
"""What the writer keeps of one appended entry, flat so that it is one small tuple: ``(start, n_0, digest_0,
text_0, reason_0, n_1, digest_1, text_1, reason_1, ...)``. ``start`` is the offset of the entry's first sequence
relative to the data start (an entry's sequences are contiguous, in order); per sequence: its token count, the raw
32-byte SHA-256 of its bytes, its text and its finish reason. Read it only through the accessors below
below."""

RECORD_STRIDE = 4  # fields per sequence, after the leading start


def is_single(record: Record) -> bool:
    """True when ``record`` holds exactly one sequence (the common case the encoders take a fast path for)."""
    return len(record) == 1 + RECORD_STRIDE


def record_lengths(record: Record) -> tuple[int, ...]:
    """Each sequence's token count."""
    return record[1::RECORD_STRIDE]


def record_digests(record: Record) -> tuple[bytes, ...]:
    """Each sequence's raw 32-byte SHA-256."""
    return record[2::RECORD_STRIDE]


def record_texts(record: Record) -> tuple[str, ...]:
    """Each sequence's decoded text."""
    return record[3::RECORD_STRIDE]


def record_reasons(record: Record) -> tuple[str, ...]:
    """Each sequence's finish reason."""
    return record[4::RECORD_STRIDE]


def sorted_record_keys(records: Mapping[str, Record]) -> list[str]:
    """The entry keys in manifest and header order, each checked to be a semantic key.

    Checked in bulk (one join, one hex round trip): every key is 64 lowercase hex characters, so no name needs
    escaping in JSON and ``"__metadata__"`` sorts between the keys that start with a digit and those that start
    with a letter.
    """
    keys = sorted(records)
    try:
        joined = "".join(keys)
        valid = set(map(len, keys)) <= {DIGEST_HEX_CHARS} and bytes.fromhex(joined).hex() == joined
    except (TypeError, ValueError):
        valid = False
    if not valid:
        bad = next((k for k in keys if not is_key(k)), None)
        raise FormatError(f"Entry key {bad!r} is not a 64-character lowercase hex semantic key.")
    return keys
