"""How every input error reads: pydantic errors as one line naming every failing field path and what is wrong,
e.g. ``data_configs[1].data_kwargs.dificulty: unknown data_kwargs key for dataset 'hotpot_qa' (did you mean ...)``."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from gencache.config.names import LOGIT_FIELDS, NO_LOGITS_MESSAGE

#: Where a value sits in a config (its keys and list indices from the top), and one problem there.
Loc: TypeAlias = tuple[str | int, ...]
FieldProblem: TypeAlias = tuple[Loc, str]


def show(value: Any) -> str:
    """A short JSON-ish rendering of a bad value for an error message."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_TYPE_NAMES = (
    (type(None), "null"),
    ((list, tuple), "a list"),
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a number"),
    (str, "a string"),
    (Mapping, "an object"),
)


def type_name(value: Any) -> str:
    return next((name for kind, name in _TYPE_NAMES if isinstance(value, kind)), type(value).__name__)


def closest(name: object, choices: Iterable[str], n: int = 1) -> list[str]:
    """The (at most ``n``) choices closest to ``name``, best first: one that differs only in case, then
    difflib's close matches."""
    if not isinstance(name, str):
        return []
    names = list(choices)
    same_case = [other for other in names if other.lower() == name.lower() and other != name]
    return list(dict.fromkeys([*same_case, *difflib.get_close_matches(name, names, n=n, cutoff=0.6)]))[:n]


def did_you_mean(name: object, choices: Iterable[str], n: int = 1) -> str:
    close = closest(name, choices, n)
    return f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""


def unknown_name(kind: str, name: object, known: Iterable[str]) -> str:
    names = sorted(known)
    return f"unknown {kind} {name!r} ({did_you_mean(name, names)}known: {', '.join(names) if names else 'none'})"


_NESTED = "gencache_nested"

ModelT = TypeVar("ModelT", bound=BaseModel)


def nested_error(problems: Sequence[FieldProblem]) -> PydanticCustomError:
    """An error carrying ``(sub-path, message)`` problems below the field that raised it, so that a validator on
    ``data_kwargs`` reports ``data_configs[1].data_kwargs.difficulty``."""
    first_loc, first_msg = problems[0]
    return PydanticCustomError(
        _NESTED,
        "{summary}",
        {"summary": f"{format_loc(first_loc) or '(value)'}: {first_msg}", "problems": tuple(problems)},
    )


def format_loc(loc: Sequence[str | int]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).removeprefix(".")


_MUST_BE = {
    **dict.fromkeys(["int_type", "int_parsing", "int_from_float"], "an integer"),
    "string_type": "a string",
    **dict.fromkeys(["bool_type", "bool_parsing"], "true or false"),
    **dict.fromkeys(["dict_type", "model_type", "model_attributes_type", "mapping_type"], "an object"),
    "list_type": "a list",
    **dict.fromkeys(["float_type", "float_parsing"], "a number"),
}
#: How gencache words the other pydantic error kinds, formatted with the error's context and ``got``, the bad value.
_MESSAGES = {
    "finite_number": "must be a finite number (got {got})",
    "string_too_short": "must be a non-empty string",
    "too_short": "must be a non-empty list (got {got})",
    "greater_than_equal": "must be >= {ge} (got {got})",
    "greater_than": "must be > {gt} (got {got})",
    "less_than_equal": "must be <= {le} (got {got})",
    "less_than": "must be < {lt} (got {got})",
    "value_error": "{error}",
    "assertion_error": "{error}",
}


def _error_message(err: Mapping[str, Any], model: type[BaseModel] | None, unknown: str) -> list[FieldProblem]:
    loc: Loc = tuple(err["loc"])
    kind = err["type"]
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    value = err.get("input")
    if kind == _NESTED:
        return [(loc + tuple(sub), msg) for sub, msg in ctx["problems"]]
    if kind == "extra_forbidden":
        if loc[-1] in LOGIT_FIELDS:
            return [(loc, NO_LOGITS_MESSAGE)]
        if model is None:
            return [(loc, f"unknown {unknown}")]
        allowed = sorted(model.model_fields)
        return [(loc, f"unknown {unknown} ({did_you_mean(loc[-1], allowed)}allowed: {', '.join(allowed) or 'none'})")]
    if kind in _MUST_BE:
        shown = "null" if value is None else f"{type_name(value)} (got {show(value)})"
        return [(loc, f"must be {_MUST_BE[kind]}, not {shown}")]
    if kind in _MESSAGES:
        return [(loc, _MESSAGES[kind].format(got=show(value), **ctx))]
    if kind == "literal_error":
        expected = str(ctx["expected"])
        hint = did_you_mean(value, re.findall(r"'([^']*)'", expected)).rstrip()
        return [(loc, f"must be {expected} (got {show(value)}){'; ' + hint if hint else ''}")]
    msg = str(err["msg"])
    return [(loc, f"{msg[:1].lower()}{msg[1:]} (got {show(value)})")]


def collect_problems(
    exc: ValidationError, model: type[BaseModel] | None, *, unknown: str = "field"
) -> list[FieldProblem]:
    """Every problem of ``exc`` as ``(location, message)``; an unknown key reads "unknown ``unknown``" (``field``,
    or e.g. ``data_kwargs key for dataset 'hotpot_qa'``)."""
    out: list[FieldProblem] = []
    missing: dict[Loc, list[str]] = {}  # one problem per object, listing all its missing fields
    for err in exc.errors(include_url=False):
        if err["type"] == "missing":
            missing.setdefault(tuple(err["loc"][:-1]), []).append(str(err["loc"][-1]))
        else:
            out += _error_message(err, model, unknown)
    for loc, names in missing.items():
        one = len(names) == 1
        out.append(((*loc, names[0]), "is required") if one else (loc, f"missing required fields {', '.join(names)}"))
    return out


def join_problems(problems: Sequence[FieldProblem], origin: str | None) -> str:
    parts = [line for _, line in problem_lines(problems)]
    text = "; ".join(parts[:5] + [f"... and {len(parts) - 5} more"] * (len(parts) > 5))
    return f"{origin}: {text}" if origin else text


def problem_lines(problems: Sequence[FieldProblem]) -> list[tuple[Loc, str]]:
    """Each problem as ``(location, "path: message")``, without a final full stop (the lines are joined)."""
    lines: list[tuple[Loc, str]] = []
    for loc, msg in problems:
        text = msg[:-1] if msg.endswith(".") and not msg.endswith("...") else msg
        lines.append((loc, f"{format_loc(loc)}: {text}" if loc else text))
    return lines


def parse_loc(text: str) -> Loc:
    """:func:`format_loc` undone."""
    return tuple(int(part) if part.isdigit() else part for part in re.findall(r"[^.\[\]]+", text))


def format_validation_error(exc: ValidationError, *, origin: str | None = None) -> str:
    """One line naming every failing field path and what is wrong with it."""
    return join_problems(collect_problems(exc, None), origin)


def validate_nested(model: type[ModelT], value: Mapping[str, Any], what: str) -> ModelT:
    """``value`` validated with ``model``, or a :func:`nested_error` in which an unknown key is an "unknown
    ``what``" (e.g. ``data_kwargs key for dataset 'hotpot_qa'``)."""
    try:
        return model.model_validate(dict(value))
    except ValidationError as exc:
        raise nested_error(collect_problems(exc, model, unknown=what)) from None
