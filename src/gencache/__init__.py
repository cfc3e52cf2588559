"""gencache: immutable teacher-generation caches for knowledge distillation.

The public names are imported lazily, so ``import gencache`` (and ``gencache --help``) does not pay for torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gencache.lazy import lazy_names
from gencache.version import __version__

_EXPORTS = {
    "CacheReader": "gencache.artifact.reader",
    "Generation": "gencache.artifact.reader",
    "open_caches": "gencache.artifact.mixture",
    "load_config": "gencache.config",
    "build_samples": "gencache.data.samples",
    "semantic_key": "gencache.data.keys",
    "prepare_tokenizer": "gencache.tokenizer",
    "GencacheError": "gencache.errors",
    "CompatibilityError": "gencache.errors",
    "ConfigError": "gencache.errors",
    "DatasetError": "gencache.errors",
    "FormatError": "gencache.errors",
    "IntegrityError": "gencache.errors",
    "MissingEntriesError": "gencache.errors",
    "MissingEntryError": "gencache.errors",
    "generate": "gencache.api",
    "audit": "gencache.auditing",
}

if TYPE_CHECKING:
    from gencache.api import generate
    from gencache.artifact.mixture import open_caches
    from gencache.artifact.reader import CacheReader, Generation
    from gencache.auditing import audit
    from gencache.config import load_config
    from gencache.data.keys import semantic_key
    from gencache.data.samples import build_samples
    from gencache.errors import (
        CompatibilityError,
        ConfigError,
        DatasetError,
        FormatError,
        GencacheError,
        IntegrityError,
        MissingEntriesError,
        MissingEntryError,
    )
    from gencache.tokenizer import prepare_tokenizer

__all__ = [
    "CacheReader",
    "CompatibilityError",
    "ConfigError",
    "DatasetError",
    "FormatError",
    "GencacheError",
    "Generation",
    "IntegrityError",
    "MissingEntriesError",
    "MissingEntryError",
    "__version__",
    "audit",
    "build_samples",
    "generate",
    "load_config",
    "open_caches",
    "prepare_tokenizer",
    "semantic_key",
]


__getattr__ = lazy_names(__name__, _EXPORTS)
