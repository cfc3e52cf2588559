"""What a KV cache needs and what the machine has: the teacher's attention shape (bytes per cached token) and the
available host memory. Both cache sizers (the continuous engine's paged cache, vLLM's CPU cache) use them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

#: Bytes in a GiB (the unit of every ``kv_cache_memory_gib`` option).
GIB = 2**30
#: Where Linux says how much memory is available.
MEMINFO = "/proc/meminfo"


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


def _meminfo_available(path: str) -> int | None:
    """``MemAvailable`` of a ``/proc/meminfo`` file in bytes, or None when the file or the line is missing."""
    try:
        with open(path, encoding="ascii", errors="replace") as lines:
            for line in lines:
                name, _, rest = line.partition(":")
                if name == "MemAvailable":
                    value, *unit = rest.split()
                    return int(value) * (1024 if unit == ["kB"] else 1)
    except (OSError, ValueError):
        return None
    return None


def available_host_memory(meminfo: str = MEMINFO) -> int:
    """Bytes of host memory available now for a new allocation without swapping: Linux's ``MemAvailable`` (free
    memory plus the page cache and the slabs it can reclaim, so reading a model file does not shrink it), else the
    free pages the system reports, else 4 GiB when the system cannot say."""
    available = _meminfo_available(meminfo)
    if available is not None:
        return available
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 4 * GIB
