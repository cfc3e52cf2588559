"""Types shared by the dataset recipes: what a recipe reads, what it returns, and a few common checks."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

from gencache.data.prompts import Prompt
from gencache.errors import DatasetError


class DataConfigLike(Protocol):
    """The fields of a data config a recipe reads (the config model's ``DataConfig`` satisfies it)."""

    @property
    def dataset_name(self) -> str: ...
    @property
    def num_samples(self) -> int: ...
    @property
    def num_data_strs(self) -> int: ...
    @property
    def num_shots(self) -> int: ...
    @property
    def subset(self) -> str: ...
    @property
    def split(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def source(self) -> str | None: ...


@dataclass(frozen=True)
class RawSample:
    """One sample as a recipe yields it, before any template.

    ``semantic`` is the key payload ``{documents, query, shots, task}``; ``parts`` the default composition;
    ``query`` the query as shown in the prompt; ``answer`` the gold answer.
    """

    semantic: dict[str, Any]
    parts: Prompt
    query: str
    answer: str


@dataclass(frozen=True)
class SourceInfo:
    """Where a recipe's rows came from: ``kind`` is ``hub``, ``directory`` or ``file``.

    ``location`` is the hub id or the absolute local path; ``files`` lists ``(absolute path, sha256)`` of every
    local file read, in reading order (empty for the hub); ``fingerprints`` lists ``(split, fingerprint)`` of hub
    tables, the digest ``datasets`` derives from the files it downloaded.
    """

    kind: str
    location: str
    files: tuple[tuple[str, str], ...] = field(default=())
    fingerprints: tuple[tuple[str, str], ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "location": self.location,
            "files": [{"path": path, "sha256": digest} for path, digest in self.files],
            "fingerprints": dict(self.fingerprints),
        }


@runtime_checkable
class DatasetRecipe(Protocol):
    """A dataset: its name, canonical hub id, ``data_kwargs`` model and how it turns a data config into samples."""

    name: str
    hub_id: str
    kwargs_model: type[BaseModel]

    def needs_tokenizer(self, kwargs: BaseModel) -> bool: ...

    def load(
        self, dc: DataConfigLike, kwargs: BaseModel, tokenizer: Any | None
    ) -> tuple[list[RawSample], SourceInfo]: ...


ModelT = TypeVar("ModelT", bound=BaseModel)


def coerce_kwargs(model: type[ModelT], kwargs: BaseModel | Mapping[str, Any] | None, dataset: str) -> ModelT:
    """``kwargs`` as an instance of ``model`` (validating a mapping); a :class:`DatasetError` naming the bad key."""
    if isinstance(kwargs, model):
        return kwargs
    if kwargs is None:
        kwargs = {}
    elif isinstance(kwargs, BaseModel):
        kwargs = kwargs.model_dump()
    if not isinstance(kwargs, Mapping):
        raise DatasetError(f"data_kwargs of {dataset} must be an object, got {type(kwargs).__name__}.")
    try:
        return model.model_validate(dict(kwargs))
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(item) for item in error["loc"])
        accepted = ", ".join(model.model_fields)
        name = f"data_kwargs.{where}" if where else "data_kwargs"
        raise DatasetError(f"{name}: {error['msg']} ({dataset} accepts: {accepted}).") from None


def check_counts(dc: DataConfigLike) -> None:
    """Counts must be non-negative integers (the config model checks this too; recipes can be called directly)."""
    for name in ("num_samples", "num_data_strs", "num_shots", "seed"):
        value = getattr(dc, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise DatasetError(f"{name} must be an integer, got {value!r}.")
        if name != "seed" and value < 0:
            raise DatasetError(f"{name} must be >= 0, got {value}.")


def shortfall(dataset: str, split: str, asked: int, available: int, detail: str) -> DatasetError:
    """The error for asking more samples than a split holds."""
    return DatasetError(
        f"{dataset} split {split!r} holds {available} usable samples ({detail}) but num_samples is {asked}; "
        f"lower num_samples to at most {available} or choose a larger split."
    )


def warn(message: str) -> None:
    """A reference-compatible ``UserWarning`` attributed to the caller of the recipe."""
    warnings.warn(message, UserWarning, stacklevel=3)


def require_str(value: Any, what: str) -> str:
    """``value`` if it is a string, else a :class:`DatasetError` naming the field."""
    if not isinstance(value, str):
        raise DatasetError(f"{what} must be a string, got {type(value).__name__}; check the source's schema.")
    return value


def require_str_list(value: Any, what: str) -> list[str]:
    """``value`` if it is a list of strings, else a :class:`DatasetError` naming the field."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise DatasetError(f"{what} must be a list of strings; check the source's schema.")
    return value


__all__ = [
    "DataConfigLike",
    "DatasetRecipe",
    "RawSample",
    "SourceInfo",
    "check_counts",
    "coerce_kwargs",
    "require_str",
    "require_str_list",
    "shortfall",
    "warn",
]
