"""The base of every ``data_kwargs`` and ``template_kwargs`` model. The recipe and the template receive the validated
instance, never a dict to validate again; it reads like the JSON object it records, so ``kwargs["difficulty"]`` and
``kwargs == {...}`` compare effective values, defaults included.
"""

from __future__ import annotations

from collections.abc import ItemsView, KeysView, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict


class KwargsModel(BaseModel):
    """Strict, frozen options of one dataset or template; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def as_json(self) -> dict[str, Any]:
        """The effective values as plain JSON (what ``resolved_config.json`` records)."""
        return self.model_dump(mode="json")

    def __getitem__(self, name: str) -> Any:
        return self.as_json()[name]

    def keys(self) -> KeysView[str]:
        return self.as_json().keys()

    def items(self) -> ItemsView[str, Any]:
        return self.as_json().items()

    def __contains__(self, name: object) -> bool:
        return name in type(self).model_fields

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self.as_json() == dict(other)
        return super().__eq__(other)

    __hash__ = BaseModel.__hash__
