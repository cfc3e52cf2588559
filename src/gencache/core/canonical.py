"""Canonical JSON and SHA-256 helpers shared by keys, the format and the manifest (pure, no I/O)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any


def canonical_json(value: Any) -> str:
    """Sorted keys, compact separators, raw UTF-8 (``ensure_ascii=False``), NaN and infinities rejected."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_bytes(value: Any) -> bytes:
    """:func:`canonical_json` encoded as UTF-8 (lone surrogates raise ``UnicodeEncodeError``)."""
    return canonical_json(value).encode("utf-8")


def sha256_hex(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def json_digest(value: Any) -> str:
    return sha256_hex(canonical_bytes(value))


def is_int(value: object) -> bool:
    """True for a JSON integer (``bool`` is not an int here)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_sha256_hex(value: object) -> bool:
    return isinstance(value, str) and re.fullmatch("[0-9a-f]{64}", value) is not None
