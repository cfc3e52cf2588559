"""What gencache adds to transformers' generation settings (``model.generation_kwargs``), checked when the config
loads without importing transformers: the refused fields, the ranges transformers lets through (a temperature of 0,
a ``top_p`` above 1), and which engines honour each setting exactly (:func:`engine_refusals`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, ValidationError

from gencache.config.messages import FieldProblem, collect_problems, show
from gencache.config.names import ALL_ENGINES, ENGINE_STATIC, ENGINE_VLLM, LOGIT_FIELDS, NO_LOGITS_MESSAGE

FIELD = "model.generation_kwargs"

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
GENERATION_UNSUPPORTED: Mapping[str, str] = {
    "max_length": "it counts the prompt tokens; set max_new_tokens instead",
    "max_time": "a wall-clock limit would make the stored answers depend on machine speed",
    "compile_config": "it is a Python object and cannot be given in a JSON config",
    "continuous_batching_config": 'choose continuous batching with the top-level "engine" field and size it in '
    '"engine_options"',
    "transformers_version": "it is metadata, not a generation setting",
    **dict.fromkeys(
        [
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
        ],
        "assisted and speculative decoding generate one prompt at a time",
    ),
    **dict.fromkeys(
        [
            "low_memory",
            "penalty_alpha",
            "dola_layers",
            "num_beam_groups",
            "diversity_penalty",
            "constraints",
            "force_words_ids",
        ],
        "this decoding strategy moved out of transformers (custom_generate)",
    ),
}

_REFUSED = {
    **{key: f"not supported: {why}" for key, why in GENERATION_UNSUPPORTED.items()},
    **{key: f"not allowed here: {why}" for key, why in GENERATION_FORBIDDEN.items()},
    **dict.fromkeys(LOGIT_FIELDS, NO_LOGITS_MESSAGE),
}

#: Settings used only when sampling (dropped under greedy decoding) and only by beam search (dropped without beams).
SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h")
BEAM_KEYS = ("length_penalty", "early_stopping")


def _token_ids(value: Any) -> Any:
    ids = value if isinstance(value, list) else [value]
    if all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ids):
        return value
    raise ValueError(f"must be a token id or a list of token ids (got {show(value)})")


def _stop_strings(value: Any) -> Any:
    strings = value if isinstance(value, list) else [value]
    if strings and all(isinstance(v, str) and v for v in strings):
        return value
    raise ValueError(f"must be a non-empty string or a non-empty list of non-empty strings (got {show(value)})")


def _early_stopping(value: Any) -> Any:
    if isinstance(value, bool) or value == "never":
        return value
    raise ValueError(f'must be true, false or "never" (got {show(value)})')


def _not_paged(value: str) -> str:
    if value == "paged":
        raise ValueError('must not be "paged": continuous batching is chosen with the top-level engine field')
    return value


def _only(*engines: str, neutral: Any = None, description: str | None = None) -> Any:
    """A field honoured exactly by ``engines`` (none: the static engine) only, without effect at ``neutral``."""
    extra = {"x-engines": list(engines or _STATIC), "x-neutral": neutral}
    return Field(default=None, description=description, json_schema_extra=extra)


_STATIC = (ENGINE_STATIC,)
Positive = Annotated[int, Field(ge=1)]
Count = Annotated[int, Field(ge=0)]
TokenIds = Annotated[JsonValue, AfterValidator(_token_ids)]
Unit = Annotated[float, Field(gt=0, le=1)]
Cutoff = Annotated[float, Field(ge=0, lt=1)]


class GenerationKwargs(BaseModel):
    """The ranges of the settings transformers accepts without checking them, and the engines that honour each
    (``x-engines``; every engine when absent) unless it holds its ``x-neutral`` value. Other keys pass through to
    transformers; every value must be JSON."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)
    __pydantic_extra__: dict[str, JsonValue] = Field(init=False)

    max_new_tokens: Positive | None = None
    do_sample: bool | None = None
    use_cache: bool | None = None
    disable_compile: bool | None = None
    min_new_tokens: Count | None = _only(neutral=0)
    min_length: Count | None = _only(neutral=0)
    num_beams: Positive | None = _only(neutral=1)
    num_return_sequences: Positive | None = None
    temperature: Annotated[float, Field(gt=0)] | None = None
    top_k: Count | None = None
    top_p: Unit | None = None
    min_p: Annotated[float, Field(ge=0, le=1)] | None = None
    typical_p: Unit | None = _only(neutral=1.0)
    epsilon_cutoff: Cutoff | None = _only(neutral=0.0)
    eta_cutoff: Cutoff | None = _only(neutral=0.0)
    top_h: Unit | None = _only()
    repetition_penalty: Annotated[float, Field(gt=0)] | None = _only(ENGINE_STATIC, ENGINE_VLLM, neutral=1.0)
    encoder_repetition_penalty: Annotated[float, Field(gt=0)] | None = _only(neutral=1.0)
    length_penalty: float | None = _only(neutral=1.0)
    early_stopping: Annotated[JsonValue, AfterValidator(_early_stopping)] | None = _only(
        neutral=False, description='true, false or "never".'
    )
    no_repeat_ngram_size: Count | None = _only(neutral=0)
    encoder_no_repeat_ngram_size: Count | None = _only(neutral=0)
    renormalize_logits: bool | None = _only(neutral=False)
    remove_invalid_values: bool | None = _only(neutral=False)
    eos_token_id: TokenIds | None = Field(
        default=None, description="A token id or a list of them; [] stops only at max_new_tokens."
    )
    pad_token_id: Count | None = None
    bos_token_id: Count | None = None
    decoder_start_token_id: Count | None = None
    forced_bos_token_id: Count | None = _only()
    forced_eos_token_id: TokenIds | None = _only(description="A token id or a list of them.")
    suppress_tokens: list[Count] | None = _only()
    begin_suppress_tokens: list[Count] | None = _only()
    stop_strings: Annotated[JsonValue, AfterValidator(_stop_strings)] | None = Field(
        default=None, description="A non-empty string or a non-empty list of non-empty strings."
    )
    guidance_scale: float | None = _only(neutral=1.0)
    token_healing: bool | None = _only(neutral=False)
    cache_implementation: Annotated[str, AfterValidator(_not_paged)] | None = _only(
        description='Not "paged": continuous batching is the engine "transformers-continuous".'
    )
    max_cache_len: Positive | None = _only()
    prefill_chunk_size: Positive | None = _only()


