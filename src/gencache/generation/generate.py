"""The generator service: tokenizer and teacher loading, the effective generation config, and batched generation.

What happens here, in the order the pipeline calls it:

1. :func:`load_tokenizer` loads the tokenizer in gencache's state (:func:`gencache.tokenizer.prepare_tokenizer`).
2. :func:`resolve_generation` builds the effective generation config *before any weights load*: the user's
   ``model.generation_kwargs``, then the teacher's ``generation_config.json``, then transformers' defaults.
   ``do_sample`` is false unless the user asks; under greedy decoding the sampling parameters are dropped; the
   result is validated strictly, and every problem is a :class:`~gencache.errors.ConfigError` (exit code 2).
3. :func:`load_teacher` loads the weights (dtype, device, revision, attention implementation) in eval mode.
4. :func:`generate_entries` generates the unique prompts in batches sorted by prompt length (longest first), left
   padded with an explicit attention mask, and yields one :class:`GeneratedEntry` at a time. A stopping criterion of
   gencache's own records, for every row, the step at which it finished and why (``eos``, ``stop_string`` or
   ``length``); the answer is cut at that step, never by token value, so fill tokens never enter an answer.

Beam search (``num_beams > 1``) is supported without stop strings: a beam hypothesis is final at its first EOS
token, so beam outputs are cut after their first EOS id (``eos``) or kept whole (``length``). Stop strings with
beams are rejected, because transformers may reorder and finalise hypotheses at steps gencache cannot observe.

torch and transformers are imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import math
import platform
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gencache.artifact.format import DTYPES, FINISH_REASONS
from gencache.canonical import is_finite_number, is_int
from gencache.data.config import GENERATION_UNSUPPORTED as _UNSUPPORTED_KEYS
from gencache.data.config import LOGIT_FIELDS as LOGITS_KEYS
from gencache.data.config import NO_LOGITS_MESSAGE
from gencache.errors import ConfigError, GenerationError, first_line
from gencache.tokenizer import prepare_tokenizer

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig

    from gencache.progress import Progress

FIELD = "model.generation_kwargs"

FINISH_EOS, FINISH_STOP_STRING, FINISH_LENGTH = FINISH_REASONS
_REASON_CODES = {1: FINISH_EOS, 2: FINISH_STOP_STRING, 3: FINISH_LENGTH}

#: Parameters used only when sampling; dropped under greedy decoding.
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "top_h", "typical_p", "epsilon_cutoff", "eta_cutoff")
#: Parameters used only by beam search; dropped when ``num_beams`` is 1.
BEAM_KEYS = ("early_stopping", "length_penalty")

# Type rules for user values: integer fields with their minimum, finite-number fields, and boolean fields.
_INT_FIELDS: dict[str, int] = {
    "max_new_tokens": 1, "min_new_tokens": 0, "min_length": 0, "num_beams": 1, "num_return_sequences": 1,
    "top_k": 0, "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0, "pad_token_id": 0,
    "bos_token_id": 0, "decoder_start_token_id": 0, "forced_bos_token_id": 0, "max_cache_len": 1,
    "prefill_chunk_size": 1,
}  # fmt: skip
_FLOAT_FIELDS = (
    "temperature", "top_p", "min_p", "top_h", "typical_p", "epsilon_cutoff", "eta_cutoff", "repetition_penalty",
    "encoder_repetition_penalty", "length_penalty", "guidance_scale",
)  # fmt: skip
_BOOL_FIELDS = ("do_sample", "use_cache", "renormalize_logits", "remove_invalid_values", "token_healing",
                "disable_compile")  # fmt: skip
# Ranges checked for the sampling parameters that are kept (transformers would otherwise fail after weights load).
_SAMPLING_RANGES: dict[str, tuple[float, bool, float, bool]] = {
    # name: (low, low inclusive, high, high inclusive)
    "temperature": (0.0, False, math.inf, False),
    "top_p": (0.0, False, 1.0, True),
    "min_p": (0.0, True, 1.0, True),
    "top_h": (0.0, False, 1.0, True),
    "typical_p": (0.0, False, 1.0, True),
    "epsilon_cutoff": (0.0, True, 1.0, False),
    "eta_cutoff": (0.0, True, 1.0, False),
    "repetition_penalty": (0.0, False, math.inf, False),
}

_ALLOWED_MODES = ("greedy_search", "sample", "beam_search", "beam_sample")


@dataclass(frozen=True)
class EffectiveGeneration:
    """The generation settings a run uses, resolved and validated before any weights load.

    ``config`` is what ``model.generate`` receives; ``kwargs`` is the same settings as a JSON-able dict for
    ``resolved_config.json`` (every non-null effective field; sampling parameters are absent under greedy decoding).
    ``eos_token_ids`` is the generation EOS list (possibly empty), ``dropped`` names the settings that were set by
    the user or the teacher but dropped because the decoding mode does not use them.
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


