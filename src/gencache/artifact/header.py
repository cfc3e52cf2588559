"""The safetensors header of ``cache.safetensors``: its reserved capacity, its one encoder, its length prefix.

The file starts with an 8-byte little-endian length ``H`` (the capacity reserved before generation, a multiple of
8), then ``H`` bytes of canonical header JSON padded with spaces. The header maps each tensor name ``<key>.<i>``
to ``{"data_offsets": [start, end], "dtype": "I64", "shape": [n]}`` (offsets relative to the data start) and
``__metadata__`` to ``{"format_version": "3", "provenance_digest": <hex>}``. Pure: no I/O, no torch.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence

from gencache.artifact.names import (
    DIGEST_HEX_CHARS,
    FORMAT_VERSION,
    LENGTH_PREFIX_BYTES,
    MAX_HEADER_BYTES,
    PAYLOAD_NAME,
    RECORD_STRIDE,
    TOKEN_BYTES,
    TOKEN_DTYPE,
    Record,
    tensor_name,
)
from gencache.core.canonical import canonical_json, is_int
from gencache.core.errors import FormatError, HeaderCapacityError

_METADATA_NAME = "__metadata__"


def _tensor_member_text(name: str, start: object, end: object, n: object) -> str:
    """A tensor's member ``"<name>":{...}``: its data offsets (relative to the data start) and token count."""
    return f'"{name}":{{"data_offsets":[{start},{end}],"dtype":"{TOKEN_DTYPE}","shape":[{n}]}}'


def metadata_member(provenance_digest: str) -> str:
    """The header's ``"__metadata__":{...}`` member, for an artifact of that provenance digest."""
    meta = canonical_json({"format_version": str(FORMAT_VERSION), "provenance_digest": provenance_digest})
    return f'"{_METADATA_NAME}":{meta}'


def header_capacity(entries: int, sequences_per_entry: int, max_new_tokens: int) -> int:
    """The header reservation for a run of ``entries`` unique keys, each with ``sequences_per_entry`` sequences
    of at most ``max_new_tokens`` tokens.

    A fixed formula: the length of the metadata plus, per tensor, the longest header member that tensor can
    have (a 64-hex key, the largest sequence index, offsets up to the largest possible payload and the largest
    shape), rounded up to a multiple of 8. It bounds the real header for any keys and lengths of that plan.
    Raises :class:`HeaderCapacityError` (suggesting ``--shard``) when it exceeds the safetensors limit.
    """
    tensors = entries * sequences_per_entry
    max_payload = tensors * max_new_tokens * TOKEN_BYTES
    longest_name = tensor_name("0" * DIGEST_HEX_CHARS, sequences_per_entry - 1)
    member = len(_tensor_member_text(longest_name, max_payload, max_payload, max_new_tokens)) + len(",")
    needed = len(metadata_member("0" * DIGEST_HEX_CHARS)) + len("{}") + tensors * member
    capacity = -(-needed // 8) * 8
    if capacity > MAX_HEADER_BYTES:
        shards = math.ceil(capacity * 1.25 / MAX_HEADER_BYTES)
        raise HeaderCapacityError(
            f"The safetensors header for {entries:,} entries x {sequences_per_entry} sequences x {max_new_tokens} "
            f"tokens needs up to {capacity:,} bytes, over the {MAX_HEADER_BYTES:,}-byte safetensors limit; "
            f"split the run with --shard I/{shards} (or more shards)."
        )
    return capacity


def build_header(
    records: Mapping[str, Record], provenance_digest: str, *, sorted_keys: Sequence[str] | None = None
) -> bytes:
    """The canonical header JSON (unpadded) for the appended entries, in the sorted order of canonical JSON.

    Keys are semantic keys (the writer checked each): hex, so no name needs escaping and ``"__metadata__"`` sorts
    between the keys that start with a digit and those that start with a letter. ``sorted_keys`` spares a caller
    that also builds the manifest a second sort.
    """
    keys = sorted(records) if sorted_keys is None else sorted_keys
    meta = metadata_member(provenance_digest)
    at = bisect.bisect_left(keys, _METADATA_NAME)
    width, parts = TOKEN_BYTES, []
    for position, key in enumerate(keys):
        if position == at:
            parts.append(meta)
        record = records[key]
        if len(record) == 1 + RECORD_STRIDE:  # one sequence: _tensor_member_text(tensor_name(key, 0), ...), inlined
            start, n = record[0], record[1]
            parts.append(f'"{key}.0":{{"data_offsets":[{start},{start + n * width}],"dtype":"I64","shape":[{n}]}}')
            continue
        lengths = record[1::RECORD_STRIDE]
        starts = list(itertools.accumulate([n * width for n in lengths[:-1]], initial=record[0]))
        for i in sorted(range(len(lengths)), key=str):  # the order canonical JSON sorts names: "10" before "2"
            s, n = starts[i], lengths[i]
            parts.append(_tensor_member_text(tensor_name(key, i), s, s + n * width, n))
    if at == len(keys):
        parts.append(meta)
    return ("{" + ",".join(parts) + "}").encode("utf-8")


def length_prefix(capacity: int) -> bytes:
    """The 8-byte little-endian header length field."""
    if not is_int(capacity) or capacity <= 0 or capacity % 8 or capacity > MAX_HEADER_BYTES:
        raise HeaderCapacityError(
            f"Header capacity must be a positive multiple of 8 up to {MAX_HEADER_BYTES:,} bytes, got {capacity!r}; "
            "compute it with gencache.artifact.header.header_capacity."
        )
    return capacity.to_bytes(LENGTH_PREFIX_BYTES, "little")


# -- reading -----------------------------------------------------------------------------------------------
def read_length_prefix(prefix: bytes, file_size: int) -> int:
    """The header capacity from the first 8 bytes, checked against the format-3 rules and the file size."""
    capacity = int.from_bytes(prefix[:LENGTH_PREFIX_BYTES], "little")
    if capacity % 8 or not 0 < capacity <= min(MAX_HEADER_BYTES, file_size - LENGTH_PREFIX_BYTES):  # a short file too
        raise FormatError(
            f"{PAYLOAD_NAME} ({file_size} bytes) does not start with a format-{FORMAT_VERSION} header length (a "
            f"positive multiple of 8 up to {MAX_HEADER_BYTES:,} that the file holds; it reads {capacity}): the file "
            "is damaged or truncated."
        )
    return capacity
