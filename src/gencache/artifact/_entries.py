"""The writer's general entry check: any number of sequences (bytes-like, little-endian int64), one text and one
finish reason per sequence, turned into the buffers to write and the fields of the entry's record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gencache.artifact.names import FINISH_REASONS, TOKEN_BYTES
from gencache.core.errors import FormatError

REASONS = frozenset(FINISH_REASONS)


_REASON_STR = {reason: reason for reason in FINISH_REASONS}  # a str subclass equal to a reason -> the plain str


def as_view(sequence: object, where: str) -> memoryview:
    """``sequence`` as a flat byte view of at least one int64 token; :class:`FormatError` names ``where``."""
    try:
        view = memoryview(sequence)  # type: ignore[arg-type]
    except TypeError:
        raise FormatError(
            f"{where} must be a bytes-like object of little-endian int64 token ids (for a tensor: "
            "t.to(torch.int64).contiguous().numpy())."
        ) from None
    if not view.c_contiguous:
        raise FormatError(f"{where} must be contiguous.")
    kind = view.format.lstrip("@=<")
    if kind not in ("B", "b", "c") and not (kind in ("q", "l") and view.itemsize == TOKEN_BYTES):
        raise FormatError(
            f"{where} holds elements of format {view.format!r}; give little-endian int64 token ids or their raw bytes."
        )
    view = view.cast("B")
    if view.nbytes == 0 or view.nbytes % TOKEN_BYTES:
        raise FormatError(f"{where} must hold at least one int64 token ({view.nbytes} bytes given).")
    return view


def entry_fields(
    key: str, sequences: Sequence[Any], texts: Sequence[str], finish_reasons: Sequence[str]
) -> tuple[list[bytes | memoryview], list[int], list[Any]]:
    """Check one entry; its buffers, their sizes in bytes and its record fields without the start (token count,
    digest placeholder ``None``, text, plain-str reason per sequence). :class:`FormatError` names the problem."""
    if isinstance(sequences, (bytes, bytearray, memoryview)):
        raise FormatError(f"Entry {key}: sequences must be a list of sequences, not one bytes object.")
    for name, value in (("texts", texts), ("finish reasons", finish_reasons)):
        if isinstance(value, (str, bytes, bytearray, memoryview)):
            raise FormatError(f"Entry {key}: {name} must be a list of strings, one per sequence, not one string.")
    buffers: list[bytes | memoryview] = []
    for i, sequence in enumerate(sequences):
        if type(sequence) is bytes and sequence and not len(sequence) % TOKEN_BYTES:
            buffers.append(sequence)
        else:
            buffers.append(as_view(sequence, f"Entry {key} sequence {i}"))
    texts, reasons = tuple(texts), tuple(finish_reasons)
    count = len(buffers)
    if not count:
        raise FormatError(f"Entry {key} has no sequences; every entry needs at least one answer.")
    if len(texts) != count or len(reasons) != count:
        raise FormatError(
            f"Entry {key} has {count} sequences, {len(texts)} texts and {len(reasons)} finish reasons; "
            "give one text and one finish reason per sequence."
        )
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise FormatError(f"Entry {key} text {i} must be a str, got {type(text).__name__}.")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise FormatError(f"Entry {key} text {i} is not valid Unicode ({error.reason}).") from None
    for reason in reasons:
        if not isinstance(reason, str) or reason not in REASONS:
            raise FormatError(f"Entry {key} finish reason {reason!r} is not one of {', '.join(FINISH_REASONS)}.")
    sizes = [b.nbytes if isinstance(b, memoryview) else len(b) for b in buffers]
    fields: list[Any] = []  # (n, digest placeholder, text, reason) per sequence; reasons as the plain str
    for size, text, reason in zip(sizes, texts, reasons, strict=True):
        fields += (size // TOKEN_BYTES, None, text, _REASON_STR[reason])
    return buffers, sizes, fields
