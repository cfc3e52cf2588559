"""The tokenizer state shared by generation and training (no transformers import)."""

from __future__ import annotations

from typing import Any

from gencache.core.canonical import is_int
from gencache.core.errors import ConfigError

TOKENIZER_STATE_FIELDS = ("padding_side", "pad_token_id", "eos_token_id")


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Put ``tokenizer`` in the state gencache generates with, in place, and return it.

    Left padding; when no pad token is set, the pad token falls back to the EOS token. Training calls this too,
    so the tokenizer state it compares with an artifact's provenance is the one generation recorded.
    """
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ConfigError(
                "The tokenizer defines neither a pad token nor an EOS token; "
                "set tokenizer.pad_token (or eos_token) before generating."
            )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def tokenizer_state(tokenizer: Any) -> dict[str, Any]:
    """``{padding_side, pad_token_id, eos_token_id}`` of a tokenizer object or of an already-extracted mapping
    (``eos_token_id`` is the tokenizer's single id, never the generation config's EOS list)."""
    fields = TOKENIZER_STATE_FIELDS
    given = (
        tokenizer
        if isinstance(tokenizer, dict)
        else {f: getattr(tokenizer, f) for f in fields if hasattr(tokenizer, f)}
    )
    if missing := ", ".join(f for f in fields if f not in given):
        raise ConfigError(
            f"Tokenizer state is missing {missing}."
            if isinstance(tokenizer, dict)
            else f"Expected a tokenizer or a {{padding_side, pad_token_id, eos_token_id}} dict, got "
            f"{type(tokenizer).__name__} (no {missing})."
        )
    for f in fields[1:]:
        if given[f] is not None and not is_int(given[f]):
            raise ConfigError(f"Tokenizer token id must be an integer or null, got {given[f]!r}.")
    return {f: str(given[f]) if f == "padding_side" else given[f] for f in fields}
