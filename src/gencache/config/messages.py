"""How every input error reads: pydantic errors as one line naming every failing field path and what is wrong,
e.g. ``data_configs[1].data_kwargs.dificulty: unknown field (did you mean 'difficulty'? allowed: ...)``."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, ModelWrapValidatorHandler, ValidationError, model_validator
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


def _error_message(err: Mapping[str, Any], model: type[BaseModel] | None) -> list[FieldProblem]:
    """One pydantic error in gencache's words: pydantic's own message and the bad value, except for an unknown key
    (with the closest allowed one) and a rule's own message."""
    loc: Loc = tuple(err["loc"])
    kind = err["type"]
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    value = err.get("input")
    if kind == _NESTED:
        return [(loc + tuple(sub), msg) for sub, msg in ctx["problems"]]
    if kind == "missing":
        return [(loc, "is required")]
    if kind == "extra_forbidden":
        if loc[-1] in LOGIT_FIELDS:
            return [(loc, NO_LOGITS_MESSAGE)]
        if model is None:
            return [(loc, "unknown field")]
        allowed = sorted(model.model_fields)
        return [(loc, f"unknown field ({did_you_mean(loc[-1], allowed)}allowed: {', '.join(allowed) or 'none'})")]
    if kind in ("value_error", "assertion_error"):
        return [(loc, str(ctx["error"]))]
    if kind in ("model_type", "dict_type", "model_attributes_type"):  # pydantic's names the model's class
        return [(loc, f"must be a JSON object (got {show(value)})")]
    msg = str(err["msg"])
    hint = did_you_mean(value, re.findall(r"'([^']*)'", str(ctx["expected"]))) if kind == "literal_error" else ""
    return [(loc, f"{msg[:1].lower()}{msg[1:]} (got {show(value)}){'; ' + hint.rstrip() if hint else ''}")]


def collect_problems(exc: ValidationError, model: type[BaseModel] | None) -> list[FieldProblem]:
    """Every problem of ``exc`` as ``(location, message)``; an unknown key's names the closest fields of ``model``."""
    return [problem for err in exc.errors(include_url=False) for problem in _error_message(err, model)]


def problem_lines(problems: Sequence[FieldProblem]) -> list[tuple[Loc, str]]:
    """Each problem as ``(location, "path: message")``, without a final full stop (the lines are joined)."""
    texts = [(loc, msg[:-1] if msg.endswith(".") and not msg.endswith("...") else msg) for loc, msg in problems]
    return [(loc, f"{format_loc(loc)}: {text}" if loc else text) for loc, text in texts]


def parse_loc(text: str) -> Loc:
    """:func:`format_loc` undone."""
    return tuple(int(part) if part.isdigit() else part for part in re.findall(r"[^.\[\]]+", text))


def format_validation_error(exc: ValidationError, *, origin: str | None = None) -> str:
    """One line naming every failing field path and what is wrong with it (the first five, then how many more)."""
    parts = [line for _, line in problem_lines(collect_problems(exc, None))]
    text = "; ".join(parts[:5] + [f"... and {len(parts) - 5} more"] * (len(parts) > 5))
    return f"{origin}: {text}" if origin else text


class ConfigObject(BaseModel):
    """An object of a config: frozen, strict, unknown keys are errors, and its problems are worded where it is
    validated, where the fields an unknown key could have meant are known (a logit or score field's error says why
    it is refused)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @model_validator(mode="wrap")
    @classmethod
    def _problems(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        try:
            return handler(data)
        except ValidationError as exc:
            raise nested_error(collect_problems(exc, cls)) from None
