"""What a recipe reads from its tables (declared columns) and where a bad row came from (file and line, in the
file's own order, before any shuffling).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gencache.config.messages import did_you_mean, show
from gencache.core.errors import DatasetError
from gencache.data.sources import origin_of


@dataclass(frozen=True)
class Column:
    """One column a recipe reads (dotted for a nested field); ``field``: the config field naming it (None: fixed)."""

    name: str
    type: str
    required: bool
    description: str
    table: str | None = None
    field: str | None = None


def check_columns(table: Any, label: str, columns: Iterable[Column], table_name: str | None = None) -> None:
    """Refuse ``table`` when it lacks a required top-level column (of ``table_name``), with the fix for its field."""
    names = list(getattr(table, "column_names", []) or [])
    for column in columns:
        top = column.name.split(".")[0].removesuffix("[]")
        if not column.required or column.table != table_name or top in names:
            continue
        which = f" {table_name} table" if table_name else ""
        found = f"{label}{which}: column {top!r} is missing from {origin_of(table, label).describe()} (its columns: "
        found += f"{', '.join(names) or 'none'}); {did_you_mean(top, names, n=2)}"
        if column.field is None:
            raise DatasetError(
                f"{found}rename the column in the file or see docs/datasets.md for the columns {label} reads.", "source"
            )
        if column.field.startswith("data_kwargs.filters."):
            fix = f"change the key {top!r} of data_kwargs.filters to one of the file's columns"
        elif column.field in ("data_kwargs.documents", "data_kwargs.task"):
            fix = f"change {top!r} in {column.field} to one of the file's columns"
        else:
            fix = f"set {column.field} to one of the file's columns"
        if column.field == "data_kwargs.answer":
            fix += " or to null when the rows hold no answer and num_shots is 0"
        raise DatasetError(f"{found}{fix}, or rename the column in the file.", column.field)


def row_error(table: Any, label: str, index: int, problem: str) -> DatasetError:
    """A :class:`DatasetError` for row ``index`` of ``table``: ``<label>: <file> line N: <problem>``."""
    return DatasetError(f"{label}: {origin_of(table, label).locate(index)}: {problem}.")


#: What each JSON type a field may be required to have accepts.
KINDS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "list of strings": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "object": lambda v: isinstance(v, Mapping),
    "list": lambda v: isinstance(v, list),
    "string or integer": lambda v: isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)),
    "any": lambda v: True,
}


def require_type(table: Any, label: str, index: int, value: Any, name: str, kind: str) -> Any:
    """``value`` if it has JSON type ``kind``, else an error naming the field and the row's file and line."""
    if not KINDS[kind](value):
        raise row_error(table, label, index, f"{name!r} must be a {kind} (got {show(value)})")
    return value


def field_of(table: Any, label: str, index: int, row: Mapping[str, Any], name: str, kind: str) -> Any:
    """The dotted field ``name`` of row ``index``, checked to be of JSON type ``kind``; a missing or null value is
    an error naming the field, the row's file and line, and the fields that are there."""
    path = name.split(".")
    value: Any = row
    for depth, key in enumerate(path):
        if not isinstance(value, Mapping) or value.get(key) is None:
            if isinstance(value, Mapping):
                here = ", ".join(str(k) for k, v in value.items() if v is not None) or "no non-null fields"
            else:
                here = f"a {type(value).__name__}"
            where = "the row" if depth == 0 else ".".join(path[:depth])
            problem = f"{'.'.join(path[: depth + 1])!r} is missing or null ({where} has: {here})"
            raise row_error(table, label, index, problem)
        value = value[key]
    return require_type(table, label, index, value, name, kind)
