"""Every input rule in one package: reading a config document, the ``_default.json`` merge, the models, the
generation settings gencache adds, each engine's options, each dataset's and template's kwargs, the messages, and
the one local-path rule.

Nothing here imports torch, transformers or datasets, reads a dataset or loads a model; the layers above receive
validated models and never validate a dict again::

    from gencache.config import load_config

    config = load_config("configs/run.json")      # ConfigError: one line naming the file and every bad field
    config.data_configs[0].data_kwargs            # the dataset's validated kwargs model, defaults included
    config.engine_options                         # the chosen engine's validated options model

Modules: ``documents`` (the one strict reader of JSON documents and the merge), ``models`` (the pydantic models and
loading), ``generation`` (what gencache adds to transformers' generation settings), ``engines`` (each engine's
options), ``names`` (the dtypes, engine names and logit fields), ``datasets`` and ``templates`` (kwargs models),
``catalog`` (which datasets and templates exist, plug-ins included), ``messages`` (how errors read), ``paths``
(path, URL or hub id), ``kwargs`` (their base), ``fields`` (one field's rule for a value passed on without its
config). The names below are imported on first use.
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
