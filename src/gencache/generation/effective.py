"""The effective generation config, resolved and validated before any weights load.

The user's ``model.generation_kwargs``, then the teacher's ``generation_config.json``, then transformers' defaults.
``do_sample`` is false unless the user asks; settings of a decoding mode the run does not use are dropped (sampling
parameters under greedy decoding, beam parameters without beams); the result is validated by transformers'
``GenerationConfig(...).validate(strict=True)`` and by the ranges gencache adds (:mod:`gencache.config.generation`);
every problem is a :class:`~gencache.core.errors.ConfigError` (exit code 2). :func:`check_engine` then refuses what
the chosen engine cannot honour.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gencache.config.generation import (
    BEAM_KEYS,
    FIELD,
    GENERATION_FORBIDDEN,
    GENERATION_UNSUPPORTED,
    SAMPLING_KEYS,
    effective_problems,
    engine_refusals,
    generation_problems,
    honoured_by,
)
from gencache.config.messages import join_problems
from gencache.config.names import LOGIT_FIELDS
from gencache.core.canonical import is_int
from gencache.core.errors import ConfigError, first_line
from gencache.generation import teacher
from gencache.generation.teacher import read_json_file

if TYPE_CHECKING:
    from transformers import GenerationConfig

_ALLOWED_MODES = ("greedy_search", "sample", "beam_search", "beam_sample")


@dataclass(frozen=True)
class EffectiveGeneration:
    """The generation settings a run uses, resolved and validated before any weights load.

    ``config`` is what ``model.generate`` receives; ``kwargs`` is the same settings as a JSON-able dict for
    ``resolved_config.json`` (every non-null effective field; sampling parameters are absent under greedy decoding).
    ``eos_token_ids`` is the generation EOS list (possibly empty), ``dropped`` names the settings that were set by
    the user or the teacher but dropped because the decoding mode does not use them. ``defaults`` holds
    transformers' default values (what "no effect" means for settings gencache does not declare).
    """

    config: GenerationConfig
    kwargs: dict[str, Any]
    eos_token_ids: tuple[int, ...]
    stop_strings: tuple[str, ...]
    max_new_tokens: int
    num_return_sequences: int
    do_sample: bool
    num_beams: int = 1
    dropped: tuple[str, ...] = ()
    defaults: Mapping[str, Any] | None = None


@functools.cache
def _known_generation_fields() -> frozenset[str]:
    return frozenset(name for name in vars(teacher.hf().GenerationConfig()) if not name.startswith("_"))


def _user_kwargs(generation_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The user's settings without nulls (null means "not set": the teacher's value or transformers' default
    applies), checked as when the config loads (the same problems, in the same words)
    and against the fields transformers' ``GenerationConfig`` knows (the one check that needs transformers)."""
    problems = generation_problems(generation_kwargs)
    if problems:
        raise ConfigError(join_problems([((*FIELD.split("."), *loc), msg) for loc, msg in problems], None))
    known = _known_generation_fields()
    unknown = sorted(key for key in generation_kwargs if key not in known)
    if unknown:
        names = ", ".join(f"{FIELD}.{key}" for key in unknown)
        error = ConfigError(f"Unknown generation setting{'s' if len(unknown) > 1 else ''}: {names}.")
        error.location = f"{FIELD}.{unknown[0]}" if len(unknown) == 1 else FIELD  # type: ignore[attr-defined]
        raise error
    return {key: value for key, value in generation_kwargs.items() if value is not None}


def read_teacher_generation_config(model_path: str, *, revision: str | None = None) -> dict[str, Any]:
    """The teacher's generation settings as a dict of known, non-null fields, read without weights: from
    ``generation_config.json`` when the model has one, otherwise what transformers derives from ``config.json``
    (as ``from_pretrained`` does). Values are not validated here; :func:`resolve_generation` does that. This is
    the one read of ``generation_config.json``: the teacher loads with the effective config resolved from it
    (:func:`gencache.generation.teacher.load_teacher`), so the file is never checked a second way."""
    hf = teacher.hf()
    where = f"model.model_path {model_path!r}{f' at revision {revision!r}' if revision else ''}"
    try:
        path = hf.utils.cached_file(
            model_path,
            "generation_config.json",
            _raise_exceptions_for_missing_entries=False,
            revision=revision,
        )
    except Exception as exc:
        raise ConfigError(f"Cannot read the teacher's generation config from {where}: {first_line(exc)}") from exc
    if path is not None:
        data = read_json_file(path)
        if not isinstance(data, dict):
            raise ConfigError(
                f"The teacher's file {path} does not hold a JSON object; fix it or re-download the model."
            )
    else:
        try:
            model_config = hf.AutoConfig.from_pretrained(model_path, revision=revision)
            data = hf.GenerationConfig.from_model_config(model_config).to_dict()
        except Exception as exc:
            raise ConfigError(f"Cannot read the teacher's config.json from {where}: {first_line(exc)}") from exc
    known = _known_generation_fields()
    return {key: value for key, value in data.items() if key in known and value is not None}


