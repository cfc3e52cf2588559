"""The vectorised byte checks of the reader's canonical scan (:mod:`gencache.artifact._index`).

Each check looks at many positions of one buffer at once (numpy rows of a strided view, no Python loop per
position) and raises :class:`Mismatch` when the bytes there are not what it reads: the scan then leaves the
document to the general parser.
"""

from __future__ import annotations

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
