"""The one rule book of generation settings: what each ``model.generation_kwargs`` key may hold, which decoding mode
uses it, and which engines honour it.

Three readers share it: the config loader (type and range checks when the config loads, no model needed), the
effective generation config (the same checks on the merged user + teacher values and the rules that combine
settings, :func:`effective_problems`, then the decoding-mode drops), and
the config reference page (``gencache.docgen.config``). The engine check (:func:`engine_refusals`) runs on the effective
config before any weights load: a setting an engine cannot honour exactly is refused with one line naming the
engine, the setting and the engines that do honour it.

This module imports neither torch nor transformers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gencache.config.describe import FieldProblem, Loc, not_value, show, type_name
from gencache.config.names import ALL_ENGINES, ENGINE_STATIC, ENGINE_VLLM
from gencache.core.canonical import is_finite_number, is_int

FIELD = "model.generation_kwargs"

NO_LOGITS_MESSAGE = (
    "format 3 never collects or stores logits or scores; KL training computes teacher logits online. "
    "Delete this field from the config (the SemPIC research code's _default.json files shipped `store_logits: true`)"
)

# Fields that ask generation to return or store logits, scores or other per-step tensors. They are rejected
# wherever they appear (top level, ``model``, ``model.generation_kwargs``, a data config) with NO_LOGITS_MESSAGE.
LOGIT_FIELDS: frozenset[str] = frozenset(
    {
        "store_logits",
        "output_scores",
        "output_logits",
        "return_dict_in_generate",
        "output_attentions",
        "output_hidden_states",
        "return_legacy_cache",
        "logits_to_keep",
        "num_logits_to_keep",
        "store_scores",
    }
)


# -- value checks: None when the value is acceptable, else what is wrong --------------------------------------
def _positive_int(value: Any) -> str | None:
    if is_int(value) and value >= 1:
        return None
    return (
        f"must be a positive integer (got {value})"
        if is_int(value)
        else f"must be a positive integer, {not_value(value)}"
    )


def _non_negative_int(value: Any) -> str | None:
    if is_int(value) and value >= 0:
        return None
    return f"must be an integer >= 0 (got {value})" if is_int(value) else f"must be an integer >= 0, {not_value(value)}"


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, {not_value(value)}"


def _positive_number(value: Any) -> str | None:
    return None if is_finite_number(value) and value > 0 else f"must be a number > 0 (got {show(value)})"


def _number(value: Any) -> str | None:
    return None if is_finite_number(value) else f"must be a finite number (got {show(value)})"


def _probability(value: Any) -> str | None:
    ok = is_finite_number(value) and 0 <= value <= 1
    return None if ok else f"must be a number between 0 and 1 (got {show(value)})"


def _open_probability(value: Any) -> str | None:
    ok = is_finite_number(value) and 0 < value <= 1
    return None if ok else f"must be a number greater than 0 and at most 1 (got {show(value)})"


def _cutoff(value: Any) -> str | None:
    ok = is_finite_number(value) and 0 <= value < 1
    return None if ok else f"must be a number >= 0 and below 1 (got {show(value)})"


def _token_id(value: Any) -> str | None:
    return None if is_int(value) and value >= 0 else f"must be a token id (an integer >= 0), {not_value(value)}"


def _token_ids(value: Any) -> str | None:
    if is_int(value) and value >= 0:
        return None
    if isinstance(value, list) and value and all(is_int(v) and v >= 0 for v in value):
        return None
    return f"must be a token id or a non-empty list of token ids (got {show(value)})"


def _eos_ids(value: Any) -> str | None:
    if is_int(value) and value >= 0:
        return None
    if isinstance(value, list) and all(is_int(v) and v >= 0 for v in value):
        return None
    return f"must be a token id or a list of token ids (got {show(value)})"


def _token_id_list(value: Any) -> str | None:
    if isinstance(value, list) and all(is_int(v) and v >= 0 for v in value):
        return None
    return f"must be a list of token ids (got {show(value)})"


def _stop_strings(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return None
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return None
    return f"must be a non-empty string or a non-empty list of non-empty strings (got {show(value)})"


def _early_stopping(value: Any) -> str | None:
    return (
        None if isinstance(value, bool) or value == "never" else f'must be true, false or "never" (got {show(value)})'
    )


def _cache_implementation(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, {not_value(value)}"
    if value == "paged":
        return 'must not be "paged": continuous batching is chosen with the top-level engine field'
    return None


#: A rule's ``neutral`` when no value leaves the setting without effect.
NO_NEUTRAL: Any = object()

#: Decoding modes a setting applies to; a setting of another mode is dropped from the effective config.
MODE_ANY, MODE_SAMPLING, MODE_BEAM = "any", "sampling", "beam search"


@dataclass(frozen=True)
class SettingRule:
    """One generation setting: its value check and the rule text shown in the docs, the decoding mode that uses it,
    the value under which it has no effect (``neutral``), and the engines that honour any other value exactly."""

    check: Callable[[Any], str | None]
    text: str
    mode: str = MODE_ANY
    neutral: Any = NO_NEUTRAL
    engines: tuple[str, ...] = ALL_ENGINES


_STATIC_ONLY = (ENGINE_STATIC,)
_NOT_CONTINUOUS = (ENGINE_STATIC, ENGINE_VLLM)
_TOKEN_ID = "token id (integer >= 0)"

# The rule book. Keys transformers knows but not listed here are passed to its GenerationConfig (validated strictly
# before weights load) and honoured by the "transformers" engine only, unless their value is transformers' default.
GENERATION_SETTINGS: dict[str, SettingRule] = {
    "max_new_tokens": SettingRule(_positive_int, "integer >= 1"),
    "min_new_tokens": SettingRule(_non_negative_int, "integer >= 0", neutral=0, engines=_STATIC_ONLY),
    "min_length": SettingRule(_non_negative_int, "integer >= 0", neutral=0, engines=_STATIC_ONLY),
    "do_sample": SettingRule(_boolean, "true or false"),
    "use_cache": SettingRule(_boolean, "true or false"),
    "num_beams": SettingRule(_positive_int, "integer >= 1", neutral=1, engines=_STATIC_ONLY),
    "num_return_sequences": SettingRule(_positive_int, "integer >= 1"),
    "temperature": SettingRule(_positive_number, "number > 0", MODE_SAMPLING),
    "top_k": SettingRule(_non_negative_int, "integer >= 0", MODE_SAMPLING),
    "top_p": SettingRule(_open_probability, "number in (0, 1]", MODE_SAMPLING),
    "min_p": SettingRule(_probability, "number in [0, 1]", MODE_SAMPLING),
    "typical_p": SettingRule(_open_probability, "number in (0, 1]", MODE_SAMPLING, 1.0, _STATIC_ONLY),
    "epsilon_cutoff": SettingRule(_cutoff, "number in [0, 1)", MODE_SAMPLING, 0.0, _STATIC_ONLY),
    "eta_cutoff": SettingRule(_cutoff, "number in [0, 1)", MODE_SAMPLING, 0.0, _STATIC_ONLY),
    "top_h": SettingRule(_open_probability, "number in (0, 1]", MODE_SAMPLING, NO_NEUTRAL, _STATIC_ONLY),
    "repetition_penalty": SettingRule(_positive_number, "number > 0", neutral=1.0, engines=_NOT_CONTINUOUS),
    "encoder_repetition_penalty": SettingRule(_positive_number, "number > 0", neutral=1.0, engines=_STATIC_ONLY),
    "length_penalty": SettingRule(_number, "finite number", MODE_BEAM, 1.0, _STATIC_ONLY),
    "early_stopping": SettingRule(_early_stopping, 'true, false or "never"', MODE_BEAM, False, _STATIC_ONLY),
    "no_repeat_ngram_size": SettingRule(_non_negative_int, "integer >= 0", neutral=0, engines=_STATIC_ONLY),
    "encoder_no_repeat_ngram_size": SettingRule(_non_negative_int, "integer >= 0", neutral=0, engines=_STATIC_ONLY),
    "renormalize_logits": SettingRule(_boolean, "true or false", neutral=False, engines=_STATIC_ONLY),
    "remove_invalid_values": SettingRule(_boolean, "true or false", neutral=False, engines=_STATIC_ONLY),
    "eos_token_id": SettingRule(_eos_ids, "token id or list of token ids ([] stops only at max_new_tokens)"),
    "pad_token_id": SettingRule(_token_id, _TOKEN_ID),
    "bos_token_id": SettingRule(_token_id, _TOKEN_ID),
    "decoder_start_token_id": SettingRule(_token_id, _TOKEN_ID),
    "forced_bos_token_id": SettingRule(_token_id, _TOKEN_ID, engines=_STATIC_ONLY),
    "forced_eos_token_id": SettingRule(_token_ids, "token id or non-empty list of token ids", engines=_STATIC_ONLY),
    "suppress_tokens": SettingRule(_token_id_list, "list of token ids", engines=_STATIC_ONLY),
    "begin_suppress_tokens": SettingRule(_token_id_list, "list of token ids", engines=_STATIC_ONLY),
    "stop_strings": SettingRule(_stop_strings, "non-empty string or non-empty list of non-empty strings"),
    "guidance_scale": SettingRule(_number, "finite number", neutral=1.0, engines=_STATIC_ONLY),
    "token_healing": SettingRule(_boolean, "true or false", neutral=False, engines=_STATIC_ONLY),
    "disable_compile": SettingRule(_boolean, "true or false"),
    "cache_implementation": SettingRule(_cache_implementation, 'string, not "paged"', engines=_STATIC_ONLY),
    "max_cache_len": SettingRule(_positive_int, "integer >= 1", engines=_STATIC_ONLY),
    "prefill_chunk_size": SettingRule(_positive_int, "integer >= 1", engines=_STATIC_ONLY),
}

#: ``generation_kwargs`` keys gencache type-checks before anything loads, and the rule each must satisfy.
GENERATION_KWARG_RULES: Mapping[str, str] = {name: rule.text for name, rule in GENERATION_SETTINGS.items()}

#: Python-object hooks of ``model.generate`` that a JSON config cannot express or that gencache owns itself.
GENERATION_FORBIDDEN: Mapping[str, str] = {
    "streamer": "gencache shows its own progress",
    "stopping_criteria": "gencache installs its own stopping criterion (use stop_strings or eos_token_id)",
    "logits_processor": "not expressible in a JSON config",
    "prefix_allowed_tokens_fn": "not expressible in a JSON config",
    "assistant_model": "not expressible in a JSON config",
    "synced_gpus": "gencache decides device placement",
    "generation_config": "give the settings themselves in generation_kwargs",
    "tokenizer": "gencache passes the configured tokenizer",
    "inputs": "gencache builds the inputs from the data configs",
    "input_ids": "gencache builds the inputs from the data configs",
    "attention_mask": "gencache builds the attention mask",
}

#: Generation settings transformers knows but gencache refuses, with the reason given to the user.
GENERATION_UNSUPPORTED: dict[str, str] = {
    "max_length": "it counts the prompt tokens; set max_new_tokens instead",
    "max_time": "a wall-clock limit would make the stored answers depend on machine speed",
    "compile_config": "it is a Python object and cannot be given in a JSON config",
    "continuous_batching_config": 'choose continuous batching with the top-level "engine" field and size it in '
    '"engine_options"',
    "transformers_version": "it is metadata, not a generation setting",
}
for _name in (
    "is_assistant",
    "num_assistant_tokens",
    "num_assistant_tokens_schedule",
    "assistant_confidence_threshold",
    "prompt_lookup_num_tokens",
    "max_matching_ngram_size",
    "assistant_early_exit",
    "assistant_lookbehind",
    "target_lookbehind",
    "assistant_ensemble_weight",
    "speculation_type",
    "use_mtp",
):
    GENERATION_UNSUPPORTED[_name] = "assisted and speculative decoding generate one prompt at a time"
for _name in (
    "low_memory",
    "penalty_alpha",
    "dola_layers",
    "num_beam_groups",
    "diversity_penalty",
    "constraints",
    "force_words_ids",
):
    GENERATION_UNSUPPORTED[_name] = "this decoding strategy moved out of transformers (custom_generate)"


def _json_problems(value: Any, loc: Loc) -> list[FieldProblem]:
    if value is None or isinstance(value, (bool, str, int)):
        return []
    if isinstance(value, float):
        return [] if math.isfinite(value) else [(loc, f"must be a finite number (got {value!r})")]
    if isinstance(value, Mapping):
        out: list[FieldProblem] = []
        for key, item in value.items():
            if not isinstance(key, str):
                out.append((loc, f"object keys must be strings (got {key!r})"))
                continue
            out.extend(_json_problems(item, (*loc, key)))
        return out
    if isinstance(value, (list, tuple)):
        return [p for i, item in enumerate(value) for p in _json_problems(item, (*loc, i))]
    return [(loc, f"must be a JSON value, not {type(value).__name__}")]


def setting_problem(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` for the generation setting ``key`` (None when it is acceptable or unlisted)."""
    rule = GENERATION_SETTINGS.get(key)
    return None if rule is None else rule.check(value)


