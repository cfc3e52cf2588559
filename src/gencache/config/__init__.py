"""Every input rule in one package: reading and merging config documents, the pydantic models, each engine's,
dataset's and template's options, and how errors read. Nothing here imports torch, transformers or datasets; the
layers above receive validated models and never validate a dict again. The names below are imported on first use,
so the command line's light submodules (paths, names) load without pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gencache.core.lazy import lazy_names

if TYPE_CHECKING:
    from gencache.config.documents import (
        DEFAULTS_FILENAME,
        MAX_JSON_DEPTH,
        merge_defaults,
        parse_json_text,
        parse_set_value,
        read_config_document,
        read_merged_config,
    )
    from gencache.config.engines import ENGINE_OPTIONS, EngineOptions
    from gencache.config.kwargs import KwargsModel
    from gencache.config.messages import format_validation_error
    from gencache.config.models import (
        MAX_SEED,
        CacheConfig,
        DataConfig,
        ModelConfig,
        config_to_json,
        load_config,
        parse_config,
        parse_data_configs,
    )
    from gencache.config.names import ALL_ENGINES, DTYPES
    from gencache.config.paths import looks_like_path

_EXPORTS = {
    "DEFAULTS_FILENAME": "gencache.config.documents",
    "MAX_JSON_DEPTH": "gencache.config.documents",
    "merge_defaults": "gencache.config.documents",
    "parse_json_text": "gencache.config.documents",
    "parse_set_value": "gencache.config.documents",
    "read_config_document": "gencache.config.documents",
    "read_merged_config": "gencache.config.documents",
    "ENGINE_OPTIONS": "gencache.config.engines",
    "EngineOptions": "gencache.config.engines",
    "KwargsModel": "gencache.config.kwargs",
    "format_validation_error": "gencache.config.messages",
    "CacheConfig": "gencache.config.models",
    "DataConfig": "gencache.config.models",
    "MAX_SEED": "gencache.config.models",
    "ModelConfig": "gencache.config.models",
    "config_to_json": "gencache.config.models",
    "load_config": "gencache.config.models",
    "parse_config": "gencache.config.models",
    "parse_data_configs": "gencache.config.models",
    "ALL_ENGINES": "gencache.config.names",
    "DTYPES": "gencache.config.names",
    "looks_like_path": "gencache.config.paths",
}

__all__ = [
    "ALL_ENGINES",
    "DEFAULTS_FILENAME",
    "DTYPES",
    "ENGINE_OPTIONS",
    "MAX_JSON_DEPTH",
    "MAX_SEED",
    "CacheConfig",
    "DataConfig",
    "EngineOptions",
    "KwargsModel",
    "ModelConfig",
    "config_to_json",
    "format_validation_error",
    "load_config",
    "looks_like_path",
    "merge_defaults",
    "parse_config",
    "parse_data_configs",
    "parse_json_text",
    "parse_set_value",
    "read_config_document",
    "read_merged_config",
]


__getattr__ = lazy_names(__name__, _EXPORTS)