@dataclass(frozen=True)
class GeneratedEntry:
    """The teacher's answers for one unique prompt: 1-D int64 CPU tensors, decoded texts and finish reasons."""

    key: str
    sequences: tuple[torch.Tensor, ...]
    texts: tuple[str, ...]
    finish_reasons: tuple[str, ...]

    @property
    def num_tokens(self) -> int:
        return sum(int(seq.numel()) for seq in self.sequences)


# ---------------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------------
def _hf() -> Any:
    """The transformers module, typed ``Any`` (its own annotations are incomplete under mypy strict)."""
    import transformers

    return transformers


def _revision_kwargs(revision: str | None) -> dict[str, Any]:
    return {"revision": revision} if revision else {}


def load_tokenizer(tokenizer_path: str, *, revision: str | None = None) -> Any:
    """``AutoTokenizer.from_pretrained`` then :func:`prepare_tokenizer` (left padding, pad falls back to EOS)."""
    try:
        tokenizer = _hf().AutoTokenizer.from_pretrained(tokenizer_path, **_revision_kwargs(revision))
    except Exception as exc:
        raise ConfigError(
            f"model.tokenizer_path: cannot load a tokenizer from {tokenizer_path!r}"
            f"{f' at revision {revision!r}' if revision else ''}: {first_line(exc)}"
        ) from exc
    return prepare_tokenizer(tokenizer)


def torch_dtype(dtype: str) -> torch.dtype:
    """The torch dtype of a config dtype string (``bfloat16``, ``float16``, ``float32``)."""
    import torch

    if dtype not in DTYPES:
        raise ConfigError(f"model.dtype must be one of {', '.join(DTYPES)}, got {dtype!r}.")
    result: torch.dtype = getattr(torch, dtype)
    return result


def load_teacher(
    model_path: str,
    *,
    dtype: str,
    device: str,
    revision: str | None = None,
    attn_implementation: str | None = None,
) -> Any:
    """Load the teacher for generation: ``AutoModelForCausalLM`` with dtype, device, revision and attention
    implementation, in ``eval()`` mode. ``device="auto"`` uses ``device_map="auto"`` (needs ``accelerate``); other
    devices use ``device_map=<device>`` when ``accelerate`` is installed, else load then move the model."""
    import torch

    kwargs: dict[str, Any] = {"dtype": torch_dtype(dtype), "low_cpu_mem_usage": True, **_revision_kwargs(revision)}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    has_accelerate = importlib.util.find_spec("accelerate") is not None
    if device == "auto":
        if not has_accelerate:
            raise GenerationError("model.device 'auto' needs the accelerate package; install it or name a device.")
        kwargs["device_map"] = "auto"
        target = None
    else:
        try:
            target = torch.device(device)
        except (RuntimeError, ValueError) as exc:
            raise ConfigError(f"model.device: {device!r} is not a torch device ({first_line(exc)}).") from exc
        if has_accelerate:
            kwargs["device_map"] = target
    try:
        model: Any = _hf().AutoModelForCausalLM.from_pretrained(model_path, **kwargs)
        if target is not None and "device_map" not in kwargs:
            model = model.to(target)
    except torch.OutOfMemoryError as exc:
        raise GenerationError(
            f"Out of memory while loading the teacher {model_path!r} in {dtype} on {device}: {first_line(exc)}"
        ) from exc
    except Exception as exc:
        raise GenerationError(
            f"Cannot load the teacher {model_path!r} ({dtype}, device {device}"
            f"{f', revision {revision}' if revision else ''}): {first_line(exc)}"
        ) from exc
    model.eval()
    return model


