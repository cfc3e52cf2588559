"""What the writer keeps of each appended entry, and the order entries are written in (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gencache.artifact.names import DIGEST_HEX_CHARS, is_key
from gencache.core.errors import FormatError

Record = tuple[Any, ...]
"""What the writer keeps of one appended entry, flat so that it is one small tuple: ``(start, n_0, digest_0,
text_0, reason_0, n_1, digest_1, text_1, reason_1, ...)``. ``start`` is the offset of the entry's first sequence
relative to the data start (an entry's sequences are contiguous, in order); per sequence: its token count, the raw
32-byte SHA-256 of its bytes, its text and its finish reason. Read it only through the accessors below
(:func:`record_lengths`, :func:`record_digests`, :func:`record_texts`, :func:`record_reasons`, :func:`is_single`)."""

RECORD_STRIDE = 4
"""Fields per sequence in a :data:`Record` (after the leading ``start``)."""


SINGLE_RECORD_LENGTH = 1 + RECORD_STRIDE
"""The length of the record of an entry with one sequence (the common case the writers take a fast path for)."""


def is_single(record: Record) -> bool:
    """True when ``record`` holds exactly one sequence."""
    return len(record) == SINGLE_RECORD_LENGTH


def record_start(record: Record) -> int:
    """The offset of the entry's first sequence, relative to the data start."""
    start: int = record[0]
    return start


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


def check_record_length(key: str, record: Record) -> None:
    """:class:`FormatError` unless ``record`` is ``start`` plus whole groups of :data:`RECORD_STRIDE` fields."""
    if len(record) % RECORD_STRIDE != 1:
        raise FormatError(f"Entry {key} has a record of {len(record)} fields.")


def sorted_record_keys(records: Mapping[str, Record]) -> list[str]:
    """The entry keys in manifest and header order, each checked to be a semantic key.

    Checked in bulk (one join, one hex round trip): every key is 64 lowercase hex characters, so no name needs
    escaping in JSON and ``"__metadata__"`` sorts between the keys that start with a digit and those that start
    with a letter.
    """
    keys = sorted(records)
    _check_keys(keys)
    return keys


def _check_keys(keys: Sequence[str]) -> None:
    try:
        joined = "".join(keys)
        valid = set(map(len, keys)) <= {DIGEST_HEX_CHARS} and bytes.fromhex(joined).hex() == joined
    except (TypeError, ValueError):
        valid = False
    if not valid:
        bad = next((k for k in keys if not is_key(k)), None)
        raise FormatError(f"Entry key {bad!r} is not a 64-character lowercase hex semantic key.")
