"""A value a lower layer takes as a plain argument (``gen_batch_size``, ``model.dtype``) checked with its config
field's own rule, in the loader's words, so a caller without a config (a benchmark, library code) meets the same rule.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from gencache.config.messages import Loc, collect_problems, join_problems
from gencache.config.models import CacheConfig, ModelConfig
from gencache.config.names import Dtype
from gencache.core.errors import ConfigError


@functools.cache
def _adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    """A validator of the field ``name`` of ``model`` alone: its type and constraints, as strict as the model."""
    field = model.model_fields[name]
    alone: Any = Annotated[field.annotation, field]
    return TypeAdapter(alone, config=ConfigDict(strict=bool(model.model_config.get("strict", False))))


def _checked(model: type[BaseModel], name: str, loc: Loc, value: Any) -> Any:
    try:
        return _adapter(model, name).validate_python(value)
    except ValidationError as exc:
        raise ConfigError(join_problems(collect_problems(exc, None, loc), None)) from None


def checked_batch_size(value: Any) -> int:
    result: int = _checked(CacheConfig, "gen_batch_size", ("gen_batch_size",), value)
    return result


def checked_dtype(value: Any) -> Dtype:
    result: Dtype = _checked(ModelConfig, "dtype", ("model", "dtype"), value)
    return result
