"""Every input rule in one package: reading and merging config documents, the pydantic models, each engine's,
dataset's and template's options, and how errors read. Nothing here imports torch, transformers or datasets. The
names below are imported on first use, so that the light submodules (paths, names) load without pydantic: the
reader and ``gencache --help`` use them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gencache.core.lazy import lazy_names

if TYPE_CHECKING:  # the same names, for type checkers
    from gencache.config.documents import DEFAULTS_FILENAME as DEFAULTS_FILENAME
    from gencache.config.documents import MAX_JSON_DEPTH as MAX_JSON_DEPTH
    from gencache.config.documents import merge_defaults as merge_defaults
    from gencache.config.documents import parse_json_text as parse_json_text
    from gencache.config.documents import parse_set_value as parse_set_value
    from gencache.config.documents import read_config_document as read_config_document
    from gencache.config.documents import read_merged_config as read_merged_config
    from gencache.config.engines import ENGINE_OPTIONS as ENGINE_OPTIONS
    from gencache.config.engines import EngineOptions as EngineOptions
    from gencache.config.kwargs import KwargsModel as KwargsModel
    from gencache.config.messages import format_validation_error as format_validation_error
    from gencache.config.models import MAX_SEED as MAX_SEED
    from gencache.config.models import CacheConfig as CacheConfig
    from gencache.config.models import DataConfig as DataConfig
    from gencache.config.models import ModelConfig as ModelConfig
    from gencache.config.models import config_to_json as config_to_json
    from gencache.config.models import load_config as load_config
    from gencache.config.models import parse_config as parse_config
    from gencache.config.models import parse_data_configs as parse_data_configs
    from gencache.config.names import ALL_ENGINES as ALL_ENGINES
    from gencache.config.names import DTYPES as DTYPES
    from gencache.config.paths import looks_like_path as looks_like_path

_MODULES = {
    "documents": "DEFAULTS_FILENAME MAX_JSON_DEPTH merge_defaults parse_json_text parse_set_value "
    "read_config_document read_merged_config",
    "engines": "ENGINE_OPTIONS EngineOptions",
    "kwargs": "KwargsModel",
    "messages": "format_validation_error",
    "models": "MAX_SEED CacheConfig DataConfig ModelConfig config_to_json load_config parse_config parse_data_configs",
    "names": "ALL_ENGINES DTYPES",
    "paths": "looks_like_path",
}
_EXPORTS = {name: f"gencache.config.{module}" for module, names in _MODULES.items() for name in names.split()}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_names(__name__, _EXPORTS)