def generation_problems(kwargs: object) -> list[FieldProblem]:
    """Every problem of a ``generation_kwargs`` object that needs no model, as ``((key, ...), message)`` pairs.

    It must be an object; logit and score fields, Python-object hooks and unsupported settings are refused; every
    value must be JSON; the listed settings must satisfy their rule. An explicit null is accepted: it unsets a value
    inherited from ``_default.json`` (the teacher's generation config, then transformers' defaults, supply it)."""
    if not isinstance(kwargs, Mapping):
        return [((), f"must be an object, not {type_name(kwargs)}")]
    problems: list[FieldProblem] = []
    for key in sorted(kwargs, key=str):
        value = kwargs[key]
        if not isinstance(key, str):
            problems.append(((), f"keys must be strings (got {key!r})"))
        elif key in LOGIT_FIELDS:
            problems.append(((key,), NO_LOGITS_MESSAGE))
        elif key in GENERATION_FORBIDDEN:
            problems.append(((key,), f"not allowed here: {GENERATION_FORBIDDEN[key]}"))
        elif key in GENERATION_UNSUPPORTED:
            problems.append(((key,), f"not supported: {GENERATION_UNSUPPORTED[key]}"))
        elif json_problems := _json_problems(value, (key,)):
            problems.extend(json_problems)
        elif value is not None and (message := setting_problem(key, value)) is not None:
            problems.append(((key,), message))
    return problems