def model_device(model: Any) -> torch.device:
    """Where inputs go: ``model.device`` when it is a ``torch.device``, else the first parameter's device."""
    import torch

    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    first: torch.device = next(model.parameters()).device
    return first


def seed_everything(seed: int) -> None:
    """Seed Python's ``random`` and torch (which seeds every CUDA device too)."""
    import torch

    random.seed(seed)
    torch.manual_seed(seed)


# ---------------------------------------------------------------------------------------------------------------
# Effective generation config
# ---------------------------------------------------------------------------------------------------------------
@functools.cache
def _known_generation_fields() -> frozenset[str]:
    return frozenset(name for name in vars(_hf().GenerationConfig()) if not name.startswith("_"))


def _token_ids(name: str, value: Any, *, source: str) -> tuple[int, ...]:
    items = value if isinstance(value, list | tuple) else [value]
    if not all(is_int(item) and item >= 0 for item in items):
        raise ConfigError(f"{name} ({source}) must be a non-negative integer or a list of them, got {value!r}.")
    return tuple(int(item) for item in items)


def _check_user_value(key: str, value: Any) -> Any:
    name = f"{FIELD}.{key}"
    if key in _INT_FIELDS:
        if not is_int(value):
            raise ConfigError(f"{name} must be an integer, got {value!r}.")
        if value < _INT_FIELDS[key]:
            raise ConfigError(f"{name} must be at least {_INT_FIELDS[key]}, got {value!r}.")
    elif key in _FLOAT_FIELDS:
        if not is_finite_number(value):
            raise ConfigError(f"{name} must be a finite number, got {value!r}.")
    elif key in _BOOL_FIELDS:
        if not isinstance(value, bool):
            raise ConfigError(f"{name} must be true or false, got {value!r}.")
    elif key == "early_stopping":
        if not (isinstance(value, bool) or value == "never"):
            raise ConfigError(f'{name} must be true, false or "never", got {value!r}.')
    elif key in ("eos_token_id", "forced_eos_token_id"):
        return list(_token_ids(name, value, source="config"))
    elif key in ("suppress_tokens", "begin_suppress_tokens"):
        if not isinstance(value, list):
            raise ConfigError(f"{name} must be a list of token ids, got {value!r}.")
        return list(_token_ids(name, value, source="config"))
    elif key == "stop_strings":
        return list(_stop_strings(value, source="config"))
    elif key == "cache_implementation":
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a string, got {value!r}.")
        if value == "paged":
            raise ConfigError(f'{name} "paged" selects continuous batching, which gencache does not use.')
    return value


def _stop_strings(value: Any, *, source: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(item, str) and item for item in items):
        raise ConfigError(
            f"{FIELD}.stop_strings ({source}) must be a non-empty string or a list of them, got {value!r}."
        )
    return tuple(dict.fromkeys(items))


