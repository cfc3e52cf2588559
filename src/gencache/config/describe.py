"""How an error message shows a bad value: one rendering, one type name and one "unknown name" message, shared by
every input rule and every registry (datasets, plug-ins included, templates, engines), and the shape of one problem
found in a config value (:data:`FieldProblem`)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

Loc: TypeAlias = tuple[str | int, ...]
"""Where a value sits in a config: its keys and list indices from the top."""
FieldProblem: TypeAlias = tuple[Loc, str]
"""One problem of a config value: where it is and what is wrong (gencache.core.errors.Problem is a check's)."""

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


def closest(name: object, choices: Iterable[str], n: int = 1) -> list[str]:
    """The (at most ``n``) choices closest to ``name``, best first: one that differs only in case, then
    difflib's close matches; empty when none is close or ``name`` is no string. Every "did you mean" uses it."""
    if not isinstance(name, str):
        return []
    names = list(choices)
    same_case = [other for other in names if other.lower() == name.lower() and other != name]
    return list(dict.fromkeys([*same_case, *difflib.get_close_matches(name, names, n=n, cutoff=0.6)]))[:n]


def did_you_mean(name: object, choices: Iterable[str], n: int = 1) -> str:
    """``did you mean 'x'? `` (or ``'x' or 'y'`` for ``n`` 2) for the choices closest to ``name``, or empty
    when none is close (or ``name`` is no string)."""
    close = closest(name, choices, n)
    return f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""


def unknown_name(kind: str, name: object, known: Iterable[str]) -> str:
    """The one message for a name that a registry does not hold, e.g. ``unknown dataset 'hotpot' (did you mean
    'hotpot_qa'? known: biography, chat, hotpot_qa, musique, niah, table)``; each caller raises it as its own
    error type."""
    names = sorted(known)
    return f"unknown {kind} {name!r} ({did_you_mean(name, names)}known: {', '.join(names) if names else 'none'})"
