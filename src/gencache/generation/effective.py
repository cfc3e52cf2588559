"""The effective generation config, resolved and validated before any weights load: the user's
``model.generation_kwargs``, then the teacher's ``generation_config.json``, then transformers' defaults, validated
by transformers and the ranges gencache adds (:mod:`gencache.config.generation`).
"""

from __future__ import annotations

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
)
from gencache.config.names import LOGIT_FIELDS
from gencache.core.errors import ConfigError, first_line
from gencache.generation.teacher import hf, read_json_file

if TYPE_CHECKING:
    from transformers import GenerationConfig


@dataclass(frozen=True)
class EffectiveGeneration:
    """The generation settings a run uses: ``config`` for ``model.generate``, ``kwargs`` (every non-null effective
    field) for ``resolved_config.json``; ``defaults`` holds transformers' default values (what "no effect" means for
    settings gencache does not declare)."""

    config: GenerationConfig
    kwargs: dict[str, Any]
    eos_token_ids: tuple[int, ...]
    stop_strings: tuple[str, ...]
    max_new_tokens: int
    num_return_sequences: int
    do_sample: bool
    defaults: Mapping[str, Any]


def resolve_generation(
    generation_kwargs: Mapping[str, Any], *, model_path: str, revision: str | None, tokenizer: Any
) -> EffectiveGeneration:
    """The effective generation config; every problem is a :class:`ConfigError` naming the field.

    A null user value means "not set". ``do_sample`` is false unless the user sets it, ``pad_token_id`` the
    tokenizer's unless the user sets it, and settings of a decoding mode the run does not use are dropped (sampling
    parameters under greedy decoding, beam parameters without beams), so transformers cannot warn about them or
    re-fill them from the teacher. ``max_new_tokens`` decides the length (``max_length`` is refused)."""
    fields = {name for name in vars(hf().GenerationConfig()) if not name.startswith("_")}
    unknown = sorted(set(generation_kwargs) - fields)
    if unknown:
        names = ", ".join(f"{FIELD}.{key}" for key in unknown)
        error = ConfigError(f"Unknown generation setting{'s' if len(unknown) > 1 else ''}: {names}.")
        error.location = f"{FIELD}.{unknown[0]}" if len(unknown) == 1 else FIELD  # type: ignore[attr-defined]
        raise error
    # the teacher's settings: its generation_config.json, else what transformers derives from config.json (the teacher
    # loads with the effective config, so the file is read this way only)
    where = f"model.model_path {model_path!r}{f' at revision {revision!r}' if revision else ''}"
    try:
        path = hf().utils.cached_file(
            model_path, "generation_config.json", _raise_exceptions_for_missing_entries=False, revision=revision
        )
        if path is None:
            model_config = hf().AutoConfig.from_pretrained(model_path, revision=revision)
            data = hf().GenerationConfig.from_model_config(model_config).to_dict()
    except Exception as exc:
        raise ConfigError(f"Cannot read the teacher's generation config from {where}: {first_line(exc)}") from exc
    if path is not None:
        data = read_json_file(path)
        if not isinstance(data, dict):
            raise ConfigError(f"The teacher's file {path} is not a JSON object; fix it or re-download the model.")
    user = {key: value for key, value in generation_kwargs.items() if value is not None}
    refused = {"do_sample", "max_length", *LOGIT_FIELDS, *GENERATION_UNSUPPORTED, *GENERATION_FORBIDDEN}
    defaults: dict[str, Any] = dict(hf().GenerationConfig._get_default_generation_params())
    merged = {key: value for key, value in defaults.items() if key not in refused}
    known = fields - refused
    merged.update((key, value) for key, value in data.items() if key in known and value is not None)
    merged.update(user)
    merged["do_sample"] = bool(user.get("do_sample", False))
    merged["pad_token_id"] = user.get("pad_token_id", getattr(tokenizer, "pad_token_id", None))
    merged = {key: value for key, value in merged.items() if value is not None}
    problems_found = effective_problems(merged, user=user.keys(), teacher=model_path)
    if problems_found:
        raise ConfigError(problems_found[0])  # the first problem, the teacher's values included
    do_sample: bool = merged["do_sample"]
    for key in (*(() if do_sample else SAMPLING_KEYS), *(BEAM_KEYS if merged.get("num_beams", 1) == 1 else ())):
        merged.pop(key, None)
    if "eos_token_id" in merged:
        eos = merged["eos_token_id"]
        merged["eos_token_id"] = [int(token) for token in (eos if isinstance(eos, list) else [eos])]
    if "stop_strings" in merged:
        stops = merged["stop_strings"]
        merged["stop_strings"] = list(dict.fromkeys([stops] if isinstance(stops, str) else stops))
    try:
        config: GenerationConfig = hf().GenerationConfig(**merged)
        config.validate(strict=True)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{FIELD}: invalid generation settings: {' '.join(str(exc).split())}") from exc
    return EffectiveGeneration(
        config=config,
        kwargs=dict(sorted(merged.items())),
        eos_token_ids=tuple(merged.get("eos_token_id", ())),
        stop_strings=tuple(merged.get("stop_strings", ())),
        max_new_tokens=int(merged["max_new_tokens"]),
        num_return_sequences=int(merged.get("num_return_sequences", 1)),
        do_sample=do_sample,
        defaults={key: value for key, value in defaults.items() if value is not None},
    )


def check_engine(engine: str, generation: EffectiveGeneration) -> None:
    """Refuse every effective setting ``engine`` cannot honour exactly: one :class:`ConfigError` line naming the
    engine, the setting and the engines that honour it."""
    lines = engine_refusals(engine, generation.kwargs, defaults=generation.defaults)
    if lines:
        more = f" (and {len(lines) - 1} more setting{'s' if len(lines) > 2 else ''})" if len(lines) > 1 else ""
        raise ConfigError(lines[0].rstrip(".") + more + ".")