def _user_kwargs(generation_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(generation_kwargs, Mapping):
        raise ConfigError(f"{FIELD} must be an object, got {type(generation_kwargs).__name__}.")
    known = _known_generation_fields()
    for key in generation_kwargs:
        if not isinstance(key, str):
            raise ConfigError(f"{FIELD} keys must be strings, got {key!r}.")
        if key in LOGITS_KEYS:
            raise ConfigError(f"{FIELD}.{key}: {NO_LOGITS_MESSAGE}")
    unknown = sorted(key for key in generation_kwargs if key not in known)
    if unknown:
        names = ", ".join(f"{FIELD}.{key}" for key in unknown)
        raise ConfigError(f"Unknown generation setting{'s' if len(unknown) > 1 else ''}: {names}.")
    user: dict[str, Any] = {}
    for key, value in generation_kwargs.items():
        if key in _UNSUPPORTED_KEYS:
            raise ConfigError(f"{FIELD}.{key} is not supported: {_UNSUPPORTED_KEYS[key]}.")
        if value is None:  # null means "not set": the teacher's value or transformers' default applies
            continue
        user[key] = _check_user_value(key, value)
    return user


def read_teacher_generation_config(model_path: str, *, revision: str | None = None) -> dict[str, Any]:
    """The teacher's generation settings as a dict of known, non-null fields, read without weights: from
    ``generation_config.json`` when the model has one, otherwise what transformers derives from ``config.json``
    (as ``from_pretrained`` does). Values are not validated here; :func:`resolve_generation` does that."""
    hf = _hf()
    where = f"model.model_path {model_path!r}{f' at revision {revision!r}' if revision else ''}"
    try:
        path = hf.utils.cached_file(
            model_path, "generation_config.json", _raise_exceptions_for_missing_entries=False,
            **_revision_kwargs(revision),
        )  # fmt: skip
    except Exception as exc:
        raise ConfigError(f"Cannot read the teacher's generation config from {where}: {first_line(exc)}") from exc
    try:
        if path is not None:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
            if not isinstance(data, dict):
                raise ValueError("generation_config.json does not hold a JSON object")
        else:
            model_config = hf.AutoConfig.from_pretrained(model_path, **_revision_kwargs(revision))
            data = hf.GenerationConfig.from_model_config(model_config).to_dict()
    except Exception as exc:
        raise ConfigError(f"Cannot read the teacher's configuration from {where}: {first_line(exc)}") from exc
    known = _known_generation_fields()
    return {key: value for key, value in data.items() if key in known and value is not None}


def _check_range(key: str, value: Any, *, source: str) -> None:
    low, low_inclusive, high, high_inclusive = _SAMPLING_RANGES[key]
    if not is_finite_number(value):
        raise ConfigError(f"{FIELD}.{key} ({source}) must be a finite number, got {value!r}.")
    ok_low = value >= low if low_inclusive else value > low
    ok_high = value <= high if high_inclusive else value < high
    if not (ok_low and ok_high):
        lo = "[" if low_inclusive else "("
        hi = "]" if high_inclusive else ")"
        raise ConfigError(f"{FIELD}.{key} ({source}) must be in {lo}{low}, {high}{hi}, got {value!r}.")


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
        if key not in LOGITS_KEYS and key not in _UNSUPPORTED_KEYS
    }
    teacher_values.pop("do_sample", None)

    merged: dict[str, Any] = dict(_hf().GenerationConfig._get_default_generation_params())
    merged.update(teacher_values)
    merged.update(user)
    merged["do_sample"] = bool(user.get("do_sample", False))
    merged["pad_token_id"] = user.get("pad_token_id", getattr(tokenizer, "pad_token_id", None))
    for key in ("max_length", *LOGITS_KEYS, *_UNSUPPORTED_KEYS):  # inert defaults of unsupported features
        merged.pop(key, None)
    merged = {key: value for key, value in merged.items() if value is not None}

    # max_new_tokens: required, a positive integer, from the user or the teacher.
    if "max_new_tokens" not in merged:
        raise ConfigError(
            f"{FIELD}.max_new_tokens is required: set it in the config "
            f"(the teacher's generation config at {model_path!r} does not set it)."
        )
    max_new_tokens = merged["max_new_tokens"]
    if not is_int(max_new_tokens) or max_new_tokens < 1:
        source = "config" if "max_new_tokens" in user else "teacher's generation_config.json"
        raise ConfigError(f"{FIELD}.max_new_tokens ({source}) must be a positive integer, got {max_new_tokens!r}.")

    do_sample: bool = merged["do_sample"]
    num_beams = merged.get("num_beams", 1)
    if not is_int(num_beams) or num_beams < 1:
        raise ConfigError(f"{FIELD}.num_beams must be a positive integer, got {num_beams!r}.")
    num_return_sequences = merged.get("num_return_sequences", 1)
    if not is_int(num_return_sequences) or num_return_sequences < 1:
        raise ConfigError(f"{FIELD}.num_return_sequences must be a positive integer, got {num_return_sequences!r}.")
    if num_return_sequences > 1 and not do_sample and num_beams == 1:
        raise ConfigError(
            f"{FIELD}.num_return_sequences = {num_return_sequences} needs sampling (do_sample: true) or beam search "
            "(num_beams > 1): greedy decoding returns one sequence per prompt."
        )
    if num_beams > 1 and num_return_sequences > num_beams:
        raise ConfigError(
            f"{FIELD}.num_return_sequences ({num_return_sequences}) cannot exceed num_beams ({num_beams})."
        )

    dropped: list[str] = []
    explicit = set(user) | set(teacher_values)
    if not do_sample:
        for key in SAMPLING_KEYS:
            if key in merged:
                merged.pop(key)
                if key in explicit:
                    dropped.append(key)
    else:
        for key in SAMPLING_KEYS:
            source = "config" if key in user else "teacher's generation config"
            if key in _SAMPLING_RANGES and key in merged:
                _check_range(key, merged[key], source=source)
            elif key == "top_k" and key in merged and not (is_int(merged[key]) and merged[key] >= 0):
                raise ConfigError(f"{FIELD}.top_k ({source}) must be a non-negative integer, got {merged[key]!r}.")
    if "repetition_penalty" in merged:
        source = "config" if "repetition_penalty" in user else "teacher's generation config"
        _check_range("repetition_penalty", merged["repetition_penalty"], source=source)
    if num_beams == 1:
        neutral = {"early_stopping": False, "length_penalty": 1.0}
        for key in BEAM_KEYS:
            if key in merged:
                value = merged.pop(key)
                if key in explicit and value != neutral[key]:
                    dropped.append(key)

    eos_source = "config" if "eos_token_id" in user else "teacher's generation config"
    eos_token_ids = _token_ids(f"{FIELD}.eos_token_id", merged.get("eos_token_id", []), source=eos_source)
    if "eos_token_id" in merged:
        merged["eos_token_id"] = list(eos_token_ids)
    stop_strings: tuple[str, ...] = ()
    if "stop_strings" in merged:
        source = "config" if "stop_strings" in user else "teacher's generation config"
        stop_strings = _stop_strings(merged["stop_strings"], source=source)
        merged["stop_strings"] = list(stop_strings)
    if stop_strings and num_beams > 1:
        raise ConfigError(
            f"{FIELD}.stop_strings cannot be combined with beam search (num_beams = {num_beams}): gencache records "
            "each sequence's finish step, which beam search does not expose."
        )
    if merged.get("cache_implementation") == "paged":
        raise ConfigError(
            f'{FIELD}.cache_implementation "paged" selects continuous batching, which gencache does not use.'
        )

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
        max_new_tokens=int(max_new_tokens),
        num_return_sequences=int(num_return_sequences),
        do_sample=do_sample,
        num_beams=int(num_beams),
        dropped=tuple(dropped),
    )


