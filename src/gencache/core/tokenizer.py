"""The tokenizer state shared by generation and training (no transformers import)."""

from __future__ import annotations

from typing import Any

from gencache.core.canonical import is_int
from gencache.core.errors import ConfigError


def prepare_tokenizer(tokenizer: Any) -> Any:
    """``tokenizer`` put in the state gencache generates with, in place: left padding, the EOS token as the pad
    token when none is set. Training calls this too, so the state it compares with an artifact's is the one recorded."""
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
    fields = ("padding_side", "pad_token_id", "eos_token_id")
    if not isinstance(tokenizer, dict):
        tokenizer = {f: getattr(tokenizer, f) for f in fields if hasattr(tokenizer, f)}
    if missing := ", ".join(f for f in fields if f not in tokenizer):
        raise ConfigError(f"Expected a tokenizer or a {{{', '.join(fields)}}} dict, got one missing {missing}.")
    for f in fields[1:]:
        if tokenizer[f] is not None and not is_int(tokenizer[f]):
            raise ConfigError(f"Tokenizer token id must be an integer or null, got {tokenizer[f]!r}.")
    return {f: str(tokenizer[f]) if f == "padding_side" else tokenizer[f] for f in fields}
