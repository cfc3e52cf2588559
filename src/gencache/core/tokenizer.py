"""The tokenizer state shared by generation and training (no transformers import)."""

from __future__ import annotations

from typing import Any

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
    """``{padding_side, pad_token_id, eos_token_id}`` of a tokenizer; ``eos_token_id`` is the tokenizer's single id,
    never the generation config's EOS list."""
    missing = [field for field in TOKENIZER_STATE_FIELDS if not hasattr(tokenizer, field)]
    if missing:
        raise ConfigError(
            f"Expected a tokenizer or a {{padding_side, pad_token_id, eos_token_id}} dict, got "
            f"{type(tokenizer).__name__} (no {', '.join(missing)})."
        )
    return {field: getattr(tokenizer, field) for field in TOKENIZER_STATE_FIELDS}
