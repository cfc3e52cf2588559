"""The teacher: what can be known about it before its weights load (its files, its vocabulary, its attention
implementation; each problem a :class:`ConfigError` naming the file or the setting), loading it and its tokenizer,
and the runtime and determinism facts that ``resolved_config.json`` records.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import platform
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gencache.core.errors import ConfigError, GenerationError, first_line
from gencache.core.tokenizer import prepare_tokenizer
from gencache.core.version import __version__

if TYPE_CHECKING:
    from transformers import GenerationConfig


def hf() -> Any:
    """The transformers module, typed ``Any`` (its own annotations are incomplete under mypy strict)."""
    import transformers

    return transformers


def load_tokenizer(tokenizer_path: str, *, revision: str | None = None) -> Any:
    """``AutoTokenizer.from_pretrained`` then :func:`prepare_tokenizer` (left padding, pad falls back to EOS)."""
    try:
        tokenizer = hf().AutoTokenizer.from_pretrained(tokenizer_path, revision=revision)
    except Exception as exc:
        raise ConfigError(
            f"model.tokenizer_path: cannot load a tokenizer from {tokenizer_path!r}"
            f"{f' at revision {revision!r}' if revision else ''}: {first_line(exc)}"
        ) from exc
    return prepare_tokenizer(tokenizer)


@contextlib.contextmanager
def no_loading_bar() -> Iterator[None]:
    """No "Loading weights" bar in this block (transformers has no switch per call), and transformers' and
    huggingface_hub's process-wide switches as they were afterwards, so a library call draws nothing."""
    bars = hf().utils.logging
    if not bars.is_progress_bar_enabled():
        yield
        return
    hub: Any = importlib.import_module("huggingface_hub.utils")
    hub_disabled = bool(hub.are_progress_bars_disabled())
    bars.disable_progress_bar()
    try:
        yield
    finally:
        bars.enable_progress_bar()  # huggingface_hub's bars too
        if hub_disabled:
            hub.disable_progress_bars()


def load_teacher(
    model_path: str,
    *,
    dtype: str,
    device: str,
    revision: str | None = None,
    attn_implementation: str | None = None,
    generation_config: GenerationConfig | None = None,
) -> Any:
    """Load the teacher for generation in ``eval()`` mode, placed by accelerate. ``generation_config`` (the run's
    effective one) becomes the model's, so the teacher's ``generation_config.json`` is not read a second time."""
    import torch

    try:
        with no_loading_bar():
            model: Any = hf().AutoModelForCausalLM.from_pretrained(
                model_path,
                dtype=getattr(torch, dtype),
                revision=revision,
                device_map="auto" if device == "auto" else torch.device(device),
                generation_config=generation_config,
                attn_implementation=attn_implementation,
            )
    except Exception as exc:  # out of memory too
        raise GenerationError(
            f"Cannot load the teacher {model_path!r} ({dtype}, device {device}"
            f"{f', revision {revision}' if revision else ''}): {first_line(exc)}"
        ) from exc
    return model.eval()


def runtime_info(model: Any) -> dict[str, Any]:
    """dtype, attention implementation, device and library versions, for ``resolved_config.json``."""
    import torch

    device = model.device
    device_map = getattr(model, "hf_device_map", None)
    return {
        "dtype": str(model.dtype).removeprefix("torch."),
        "attn_implementation": model.config._attn_implementation,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"{platform.machine() or 'unknown'} CPU",
        "device_map": {str(k): str(v) for k, v in device_map.items()} if isinstance(device_map, dict) else None,
        **library_versions(),
    }


def library_versions() -> dict[str, Any]:
    import torch

    return {
        "gencache": __version__,
        "torch": torch.__version__,
        "transformers": hf().__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "python": platform.python_version(),
    }


# -- determinism: in half precision on a GPU the logits of a row depend on the batch shape around it unless the
# kernels are batch-invariant; these facts are what an audit's reader needs to judge a difference ------------------
def gpu_of(device: str) -> tuple[str | None, str | None]:
    """The name and compute capability (``major.minor``) of the CUDA GPU of ``device``, or Nones without one."""
    import torch

    if not device.startswith(("cuda", "auto")) or not torch.cuda.is_available():
        return None, None
    index = (torch.device(device).index if device.startswith("cuda") else None) or 0
    major, minor = torch.cuda.get_device_capability(index)
    return torch.cuda.get_device_name(index), f"{major}.{minor}"


def determinism_facts(device: str, **engine_facts: Any) -> dict[str, Any]:
    """The determinism block of ``resolved_config.json``'s runtime: the engine's own facts and the process's."""
    import torch

    gpu_name, capability = gpu_of(device)
    return {
        "torch_deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "torch_deterministic_warn_only": bool(torch.is_deterministic_algorithms_warn_only_enabled()),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        **engine_facts,
        "gpu_name": gpu_name,
        "gpu_compute_capability": capability,
    }


# -- the teacher's files, before any weights load --------------------------------------------------------------
#: The attention implementations transformers knows by name (a hub kernel and a ``paged|...`` form are accepted too).
ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention", "flash_attention_<N>")
_FLASH = re.compile(r"^flash_attention_\d+\Z")

