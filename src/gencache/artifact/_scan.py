"""The vectorised byte checks of the reader's canonical scan (:mod:`gencache.artifact._index`).

Each check looks at many positions of one buffer at once (numpy rows of a strided view, no Python loop per
position) and raises :class:`Mismatch` when the bytes there are not what it reads: the scan then leaves the
document to the general parser.
"""

from __future__ import annotations

import functools

import numpy as np

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


def windows(buf: np.ndarray, width: int) -> np.ndarray:
    """Every ``width``-byte window of the bytes ``buf`` as the rows of one strided view, made directly when ``buf``
    is contiguous (numpy's ``sliding_window_view`` checks its arguments for several microseconds a call, which a
    shard of a few entries pays dozens of times)."""
    if buf.strides != (1,):
        view: np.ndarray = np.lib.stride_tricks.sliding_window_view(buf, width)
        return view
    return np.ndarray((len(buf) - width + 1, width), dtype=np.uint8, buffer=buf, strides=(1, 1))


def window(buf: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each position (rows of a strided view: no index matrix)."""
    require(len(buf) >= width and (len(positions) == 0 or int(positions.min()) >= 0))
    try:
        rows: np.ndarray = windows(buf, width)[positions]
    except IndexError:  # a position whose window runs past the end
        raise Mismatch from None
    return rows


@functools.cache
def _literal(literal: bytes) -> np.ndarray:
    """``literal``'s bytes as an array (the scan checks a handful of literals, each many times)."""
    return np.frombuffer(literal, np.uint8)


def expect(buf: np.ndarray, positions: np.ndarray, literal: bytes) -> None:
    """``literal`` at each position."""
    require(len(positions) == 0 or bool((window(buf, positions, len(literal)) == _literal(literal)).all()))


def number_at(buf: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The JSON non-negative integers at each position (at most :data:`MAX_DIGITS` digits) and their digit
    counts."""
    width = MAX_DIGITS + 1  # the digits and the byte that ends them
    near_end = positions > len(buf) - width
    if not near_end.any():  # the common case: every number has its width of bytes after it
        raw = window(buf, positions, width)
    else:  # the last number of a document: read it from a zero-padded copy of the tail
        raw = np.empty((len(positions), width), dtype=np.uint8)
        raw[~near_end] = window(buf, positions[~near_end], width)
        require(int(positions.max()) < len(buf) and int(positions.min()) >= 0)
        padded = np.concatenate([buf[max(0, len(buf) - width) :], np.zeros(width, dtype=np.uint8)])
        base = len(buf) - (len(padded) - width)
        raw[near_end] = windows(padded, width)[positions[near_end] - base]
    digits = raw - np.uint8(ord("0"))  # wraps below "0": anything >= 10 is not a digit
    digit = digits <= 9
    count = np.argmin(digit, axis=1)
    require(bool(((count >= 1) & ~digit.all(axis=1)).all()))
    require(bool(((digits[:, 0] != 0) | (count == 1)).all()))  # no leading zeros
    value = (digits[:, :MAX_DIGITS].astype(np.int64) * _SCALES[count]).sum(axis=1)  # 0 past each number's digits
    return value, count