def _build_config(merged: dict[str, Any]) -> GenerationConfig:
    try:
        config: GenerationConfig = _hf().GenerationConfig(**merged)
        config.validate(strict=True)
    except (ValueError, TypeError) as exc:
        message = " ".join(str(exc).split())
        raise ConfigError(f"{FIELD}: invalid generation settings: {message}") from exc
    return config


# ---------------------------------------------------------------------------------------------------------------
# Batching
# ---------------------------------------------------------------------------------------------------------------
def plan_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices of the prompts sorted by length, longest first (ties keep their input order), in chunks."""
    if not is_int(batch_size) or batch_size < 1:
        raise ConfigError(f"gen_batch_size must be a positive integer, got {batch_size!r}.")
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def batching_policy(batch_size: int) -> dict[str, Any]:
    """The batching facts recorded in ``resolved_config.json`` (batched half-precision greedy output can depend
    on batch composition, so they are part of the provenance)."""
    return {
        "order": "length-sorted-longest-first",
        "sort": "stable, by prompt token count, descending",
        "batch_size": batch_size,
        "unit": "unique samples",
        "padding_side": "left",
        "attention_mask": "explicit",
        "answer_cut": "recorded finish step per row (eos inclusive, stop_string inclusive, length)",
    }


def padding_stats(lengths: Sequence[int], batch_size: int) -> dict[str, Any]:
    """Prompt padding of the planned batches: pad cells over all prompt cells (the padding waste)."""
    total = padded = 0
    for batch in plan_batches(lengths, batch_size):
        width = max(lengths[index] for index in batch)
        total += width * len(batch)
        padded += sum(width - lengths[index] for index in batch)
    return {"prompt_cells": total, "pad_cells": padded, "pad_fraction": (padded / total) if total else 0.0}


def runtime_info(model: Any) -> dict[str, Any]:
    """dtype, attention implementation, device and library versions, for ``resolved_config.json``."""
    import torch

    from gencache import __version__

    device = model_device(model)
    if device.type == "cuda":
        device_name = torch.cuda.get_device_name(device)
    else:
        device_name = f"{platform.machine() or 'unknown'} CPU"
    dtype = getattr(model, "dtype", None)
    config = getattr(model, "config", None)
    device_map = getattr(model, "hf_device_map", None)
    return {
        "dtype": str(dtype).removeprefix("torch.") if dtype is not None else None,
        "attn_implementation": getattr(config, "_attn_implementation", None),
        "device": str(device),
        "device_name": device_name,
        "device_map": {str(k): str(v) for k, v in device_map.items()} if isinstance(device_map, dict) else None,
        "gencache": __version__,
        "torch": torch.__version__,
        "transformers": _hf().__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "python": platform.python_version(),
    }


# ---------------------------------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------------------------------
class FinishRecorder:
    """A stopping criterion that records, per row, the step at which it finished and why.

    It is called by ``generate`` after every decoding step with the whole ``input_ids`` (prompt width plus the
    tokens generated so far) and examines each new position once. A still-open row finishes at a step when its
    token is in the EOS list (``eos``), when the decoded generated tail now contains a stop string (``stop_string``,
    through the token that completed it), or when ``max_new_tokens`` tokens exist (``length``). It returns True for
    every finished row, so transformers stops once all rows are finished. Lengths count generated tokens kept.

    It deliberately has no ``eos_token_id`` attribute, which transformers would read as "an EOS criterion".
    """

    def __init__(
        self,
        *,
        prompt_width: int,
        rows: int,
        eos_token_ids: Sequence[int],
        stop_strings: Sequence[str],
        tokenizer: Any,
        max_new_tokens: int,
        device: torch.device,
    ) -> None:
        import torch

        self.prompt_width = prompt_width
        self.max_new_tokens = max_new_tokens
        self.stop_strings = tuple(stop_strings)
        self.tokenizer = tokenizer
        # Enough tokens to hold any stop string: byte-level tokens carry at least one byte each; the margin covers
        # a partial UTF-8 character or a decoder-stripped leading space at the start of the window.
        self.window = max((len(s.encode("utf-8")) for s in self.stop_strings), default=0) + 4
        self.lengths = torch.zeros(rows, dtype=torch.long, device=device)
        self.codes = torch.zeros(rows, dtype=torch.uint8, device=device)
        self.eos = torch.tensor(list(eos_token_ids), dtype=torch.long, device=device) if eos_token_ids else None
        self.checked = 0

    def _finish(self, hit: torch.Tensor, step: int, code: int) -> None:
        import torch

        self.lengths = torch.where(hit, step, self.lengths)
        self.codes = torch.where(hit, code, self.codes)

    def _stop_string_hits(self, input_ids: torch.Tensor, position: int) -> torch.Tensor | None:
        import torch

        open_rows = (self.lengths == 0).nonzero().flatten().tolist()
        if not open_rows:
            return None
        start = self.prompt_width + max(0, position + 1 - self.window)
        end = self.prompt_width + position + 1
        tails = input_ids[open_rows, start:end].tolist()
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=False)
        hits = [row for row, text in zip(open_rows, texts, strict=True) if any(s in text for s in self.stop_strings)]
        if not hits:
            return None
        mask = torch.zeros_like(self.lengths, dtype=torch.bool)
        mask[hits] = True
        return mask

    def __call__(self, input_ids: torch.Tensor, scores: Any = None, **kwargs: Any) -> torch.Tensor:
        import torch

        generated = input_ids.shape[1] - self.prompt_width
        for position in range(self.checked, generated):
            step = position + 1
            if self.eos is not None:
                token = input_ids[:, self.prompt_width + position]
                self._finish((self.lengths == 0) & torch.isin(token, self.eos), step, 1)
            if self.stop_strings:
                hit = self._stop_string_hits(input_ids, position)
                if hit is not None:
                    self._finish(hit & (self.lengths == 0), step, 2)
            if step >= self.max_new_tokens:
                self._finish(self.lengths == 0, step, 3)
        self.checked = max(self.checked, generated)
        return self.lengths > 0

    def results(self, generated_width: int) -> tuple[list[int], list[str]]:
        """Per row: tokens to keep and finish reason. Rows never recorded (generation ended for another reason)
        keep everything generated and finish by ``length``."""
        lengths = self.lengths.tolist()
        codes = self.codes.tolist()
        out_lengths: list[int] = []
        reasons: list[str] = []
        for length, code in zip(lengths, codes, strict=True):
            if length == 0:
                out_lengths.append(generated_width)
                reasons.append(FINISH_LENGTH)
            else:
                out_lengths.append(int(length))
                reasons.append(_REASON_CODES[int(code)])
        return out_lengths, reasons


def cut_at_first_eos(generated: torch.Tensor, eos_token_ids: Sequence[int]) -> tuple[list[int], list[str]]:
    """Beam-search cut: a beam hypothesis is final at its first EOS token, so keep through the first EOS id of each
    row (``eos``) or the whole row (``length``)."""
    import torch

    rows, width = generated.shape
    if not eos_token_ids or width == 0:
        return [width] * rows, [FINISH_LENGTH] * rows
    eos = torch.tensor(list(eos_token_ids), dtype=generated.dtype, device=generated.device)
    hits = torch.isin(generated, eos)
    found = hits.any(dim=1).tolist()
    first = hits.to(torch.int8).argmax(dim=1).tolist()
    lengths = [int(f) + 1 if ok else width for f, ok in zip(first, found, strict=True)]
    reasons = [FINISH_EOS if ok else FINISH_LENGTH for ok in found]
    return lengths, reasons


def _call_config(generation: EffectiveGeneration) -> GenerationConfig:
    """The config ``generate`` receives: gencache's recorder decides stop strings (outside beam search)."""
    config = copy.deepcopy(generation.config)
    if generation.num_beams == 1:
        config.stop_strings = None
    return config