_TEACHER = "teacher's generation config"


def effective_problems(effective: Mapping[str, Any], *, user: Collection[str], teacher: str) -> list[str]:
    """Every problem of an effective generation config, one line each (empty when it is acceptable).

    ``effective`` holds the user's settings over the teacher's generation config (read from the model ``teacher``)
    over transformers' defaults, nulls left out, ``do_sample`` a boolean; ``user`` names the settings the config
    set, so a bad value is named as the config's or the teacher's. ``max_new_tokens`` must be set, every listed
    setting of the decoding mode in use (sampling parameters only when sampling) must satisfy its rule, and, when
    they all do, the settings must combine: several sequences need sampling or beams and at most ``num_beams`` of
    them, and stop strings exclude beam search."""
    lines: list[str] = []
    if "max_new_tokens" not in effective:
        lines.append(
            f"{FIELD}.max_new_tokens is required: set it in the config "
            f"(the teacher's generation config at {teacher!r} does not set it)."
        )
    sampling = effective.get("do_sample") is True
    for key, value in effective.items():
        rule = GENERATION_SETTINGS.get(key)
        problem = None if rule is None or (rule.mode == MODE_SAMPLING and not sampling) else rule.check(value)
        if problem is not None:
            lines.append(f"{FIELD}.{key} ({'config' if key in user else _TEACHER}): {problem}.")
    return lines or _combination_problems(effective, sampling)


