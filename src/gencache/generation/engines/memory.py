"""What a KV cache needs and what the machine has: the teacher's attention shape (bytes per cached token) and the
available host memory. Both cache sizers (the continuous engine's paged cache, vLLM's CPU cache) use them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

__all__ = ["AttentionShape", "attention_shape_of", "available_host_memory"]

_GIB = 2**30


@dataclass(frozen=True)
class AttentionShape:
    """What one token of KV cache holds: layers x KV heads x head size."""

    layers: int
    kv_heads: int
    head_dim: int

    def bytes_per_token(self, dtype_bytes: int) -> int:
        """Key and value of every layer for one token, in bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


def attention_shape_of(model_config: Any) -> AttentionShape:
    """The attention shape of a transformers model config (its text config for a multimodal model)."""
    text = getattr(model_config, "get_text_config", lambda: model_config)()
    heads = int(getattr(text, "num_attention_heads", 1))
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    return AttentionShape(int(text.num_hidden_layers), kv_heads, head_dim)


def available_host_memory() -> int:
    """Bytes of host memory available now (4 GiB when the system cannot say)."""
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 4 * _GIB
