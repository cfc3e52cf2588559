"""Loading the tokenizer and the teacher for the transformers engines, and the runtime facts recorded in
``resolved_config.json``.

torch and transformers are imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import importlib
import platform
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from gencache.config.fields import checked_dtype
from gencache.core.errors import ConfigError, GenerationError, first_line
from gencache.core.tokenizer import prepare_tokenizer

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig


def hf() -> Any:
    """The transformers module, imported on first use and typed ``Any`` (its own annotations are incomplete
    under mypy strict); the one place the generation package reaches it this way."""
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


def torch_dtype(dtype: str) -> torch.dtype:
    """The torch dtype of a config dtype string (``bfloat16``, ``float16``, ``float32``), which must be a valid
    ``model.dtype`` (the config's rule, for a caller without a config)."""
    import torch

    result: torch.dtype = getattr(torch, checked_dtype(dtype))
    return result


def import_model_code(model_path: str, *, revision: str | None = None) -> None:
    """Import what loading the teacher needs (torch, transformers' model loading, the modeling code of the
    teacher's architecture) without reading any weights, so that the load is timed alone. A config that cannot be
    read, or an architecture transformers does not know, is left to the load, which reports it."""
    import torch  # noqa: F401  (the first import of torch is part of what this takes)

    try:
        config = hf().AutoConfig.from_pretrained(model_path, revision=revision)
        mapping: Any = importlib.import_module("transformers.models.auto.modeling_auto").MODEL_FOR_CAUSAL_LM_MAPPING
        mapping[type(config)]  # imports the architecture's modeling module
    except Exception:  # the load says what is wrong, with the teacher named
        return


@contextlib.contextmanager
def no_loading_bar() -> Iterator[None]:
    """transformers draws a "Loading weights" bar for every model it loads and has no switch per call: the bar is
    off for this block and transformers' (and huggingface_hub's) switch as it was afterwards, so a library call
    draws nothing and leaves the process's bars alone. The switch is process-wide: a model another thread loads
    at the same moment draws no bar either."""
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
    """Load the teacher for generation: ``AutoModelForCausalLM`` with dtype, device, revision and attention
    implementation, in ``eval()`` mode. ``device="auto"`` uses ``device_map="auto"`` (needs ``accelerate``); other
    devices use ``device_map=<device>`` when ``accelerate`` is installed, else load then move the model.
    ``generation_config`` (the run's effective one) becomes the model's generation config, so the teacher's
    ``generation_config.json`` is not read a second time (its settings are in it already)."""
    import torch

    kwargs: dict[str, Any] = {
        "dtype": torch_dtype(dtype),
        "low_cpu_mem_usage": True,
        "revision": revision,
    }
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if generation_config is not None:
        kwargs["generation_config"] = generation_config
    # transformers' own check: an installed accelerate older than the version it needs counts as absent.
    has_accelerate = bool(hf().utils.is_accelerate_available())
    if device == "auto":
        if not has_accelerate:
            raise GenerationError(
                "model.device 'auto' needs the accelerate package (a version this transformers supports); install "
                "it or name a device."
            )
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
        with no_loading_bar():
            model: Any = hf().AutoModelForCausalLM.from_pretrained(model_path, **kwargs)
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


def runtime_info(model: Any) -> dict[str, Any]:
    """dtype, attention implementation, device and library versions, for ``resolved_config.json``."""
    import torch

    from gencache.core.version import __version__

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
        "transformers": hf().__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "python": platform.python_version(),
    }