def _generate_batch(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    config: GenerationConfig,
    recorder: FinishRecorder | None,
) -> torch.Tensor:
    """One ``model.generate`` call with ``config`` as the model's generation config too, so transformers cannot
    re-fill dropped settings (the teacher's sampling parameters under greedy decoding) from the teacher."""
    import torch

    previous = model.generation_config
    model.generation_config = config
    try:
        with torch.inference_mode():
            output = model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                generation_config=config,
                stopping_criteria=_hf().StoppingCriteriaList([recorder]) if recorder is not None else None,
            )
    finally:
        model.generation_config = previous
    sequences = output if isinstance(output, torch.Tensor) else output.sequences
    return sequences


def generate_entries(
    model: Any,
    tokenizer: Any,
    generation: EffectiveGeneration,
    prompts: Sequence[tuple[str, Sequence[int]]],
    *,
    batch_size: int,
    progress: Progress | None = None,
) -> Iterator[GeneratedEntry]:
    """Generate every prompt and yield one :class:`GeneratedEntry` per prompt, in batch order.

    ``prompts`` are ``(key, input_ids)`` of unique samples. Batches are planned longest prompt first
    (:func:`plan_batches`), left padded with an explicit attention mask (padding is never inferred from pad id
    equality, so prompts may contain the pad id). Each row is cut at the step the :class:`FinishRecorder` recorded.
    Only the yielded entry's tensors are staged on CPU; ``progress`` (if given) is started with the number of
    prompts and advanced after each entry has been consumed. A CUDA out-of-memory error becomes a
    :class:`GenerationError` naming the batch.
    """
    import torch

    checked: list[tuple[str, list[int]]] = []
    for key, ids in prompts:
        token_ids = [int(token) for token in ids]
        if not token_ids:
            raise GenerationError(f"The prompt of sample {key} has no tokens.")
        checked.append((key, token_ids))
    batches = plan_batches([len(ids) for _, ids in checked], batch_size)
    device = model_device(model)
    per_prompt = generation.num_return_sequences
    pad_id = generation.config.pad_token_id
    if pad_id is None:
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    config = _call_config(generation)
    beams = generation.num_beams > 1
    if progress is not None:
        progress.start(len(checked))

    for batch_index, batch in enumerate(batches):
        width = max(len(checked[index][1]) for index in batch)
        input_ids = torch.full((len(batch), width), int(pad_id), dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, index in enumerate(batch):
            ids = checked[index][1]
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids) :] = 1
        input_ids = input_ids.to(device)
        attention_mask = attention_mask.to(device)
        recorder = None
        if not beams:
            recorder = FinishRecorder(
                prompt_width=width,
                rows=len(batch) * per_prompt,
                eos_token_ids=generation.eos_token_ids,
                stop_strings=generation.stop_strings,
                tokenizer=tokenizer,
                max_new_tokens=generation.max_new_tokens,
                device=device,
            )
        described = (
            f"batch {batch_index} ({len(batch)} prompts x {per_prompt} sequences, prompt width {width} tokens, "
            f"max_new_tokens {generation.max_new_tokens})"
        )
        try:
            sequences = _generate_batch(model, input_ids, attention_mask, config, recorder)
        except torch.OutOfMemoryError as exc:
            del input_ids, attention_mask
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            raise GenerationError(
                f"Out of memory generating {described} on {device}; try a smaller gen_batch_size (now {batch_size})."
            ) from exc
        except Exception as exc:
            raise GenerationError(f"Generation failed in {described}: {first_line(exc)}") from exc
        generated = sequences[:, width:]
        if generated.shape[0] != len(batch) * per_prompt:
            raise GenerationError(
                f"Generation returned {generated.shape[0]} rows for {described}; expected {len(batch) * per_prompt}."
            )
        if recorder is not None:
            lengths, reasons = recorder.results(generated.shape[1])
        else:
            lengths, reasons = cut_at_first_eos(generated, generation.eos_token_ids)
        del sequences, input_ids, attention_mask

        for position, index in enumerate(batch):
            rows = range(position * per_prompt, (position + 1) * per_prompt)
            seqs: list[torch.Tensor] = []
            for row in rows:
                if lengths[row] < 1:
                    raise GenerationError(f"Row {row} of {described} generated no tokens.")
                seqs.append(generated[row, : lengths[row]].to(device="cpu", dtype=torch.int64, copy=True))
            texts = tuple(tokenizer.decode(seq.tolist(), skip_special_tokens=False) for seq in seqs)
            entry = GeneratedEntry(
                key=checked[index][0],
                sequences=tuple(seqs),
                texts=texts,
                finish_reasons=tuple(reasons[row] for row in rows),
            )
            tokens = entry.num_tokens
            yield entry
            del entry, seqs
            if progress is not None:
                progress.advance(1, tokens)
        del generated


__all__ = [
    "BEAM_KEYS",
    "FINISH_REASONS",
    "NO_LOGITS_MESSAGE",
    "SAMPLING_KEYS",
    "EffectiveGeneration",
    "FinishRecorder",
    "GeneratedEntry",
    "batching_policy",
    "cut_at_first_eos",
    "generate_entries",
    "load_teacher",
    "load_tokenizer",
    "model_device",
    "padding_stats",
    "plan_batches",
    "read_teacher_generation_config",
    "resolve_generation",
    "runtime_info",
    "seed_everything",
    "torch_dtype",
]