def resolve_generation(
    generation_kwargs: Mapping[str, Any], *, model_path: str, revision: str | None, tokenizer: Any
) -> EffectiveGeneration:
    """Resolve and strictly validate the effective generation config, before any weights load.

    Precedence: the user's ``generation_kwargs``, then the teacher's generation config, then transformers'
    defaults; except ``do_sample`` (false unless the user sets it) and ``pad_token_id`` (the tokenizer's pad id
    unless the user sets it). A null user value means "not set". Sampling parameters are dropped under greedy
    decoding, beam-only parameters when ``num_beams`` is 1, and ``max_length`` always (``max_new_tokens``, which is
    required, decides the length). Every problem raises :class:`ConfigError` naming the field.
    """
    user = _user_kwargs(generation_kwargs)
    teacher_values = {
        key: value
        for key, value in read_teacher_generation_config(model_path, revision=revision).items()
        if key not in LOGIT_FIELDS and key not in GENERATION_UNSUPPORTED and key not in GENERATION_FORBIDDEN
    }
    teacher_values.pop("do_sample", None)
    defaults: dict[str, Any] = dict(teacher.hf().GenerationConfig._get_default_generation_params())
    merged = _merge(defaults, teacher_values, user, tokenizer)
    problems = effective_problems(merged, user=user.keys(), teacher=model_path)
    if problems:
        raise ConfigError(problems[0])  # the first problem, the teacher's values included
    do_sample: bool = merged["do_sample"]
    num_beams = merged.get("num_beams", 1)
    num_return_sequences = merged.get("num_return_sequences", 1)
    dropped = _drop_unused(merged, set(user) | set(teacher_values), do_sample, num_beams)

    eos = merged.get("eos_token_id", [])
    eos_token_ids = tuple(int(token) for token in (eos if isinstance(eos, list | tuple) else [eos]))
    if "eos_token_id" in merged:
        merged["eos_token_id"] = list(eos_token_ids)
    stops = merged.get("stop_strings", [])
    stop_strings = tuple(dict.fromkeys([stops] if isinstance(stops, str) else stops))
    if "stop_strings" in merged:
        merged["stop_strings"] = list(stop_strings)

    config = _build_config(merged)
    mode = str(getattr(config.get_generation_mode(), "value", config.get_generation_mode()))
    if mode not in _ALLOWED_MODES:
        raise ConfigError(
            f"{FIELD}: the settings select the {mode!r} decoding mode; gencache supports greedy decoding, sampling "
            "and beam search."
        )
    kwargs = {key: merged[key] for key in sorted(merged)}
    try:
        json.dumps(kwargs, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{FIELD}: the effective settings are not JSON-serialisable: {exc}") from exc
    return EffectiveGeneration(
        config=config,
        kwargs=kwargs,
        eos_token_ids=eos_token_ids,
        stop_strings=stop_strings,
        max_new_tokens=int(merged["max_new_tokens"]),
        num_return_sequences=int(num_return_sequences),
        do_sample=do_sample,
        num_beams=int(num_beams) if is_int(num_beams) else 1,
        dropped=tuple(dropped),
        defaults={key: value for key, value in defaults.items() if value is not None},
    )


def _merge(
    defaults: Mapping[str, Any], teacher_values: Mapping[str, Any], user: Mapping[str, Any], tokenizer: Any
) -> dict[str, Any]:
    """transformers' defaults, under the teacher's values, under the user's; ``do_sample`` false unless the user
    asks, ``pad_token_id`` the tokenizer's unless the user sets it; inert and unset values left out."""
    merged = dict(defaults)
    merged.update(teacher_values)
    merged.update(user)
    merged["do_sample"] = bool(user.get("do_sample", False))
    merged["pad_token_id"] = user.get("pad_token_id", getattr(tokenizer, "pad_token_id", None))
    for key in ("max_length", *LOGIT_FIELDS, *GENERATION_UNSUPPORTED):  # inert defaults of unsupported features
        merged.pop(key, None)
    return {key: value for key, value in merged.items() if value is not None}


def _drop_unused(merged: dict[str, Any], explicit: set[str], do_sample: bool, num_beams: int) -> list[str]:
    """Remove (in place) sampling keys under greedy decoding and beam keys without beams; return the explicit ones
    (set by the user or the teacher, beam keys only when not neutral) that were dropped."""
    dropped: list[str] = []
    if not do_sample:
        for key in SAMPLING_KEYS:
            if key in merged:
                merged.pop(key)
                if key in explicit:
                    dropped.append(key)
    if num_beams == 1:
        for key in BEAM_KEYS:
            if key in merged:
                value = merged.pop(key)
                if key in explicit and value != honoured_by(key)[1]:
                    dropped.append(key)
    return dropped


def _build_config(merged: dict[str, Any]) -> GenerationConfig:
    try:
        config: GenerationConfig = teacher.hf().GenerationConfig(**merged)
        config.validate(strict=True)
    except (ValueError, TypeError) as exc:
        message = " ".join(str(exc).split())
        raise ConfigError(f"{FIELD}: invalid generation settings: {message}") from exc
    return config


def check_engine(engine: str, generation: EffectiveGeneration) -> None:
    """Refuse, before any weights load, every effective setting ``engine`` cannot honour exactly: one
    :class:`ConfigError` (exit code 2) whose line names the engine, the setting and the engines that honour it."""
    lines = engine_refusals(engine, generation.kwargs, defaults=generation.defaults or {})
    if lines:
        more = f" (and {len(lines) - 1} more setting{'s' if len(lines) > 2 else ''})" if len(lines) > 1 else ""
        raise ConfigError(lines[0].rstrip(".") + more + ".")
