"""How every input error reads: one rendering of a bad value, one type name, one "did you mean" and one "unknown
name" message, shared by every input rule and registry (datasets, plug-ins included, templates, engines), and the
one-line messages for pydantic validation errors of the config: every failing field path and what is wrong.

:func:`format_validation_error` turns pydantic errors into one line such as ``data_configs[1].data_kwargs.dificulty:
unknown data_kwargs key for dataset 'hotpot_qa' (did you mean 'difficulty'? ...)``. A validator that checks a nested
object itself (``data_kwargs``, ``engine_options``) raises :func:`nested_error` so its problems keep their full paths.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from gencache.config.names import LOGIT_FIELDS, NO_LOGITS_MESSAGE

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


_NESTED = "gencache_nested"

ModelT = TypeVar("ModelT", bound=BaseModel)


# -- messages ----------------------------------------------------------------------------------------------
def nested_error(problems: Sequence[FieldProblem]) -> PydanticCustomError:
    """An error carrying ``(sub-path, message)`` problems below the field that raised it.

    :func:`format_validation_error` appends each sub-path to the field's own location, so a validator on
    ``data_kwargs`` can report ``data_configs[1].data_kwargs.difficulty``.
    """
    first_loc, first_msg = problems[0]
    return PydanticCustomError(
        _NESTED,
        "{summary}",
        {"summary": f"{format_loc(first_loc) or '(value)'}: {first_msg}", "problems": tuple(problems)},
    )


def format_loc(loc: Sequence[str | int]) -> str:
    """``("data_configs", 1, "seed")`` as ``data_configs[1].seed``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _allowed_fields(model: type[BaseModel] | None, loc: Loc) -> list[str] | None:
    """The field names allowed at the object that holds ``loc[-1]``, walking model annotations."""
    if model is None:
        return None
    current: type[BaseModel] = model
    parents = [p for p in loc[:-1] if not isinstance(p, int)]
    for name in parents:
        field = current.model_fields.get(str(name))
        if field is None:
            return None
        nested = _model_in_annotation(field.annotation)
        if nested is None:
            return None
        current = nested
    return sorted(current.model_fields)


