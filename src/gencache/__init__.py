"""gencache: immutable teacher-generation caches for knowledge distillation.

The public names are imported lazily, so ``import gencache`` (and ``gencache --help``) does not pay for torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gencache.core.lazy import lazy_names
from gencache.core.version import __version__ as __version__

_EXPORTS = {
    "CacheReader": "gencache.artifact.reader",
    "Generation": "gencache.artifact.cache",
    "open_caches": "gencache.artifact.mixture",
    "load_config": "gencache.config",
    "build_samples": "gencache.data.samples",
    "semantic_key": "gencache.data.keys",
    "prepare_tokenizer": "gencache.core.tokenizer",
    "GencacheError": "gencache.core.errors",
    "CompatibilityError": "gencache.core.errors",
    "ConfigError": "gencache.core.errors",
    "DatasetError": "gencache.core.errors",
    "FormatError": "gencache.core.errors",
    "InputProblems": "gencache.core.errors",
    "IntegrityError": "gencache.core.errors",
    "MissingEntriesError": "gencache.core.errors",
    "MissingEntryError": "gencache.core.errors",
    "generate": "gencache.run.api",
    "dry_run": "gencache.run.api",
    "RayOptions": "gencache.run.ray",
    "audit": "gencache.run.audit",
    "score": "gencache.run.score",
}

if TYPE_CHECKING:
    from gencache.artifact.cache import Generation as Generation
    from gencache.artifact.mixture import open_caches as open_caches
    from gencache.artifact.reader import CacheReader as CacheReader
    from gencache.config import load_config as load_config
    from gencache.core.errors import CompatibilityError as CompatibilityError
    from gencache.core.errors import ConfigError as ConfigError
    from gencache.core.errors import DatasetError as DatasetError
    from gencache.core.errors import FormatError as FormatError
    from gencache.core.errors import GencacheError as GencacheError
    from gencache.core.errors import InputProblems as InputProblems
    from gencache.core.errors import IntegrityError as IntegrityError
    from gencache.core.errors import MissingEntriesError as MissingEntriesError
    from gencache.core.errors import MissingEntryError as MissingEntryError
    from gencache.core.tokenizer import prepare_tokenizer as prepare_tokenizer
    from gencache.data.keys import semantic_key as semantic_key
    from gencache.data.samples import build_samples as build_samples
    from gencache.run.api import dry_run as dry_run
    from gencache.run.api import generate as generate
    from gencache.run.audit import audit as audit
    from gencache.run.ray import RayOptions as RayOptions
    from gencache.run.score import score as score


__all__ = [*_EXPORTS, "__version__"]
__getattr__ = lazy_names(__name__, _EXPORTS)
