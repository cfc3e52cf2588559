"""The semantic key: what a sample asks, independent of how it is rendered or who answers it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gencache.core.canonical import canonical_bytes, sha256_hex
from gencache.core.errors import DatasetError

SEMANTIC_FIELDS = ("documents", "query", "shots", "task")


def _check_payload(payload: Mapping[str, Any]) -> None:
    if not isinstance(payload, Mapping):
        raise DatasetError(f"A semantic payload must be an object, got {type(payload).__name__}.")
    extra = sorted(str(k) for k in payload if k not in SEMANTIC_FIELDS)
    missing = [k for k in SEMANTIC_FIELDS if k not in payload]
    if extra or missing:
        named = (("unexpected", extra), ("missing", missing))
        detail = "; ".join(f"{what}: {', '.join(names)}" for what, names in named if names)
        raise DatasetError(
            f"Semantic payload must contain exactly these fields: {', '.join(SEMANTIC_FIELDS)} ({detail})."
        )
    documents = payload["documents"]
    if not isinstance(documents, list) or not all(isinstance(d, str) for d in documents):
        raise DatasetError("Semantic payload field 'documents' must be a list of strings.")
    if not isinstance(payload["query"], str):
        raise DatasetError("Semantic payload field 'query' must be a string.")
    shots = payload["shots"]
    if not isinstance(shots, list) or not all(isinstance(s, Mapping) for s in shots):
        raise DatasetError("Semantic payload field 'shots' must be a list of objects.")
    if not isinstance(payload["task"], Mapping):
        raise DatasetError("Semantic payload field 'task' must be an object.")


def semantic_key(payload: Mapping[str, Any]) -> str:
    """Lowercase hex SHA-256 of the canonical JSON of exactly ``{documents, query, shots, task}``.

    Sorted keys (recursively), compact separators, raw UTF-8, NaN rejected. Dict order never matters; list order
    (documents, shots) does. Token ids, tokenizer, template, think markup, teacher and generation settings are
    never part of a key. Changing what this returns for an existing payload is a breaking change.
    """
    _check_payload(payload)
    try:
        data = canonical_bytes(dict(payload))
    except UnicodeEncodeError as exc:
        raise DatasetError(
            f"Semantic payload is not valid Unicode ({exc.reason} at position {exc.start}); "
            "fix the source text (lone surrogate)."
        ) from None
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"Semantic payload is not canonical JSON: {exc}.") from None
    return sha256_hex(data)