def _model_in_annotation(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in_annotation(arg)
        if found is not None:
            return found
    return None


def _unknown_field_message(name: str | int, allowed: list[str] | None, what: str) -> str:
    msg = f"unknown {what}"
    if name in LOGIT_FIELDS:
        return NO_LOGITS_MESSAGE
    if allowed is not None:
        msg += f" ({did_you_mean(str(name), allowed)}allowed: {', '.join(allowed) if allowed else 'none'})"
    return msg


def _error_message(err: Mapping[str, Any], model: type[BaseModel] | None, unknown: str) -> list[FieldProblem]:
    """Turn one pydantic error dict into ``(location, message)`` problems with readable messages, chosen by the
    error's ``type`` and ``loc``; an unknown key (``extra_forbidden``) is an "unknown ``unknown``"."""
    loc: Loc = tuple(err.get("loc", ()))
    kind = str(err.get("type", ""))
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    value = err.get("input")
    if kind == _NESTED:
        return [(loc + tuple(sub), msg) for sub, msg in ctx.get("problems", ())]
    if kind == "missing":
        return [(loc, "is required")]
    if kind == "extra_forbidden":
        return [(loc, _unknown_field_message(loc[-1] if loc else "", _allowed_fields(model, loc), unknown))]
    if kind in {"int_type", "int_parsing", "int_from_float"}:
        return [(loc, f"must be an integer, {not_value(value)}")]
    if kind in {"string_type"}:
        return [(loc, f"must be a string, {not_value(value)}")]
    if kind in {"bool_type", "bool_parsing"}:
        return [(loc, f"must be true or false, {not_value(value)}")]
    if kind in {"dict_type", "model_type", "model_attributes_type", "mapping_type"}:
        return [(loc, f"must be an object, {not_value(value)}")]
    if kind == "list_type":
        return [(loc, f"must be a list, {not_value(value)}")]
    if kind == "finite_number":
        return [(loc, f"must be a finite number (got {show(value)})")]
    if kind in {"float_type", "float_parsing"}:
        return [(loc, f"must be a number, {not_value(value)}")]
    if kind == "string_too_short":
        return [(loc, "must be a non-empty string")]
    if kind == "too_short":
        return [(loc, f"must be a non-empty list (got {show(value)})")]
    if kind in {"greater_than_equal", "greater_than", "less_than_equal", "less_than"}:
        op = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
        bound = next(iter(v for k, v in ctx.items() if k in {"ge", "gt", "le", "lt"}), "?")
        return [(loc, f"must be {op} {bound} (got {show(value)})")]
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        choices = re.findall(r"'([^']*)'", expected)
        hint = did_you_mean(value, choices).rstrip()
        return [(loc, f"must be {expected} (got {show(value)}){'; ' + hint if hint else ''}")]
    if kind in {"value_error", "assertion_error"}:
        error = ctx.get("error")
        text = str(error) if error is not None else str(err.get("msg", ""))
        return [(loc, text)]
    msg = str(err.get("msg", "is invalid"))
    return [(loc, f"{msg[:1].lower()}{msg[1:]} (got {show(value)})")]


def collect_problems(
    exc: ValidationError, model: type[BaseModel] | None, prefix: Loc = (), *, unknown: str = "field"
) -> list[FieldProblem]:
    """Every problem of ``exc`` as ``(location, message)``, below ``prefix``; an unknown key reads "unknown
    ``unknown``" (``field``, or e.g. ``data_kwargs key for dataset 'hotpot_qa'``)."""
    out: list[FieldProblem] = []
    missing: dict[Loc, list[str]] = {}
    for err in exc.errors(include_url=False):
        loc: Loc = tuple(err.get("loc", ()))
        if err.get("type") == "missing" and loc:
            # One problem per object listing all its missing fields, at the first one's position.
            parent = prefix + loc[:-1]
            if parent not in missing:
                missing[parent] = []
                out.append((parent, ""))
            missing[parent].append(str(loc[-1]))
            continue
        for sub, msg in _error_message(err, model, unknown):
            out.append((prefix + sub, msg))
    resolved: list[FieldProblem] = []
    for loc, msg in out:
        if msg:
            resolved.append((loc, msg))
            continue
        names = missing[loc]
        if len(names) == 1:
            resolved.append(((*loc, names[0]), "is required"))
        else:
            resolved.append((loc, f"missing required fields {', '.join(names)}"))
    return resolved


def _sentence(msg: str) -> str:
    return msg[:-1] if msg.endswith(".") and not msg.endswith("...") else msg


def join_problems(problems: Sequence[FieldProblem], origin: str | None) -> str:
    parts = [line for _, line in problem_lines(problems)]
    shown = parts[:5]
    if len(parts) > 5:
        shown.append(f"... and {len(parts) - 5} more")
    text = "; ".join(shown)
    return f"{origin}: {text}" if origin else text


def problem_lines(problems: Sequence[FieldProblem]) -> list[tuple[Loc, str]]:
    """Each problem as ``(location, line)``: the line is ``path: message``, as :func:`join_problems` joins them."""
    return [(loc, f"{format_loc(loc)}: {_sentence(msg)}" if loc else _sentence(msg)) for loc, msg in problems]


def parse_loc(text: str) -> Loc:
    """``data_configs[1].seed`` as ``("data_configs", 1, "seed")``: :func:`format_loc` undone."""
    return tuple(int(part) if part.isdigit() else part for part in re.findall(r"[^.\[\]]+", text))


def format_validation_error(
    exc: ValidationError, *, model: type[BaseModel] | None = None, origin: str | None = None, prefix: Loc = ()
) -> str:
    """One line naming every failing field path and what is wrong with it."""
    return join_problems(collect_problems(exc, model, prefix), origin)


def validate_nested(model: type[ModelT], value: Mapping[str, Any], what: str) -> ModelT:
    """``value`` validated with ``model``, or a :func:`nested_error` in which an unknown key is an "unknown
    ``what``" (e.g. ``data_kwargs key for dataset 'hotpot_qa'``)."""
    try:
        return model.model_validate(dict(value))
    except ValidationError as exc:
        raise nested_error(collect_problems(exc, model, unknown=what)) from None
