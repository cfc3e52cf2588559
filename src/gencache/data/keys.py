"""The semantic key: what a sample asks, independent of how it is rendered or who answers it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gencache.core.canonical import canonical_bytes, sha256_hex
from gencache.core.errors import DatasetError

SEMANTIC_FIELDS = ("documents", "query", "shots", "task")
_FIELD_TYPES: tuple[tuple[str, str, Callable[[Any], bool]], ...] = (
    ("documents", "a list of strings", lambda v: isinstance(v, list) and all(isinstance(d, str) for d in v)),
    ("query", "a string", lambda v: isinstance(v, str)),
    ("shots", "a list of objects", lambda v: isinstance(v, list) and all(isinstance(s, Mapping) for s in v)),
    ("task", "an object", lambda v: isinstance(v, Mapping)),
)


def semantic_key(payload: Mapping[str, Any]) -> str:
    """Lowercase hex SHA-256 of the canonical JSON of exactly ``{documents, query, shots, task}``.

    Sorted keys (recursively), compact separators, raw UTF-8, NaN rejected. Dict order never matters; list order
    (documents, shots) does. Token ids, tokenizer, template, think markup, teacher and generation settings are
    never part of a key. Changing what this returns for an existing payload is a breaking change.
    """
    if set(payload) != set(SEMANTIC_FIELDS):
        raise DatasetError(
            f"Semantic payload must contain exactly these fields: {', '.join(SEMANTIC_FIELDS)} (it has: "
            f"{', '.join(sorted(map(str, payload)))})."
        )
    for name, kind, ok in _FIELD_TYPES:
        if not ok(payload[name]):
            raise DatasetError(f"Semantic payload field {name!r} must be {kind}.")
    try:
        data = canonical_bytes(dict(payload))
    except UnicodeEncodeError as exc:
        raise DatasetError(
            f"Semantic payload is not valid Unicode ({exc.reason} at position {exc.start}); fix the source text."
        ) from None
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"Semantic payload is not canonical JSON: {exc}.") from None
    return sha256_hex(data)
