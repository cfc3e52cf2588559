"""A value a lower layer takes as a plain argument (``gen_batch_size``, ``model.dtype``) checked with its config
field's own rule, in the loader's words, so a caller without a config (a benchmark, library code) meets the same rule.
"""

from __future__ import annotations

from typing import Annotated, Any, cast

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from gencache.config.messages import Loc, format_validation_error
from gencache.config.models import CacheConfig, ModelConfig
from gencache.config.names import Dtype
from gencache.core.errors import ConfigError


def _checked(model: type[BaseModel], loc: Loc, value: Any) -> Any:
    field = model.model_fields[str(loc[-1])]
    alone: Any = Annotated[field.annotation, field]
    try:
        return TypeAdapter(alone, config=ConfigDict(strict=True)).validate_python(value)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, prefix=loc)) from None


def checked_batch_size(value: Any) -> int:
    return cast(int, _checked(CacheConfig, ("gen_batch_size",), value))


def checked_dtype(value: Any) -> Dtype:
    return cast(Dtype, _checked(ModelConfig, ("model", "dtype"), value))
