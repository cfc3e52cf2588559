"""Canonical JSON and SHA-256 helpers shared by keys, the format and the manifest (pure, no I/O)."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Sorted keys, compact separators, raw UTF-8 (``ensure_ascii=False``), NaN and infinities rejected."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_bytes(value: Any) -> bytes:
    """:func:`canonical_json` encoded as UTF-8 (lone surrogates raise ``UnicodeEncodeError``)."""
    return canonical_json(value).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def json_digest(value: Any) -> str:
    """Lowercase hex SHA-256 of the canonical JSON of ``value``."""
    return sha256_hex(canonical_bytes(value))


def is_sha256_hex(value: object) -> bool:
    """True for a 64-character lowercase hexadecimal string."""
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
