"""How an error message shows a bad value: one rendering and one type name, shared by every input rule."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_SHOWN", "not_value", "show", "type_name"]

#: The longest rendering of a bad value in a message; longer ones end in "...".
MAX_SHOWN = 60


def show(value: Any) -> str:
    """A short JSON-ish rendering of a bad value for an error message."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def type_name(value: Any) -> str:
    """``null``, ``a boolean``, ``an integer``, ``a number``, ``a string``, ``an object``, ``a list`` or the
    Python type's name."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def not_value(value: Any) -> str:
    """``not <kind> (got <value>)``, or ``not null``."""
    return "not null" if value is None else f"not {type_name(value)} (got {show(value)})"