#: A tokenizer with fewer tokens than this share of the teacher's embedding rows belongs to another model (real
#: models pad their embedding by well under 1%).
MIN_VOCAB_COVERAGE = 0.9

#: How many tokens a tokenizer may have beyond the embedding (at least; 1% of it for large vocabularies): some
#: models ship special tokens the model never sees (Gemma 3: 262,145 tokens, 262,144 rows).
MAX_EXTRA_TOKENS = 64

#: The endings of the generation settings that hold token ids (``*_token_id``, ``*suppress_tokens``, ``bad_words_ids``).
TOKEN_ID_SETTINGS = ("_token_id", "suppress_tokens", "_ids")

#: Where transformers looks for weights, in its order: the first that exists is what loads.
_WEIGHT_NAMES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def read_json_file(path: str | Path) -> Any:
    """One of the teacher's (or tokenizer's) JSON files, parsed; a :class:`ConfigError` naming the file (and the
    line and column) when it cannot be."""
    try:
        return json.loads(Path(path).read_bytes())
    except OSError as error:
        raise ConfigError(f"The teacher's file {path} cannot be read: {error.strerror or error}.") from None
    except ValueError as error:  # not JSON, or not UTF-8 text
        raise ConfigError(f"The teacher's file {path} is not valid JSON ({error}); fix or re-download it.") from None


def max_positions(config: Any) -> int | None:
    """The longest sequence a teacher's ``config.json`` admits (its own or its text model's), or None."""
    for candidate in (config, getattr(config, "text_config", None)):
        for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx"):
            value = getattr(candidate, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def check_teacher_weights(model_path: str) -> str:
    """Every weight file of a local teacher directory exists, and each safetensors file is whole (safetensors
    checks that from the header). A hub id is checked when it downloads."""
    from safetensors import safe_open

    directory = Path(model_path).expanduser()
    if not directory.is_dir():
        return "hub model: weights are checked as they download"
    found = next((directory / name for name in _WEIGHT_NAMES if (directory / name).is_file()), None)
    if found is None:
        raise ConfigError(
            f"model.model_path {directory} has no weights ({', '.join(_WEIGHT_NAMES)}); point it at a saved model."
        )
    files = [found]
    if found.name.endswith(".index.json"):
        try:
            files = [directory / shard for shard in sorted(set(read_json_file(found)["weight_map"].values()))]
        except (KeyError, TypeError, AttributeError) as error:
            raise ConfigError(f"Teacher weight index {found} is unreadable ({error}); re-download the model.") from None
    for path in files:
        if not path.is_file():
            raise ConfigError(f"Teacher weight file {path} is missing; re-download or re-save the model.")
        if path.suffix == ".safetensors":
            try:
                with safe_open(path, "np"):
                    pass
            except Exception as error:
                raise ConfigError(
                    f"Teacher weight file {path} is truncated or not safetensors ({first_line(error)}); re-download it."
                ) from None
    total = sum(path.stat().st_size for path in files)
    return f"{len(files)} weight file(s), {total / 2**20:,.1f} MiB, complete"


def _ids(value: Any) -> Iterator[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _ids(item)


def check_vocabulary(tokenizer: Any, vocab_size: int, settings: Mapping[str, Any]) -> str:
    """The tokenizer belongs to the teacher (no id beyond its embedding, not far fewer tokens than it has) and
    every token id among the effective generation ``settings`` is inside the embedding."""
    tokens = len(tokenizer)
    if not MIN_VOCAB_COVERAGE * vocab_size <= tokens <= vocab_size + max(MAX_EXTRA_TOKENS, vocab_size // 100):
        raise ConfigError(
            f"model.tokenizer_path: the tokenizer has {tokens:,} tokens but the teacher's embedding has {vocab_size:,} "
            "rows (vocab_size in config.json): it is another model's tokenizer; use the teacher's tokenizer."
        )
    for name in sorted(key for key in settings if key.endswith(TOKEN_ID_SETTINGS)):
        bad = [token for token in _ids(settings[name]) if not 0 <= token < vocab_size]
        if bad:
            raise ConfigError(
                f"model.generation_kwargs.{name}: token id {bad[0]} is outside the teacher's vocabulary "
                f"(0..{vocab_size - 1}); use an id the tokenizer has."
            )
    return f"tokenizer {tokens:,} tokens, embedding {vocab_size:,} rows; every generation token id inside"


def check_attn_implementation(value: str | None, device: str) -> str:
    """``model.attn_implementation`` is one transformers knows (or a hub kernel) and can run on ``device``."""
    if value is None:
        return "transformers' default"
    if "/" in value or value.startswith("paged|"):
        return f"{value} (resolved by transformers when the teacher loads)"
    if value not in ATTENTION_IMPLEMENTATIONS[:3] and not _FLASH.match(value):
        raise ConfigError(
            f"model.attn_implementation {value!r} is not an attention implementation; use one of "
            f"{', '.join(ATTENTION_IMPLEMENTATIONS)} (or a hub kernel, org/name), or null for the default."
        )
    if _FLASH.match(value) and not device.startswith("cuda") and device != "auto":
        raise ConfigError(
            f'model.attn_implementation {value!r} needs a CUDA device (model.device is {device!r}); use "sdpa".'
        )
    return value