def generation_problems(kwargs: Mapping[str, Any]) -> list[FieldProblem]:
    """Every problem of ``generation_kwargs`` that needs no model, as ``((key, ...), message)`` pairs: refused fields
    with the reason, declared settings out of range (an explicit null unsets a value from ``_default.json``)."""
    problems: list[FieldProblem] = [((key,), _REFUSED[key]) for key in kwargs if key in _REFUSED]
    try:
        GenerationKwargs.model_validate(dict(kwargs))
    except ValidationError as exc:
        problems.extend(collect_problems(exc, None))
    return problems


def effective_problems(effective: Mapping[str, Any], *, user: Collection[str], teacher: str) -> list[str]:
    """Every problem of an effective generation config (the user's settings over the teacher's over transformers'
    defaults, nulls left out), one line each, naming the config or the teacher as its source."""
    lines: list[str] = []
    if "max_new_tokens" not in effective:
        lines.append(
            f"{FIELD}.max_new_tokens is required: set it in the config "
            f"(the teacher's generation config at {teacher!r} does not set it)."
        )
    sampling = effective.get("do_sample") is True
    used = {k: v for k, v in effective.items() if sampling or k not in SAMPLING_KEYS}
    for loc, message in generation_problems(used):
        who = "config" if loc and loc[0] in user else "teacher's generation config"
        lines.append(f"{FIELD}.{'.'.join(map(str, loc))} ({who}): {message}.")
    beams = effective.get("num_beams", 1)
    if not lines and effective.get("stop_strings") and beams > 1:
        lines.append(
            f"{FIELD}.stop_strings cannot be combined with beam search (num_beams = {beams}): gencache records "
            "each sequence's finish step, which beam search does not expose."
        )
    return lines


def engine_refusals(engine: str, effective: Mapping[str, Any], *, defaults: Mapping[str, Any]) -> list[str]:
    """One line per effective setting ``engine`` cannot honour exactly; a setting at its neutral value (for an
    undeclared key, honoured by the static engine only: transformers' default, from ``defaults``) is never refused."""
    lines: list[str] = []
    beams = effective.get("num_beams", 1)
    if effective.get("do_sample") is True and beams > 1:
        lines.append(
            f'engine "{engine}" cannot sample each sequence from its own stream in beam search ({FIELD}.do_sample '
            f"with num_beams = {beams}: every beam of a batch draws from one generator); set do_sample false for "
            "beam search, or num_beams 1 for sampling."
        )
    for key in sorted(effective):
        field = GenerationKwargs.model_fields.get(key)
        extra: Any = field.json_schema_extra or {} if field else {}  # what _only declared
        engines = tuple(extra.get("x-engines", ALL_ENGINES)) if field else _STATIC
        neutral = extra.get("x-neutral") if field else defaults.get(key)
        value = effective[key]
        if engine in engines or (neutral is not None and value == neutral):
            continue
        which = " or ".join(f'"{name}"' for name in engines)  # at most two: every engine honours the others
        lines.append(
            f'engine "{engine}" cannot honour {FIELD}.{key} = {show(value)} exactly; remove it, or use engine '
            f"{which}, which honours it."
        )
    return lines
