"""Reference encoders of format 3, built from plain objects and :func:`canonical_json` (slow, obviously right).

gencache writes the header, the manifest and each content digest with one direct encoder each
(:mod:`gencache.artifact.header`, :mod:`gencache.artifact.manifest`); the tests hold them byte for byte to these
references, and to hand-written bytes, so that a change to either shows up as a failing test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gencache.artifact.names import FORMAT_VERSION, PAYLOAD_NAME, STORAGE, TOKEN_BYTES, TOKEN_DTYPE, Record, tensor_name
from gencache.core.canonical import json_digest


def make_record(
    start: int, lengths: Sequence[int], digests: Sequence[bytes], texts: Sequence[str], reasons: Sequence[str]
) -> Record:
    """The flat record the writer keeps for one entry (layout documented at ``gencache.artifact.names.Record``)."""
    flat: list[Any] = [start]
    for fields in zip(lengths, digests, texts, reasons, strict=True):
        flat += fields
    return tuple(flat)


def record_fields(
    record: Record,
) -> tuple[int, tuple[int, ...], tuple[bytes, ...], tuple[str, ...], tuple[str, ...]]:
    """``(start, lengths, digests, texts, finish_reasons)`` of a record."""
    return record[0], record[1::4], record[2::4], record[3::4], record[4::4]


def header_object(records: Mapping[str, Record], provenance_digest: str) -> dict[str, Any]:
    """The safetensors header as an object: metadata plus one member per tensor, offsets back to back."""
    header: dict[str, Any] = {
        "__metadata__": {"format_version": str(FORMAT_VERSION), "provenance_digest": provenance_digest}
    }
    for key, record in records.items():
        start, lengths, _, _, _ = record_fields(record)
        for i, n in enumerate(lengths):
            header[tensor_name(key, i)] = {
                "data_offsets": [start, start + n * TOKEN_BYTES],
                "dtype": TOKEN_DTYPE,
                "shape": [n],
            }
            start += n * TOKEN_BYTES
    return header


def reference_content_digest(
    sequence_refs: Sequence[Mapping[str, Any]], texts: Sequence[Any], finish_reasons: Sequence[Any]
) -> str:
    """SHA-256 of the canonical JSON of ``{sequences: [{dtype, shape, digest}], text, finish_reasons}``."""
    return json_digest(
        {
            "sequences": [
                {"dtype": ref["dtype"], "shape": list(ref["shape"]), "digest": ref["digest"]} for ref in sequence_refs
            ],
            "text": list(texts),
            "finish_reasons": list(finish_reasons),
        }
    )


def manifest_object(
    provenance: Mapping[str, Any], records: Mapping[str, Record], summary: Mapping[str, Any]
) -> dict[str, Any]:
    """The manifest as an object (``provenance`` already checked, ``summary`` from ``build_summary``)."""
    entries = {}
    for key, record in records.items():
        _, lengths, digests, texts, reasons = record_fields(record)
        refs = [
            {"tensor": tensor_name(key, i), "dtype": TOKEN_DTYPE, "shape": [n], "digest": digest.hex()}
            for i, (n, digest) in enumerate(zip(lengths, digests, strict=True))
        ]
        entries[key] = {
            "sequences": refs,
            "text": list(texts),
            "finish_reasons": list(reasons),
            "content_digest": reference_content_digest(refs, texts, reasons),
        }
    return {
        "format_version": FORMAT_VERSION,
        "storage": STORAGE,
        "payload": PAYLOAD_NAME,
        "provenance": dict(provenance),
        "provenance_digest": json_digest(dict(provenance)),
        "entries": entries,
        "summary": dict(summary),
    }