def _combination_problems(effective: Mapping[str, Any], sampling: bool) -> list[str]:
    """The rules that combine settings, on values that each satisfy their own rule."""
    sequences, beams = effective.get("num_return_sequences", 1), effective.get("num_beams", 1)
    lines: list[str] = []
    if sequences > 1 and not sampling and beams == 1:
        lines.append(
            f"{FIELD}.num_return_sequences = {sequences} needs sampling (do_sample: true) or beam search "
            "(num_beams > 1): greedy decoding returns one sequence per prompt."
        )
    if beams > 1 and sequences > beams:
        lines.append(f"{FIELD}.num_return_sequences ({sequences}) cannot exceed num_beams ({beams}).")
    if effective.get("stop_strings") and beams > 1:
        lines.append(
            f"{FIELD}.stop_strings cannot be combined with beam search (num_beams = {beams}): gencache records "
            "each sequence's finish step, which beam search does not expose."
        )
    return lines


def _engines_text(engines: Sequence[str]) -> str:
    names = [f'"{name}"' for name in engines]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" or {names[-1]}"


def engine_refusals(engine: str, effective: Mapping[str, Any], *, defaults: Mapping[str, Any]) -> list[str]:
    """One line per effective setting ``engine`` cannot honour exactly (empty when it honours them all).

    ``effective`` is the effective generation config (every non-null field); ``defaults`` transformers' default
    values, which stand for "no effect" for settings the rule book does not list. A setting at its neutral value is
    never refused."""
    if engine not in ALL_ENGINES:
        raise ValueError(f"unknown engine {engine!r}")
    lines: list[str] = []
    beams = effective.get("num_beams", 1)
    if effective.get("do_sample") is True and is_int(beams) and beams > 1:
        lines.append(
            f'engine "{engine}" cannot sample each sequence from its own stream in beam search ({FIELD}.do_sample '
            f"with num_beams = {beams}: every beam of a batch draws from one generator); set do_sample false for "
            "beam search, or num_beams 1 for sampling."
        )
    for key in sorted(effective):
        value = effective[key]
        rule = GENERATION_SETTINGS.get(key)
        engines = rule.engines if rule is not None else _STATIC_ONLY
        if engine in engines:
            continue
        neutral = rule.neutral if rule is not None else defaults.get(key, NO_NEUTRAL)
        if neutral is not NO_NEUTRAL and value == neutral:
            continue
        lines.append(
            f'engine "{engine}" cannot honour {FIELD}.{key} = {show(value)} exactly; remove it, or use engine '
            f"{_engines_text(engines)}, which honours it."
        )
    return lines
