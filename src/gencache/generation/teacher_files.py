"""What can be known about the teacher before its weights load: its weight files are all there and whole, its
vocabulary fits the tokenizer and every token id of the generation config, and the attention implementation
can run on the chosen device.

Reads ``config.json`` and the safetensors headers only (never tensor data); imports transformers only to read a
config. Every problem is a :class:`ConfigError` (bad input, exit 2) naming the file or the setting.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gencache.errors import ConfigError

__all__ = [
    "ATTENTION_IMPLEMENTATIONS",
    "MIN_VOCAB_COVERAGE",
    "TOKEN_ID_SETTINGS",
    "check_attn_implementation",
    "check_teacher_weights",
    "check_vocabulary",
    "read_vocab_size",
]

#: The attention implementations transformers knows by name (a hub kernel, ``org/name``, is also accepted).
ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention", "flash_attention_2", "flash_attention_3")
_FLASH_PACKAGES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}

#: A tokenizer with fewer tokens than this share of the teacher's embedding rows belongs to another model (real
#: models pad their embedding by well under 1%).
MIN_VOCAB_COVERAGE = 0.9

#: Generation settings that hold token ids (a single id, a list of ids, or a list of lists).
TOKEN_ID_SETTINGS = (
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "decoder_start_token_id",
    "suppress_tokens",
    "begin_suppress_tokens",
    "bad_words_ids",
)

_INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_SINGLE_FILES = ("model.safetensors", "pytorch_model.bin")


def _weight_files(directory: Path) -> list[Path]:
    for index_name in _INDEX_FILES:
        index = directory / index_name
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                names = sorted(set(weight_map.values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
                raise ConfigError(
                    f"Teacher weight index {index} cannot be read ({error}); re-download or re-save the model."
                ) from None
            return [directory / name for name in names]
    for name in _SINGLE_FILES:
        if (directory / name).is_file():
            return [directory / name]
    raise ConfigError(
        f"model.model_path {directory} has no weights (none of {', '.join(_INDEX_FILES + _SINGLE_FILES)}); "
        "point it at a directory saved by save_pretrained."
    )


def _check_safetensors(path: Path) -> None:
    """The file's header parses and its size holds every tensor the header lists."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            length = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
            header = json.loads(handle.read(length)) if 0 < length <= min(size - 8, 100_000_000) else None
    except FileNotFoundError:
        raise ConfigError(f"Teacher weight file {path} is missing; re-download or re-save the model.") from None
    except (OSError, ValueError) as error:
        raise ConfigError(f"Teacher weight file {path} cannot be read ({error}); re-download the model.") from None
    if not isinstance(header, dict):
        raise ConfigError(f"Teacher weight file {path} has no valid safetensors header; re-download the model.")
    ends = [
        entry["data_offsets"][1]
        for name, entry in header.items()
        if name != "__metadata__" and isinstance(entry, dict) and isinstance(entry.get("data_offsets"), list)
    ]
    needed = 8 + length + max(ends, default=0)
    if size < needed:
        raise ConfigError(
            f"Teacher weight file {path} is truncated ({size:,} bytes; its header needs {needed:,}); "
            "re-download or re-save the model."
        )


def check_teacher_weights(model_path: str) -> str:
    """Every weight file of a local teacher directory exists, and each safetensors file is whole (its size holds
    every tensor its header lists). A hub id is checked when it downloads."""
    directory = Path(model_path).expanduser()
    if not directory.is_dir():
        return "hub model: weights are checked as they download"
    files = _weight_files(directory)
    for path in files:
        if path.suffix == ".safetensors":
            _check_safetensors(path)
        elif not path.is_file():
            raise ConfigError(f"Teacher weight file {path} is missing; re-download or re-save the model.")
    total = sum(path.stat().st_size for path in files)
    return f"{len(files)} weight file(s), {total / 2**20:,.1f} MiB, complete"


def read_vocab_size(model_path: str, revision: str | None) -> int | None:
    """The teacher's embedding rows (``vocab_size`` in ``config.json``, or its text config's), or None."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_path, **({"revision": revision} if revision else {}))
    except Exception:  # the teacher-config check reports an unreadable config.json
        return None
    for candidate in (config, getattr(config, "text_config", None)):
        value = getattr(candidate, "vocab_size", None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _ids(value: Any) -> Iterator[int]:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _ids(item)


def check_vocabulary(tokenizer: Any, vocab_size: int, settings: Mapping[str, Any]) -> str:
    """The tokenizer belongs to the teacher (no id beyond its embedding, not far fewer tokens than it has) and
    every token id among the effective generation ``settings`` is inside the embedding."""
    tokens = len(tokenizer)
    if tokens > vocab_size:
        raise ConfigError(
            f"model.tokenizer_path: the tokenizer has {tokens:,} tokens but the teacher's embedding has {vocab_size:,} "
            "rows (vocab_size in config.json): its ids would fall outside the teacher; use the teacher's tokenizer."
        )
    if tokens < MIN_VOCAB_COVERAGE * vocab_size:
        raise ConfigError(
            f"model.tokenizer_path: the tokenizer has {tokens:,} tokens, under {MIN_VOCAB_COVERAGE:.0%} of the "
            f"teacher's {vocab_size:,}-row vocabulary (vocab_size in config.json): it is another model's tokenizer; "
            "use the teacher's tokenizer."
        )
    for name in TOKEN_ID_SETTINGS:
        bad = [token for token in _ids(settings.get(name)) if not 0 <= token < vocab_size]
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
    if value not in ATTENTION_IMPLEMENTATIONS:
        raise ConfigError(
            f"model.attn_implementation {value!r} is not an attention implementation; use one of "
            f"{', '.join(ATTENTION_IMPLEMENTATIONS)} (or a hub kernel, org/name), or null for the default."
        )
    package = _FLASH_PACKAGES.get(value)
    if package is not None:
        if not device.startswith("cuda") and device != "auto":
            raise ConfigError(
                f"model.attn_implementation {value!r} needs a CUDA device (model.device is {device!r}); "
                'use "sdpa" or "eager" on this device.'
            )
        if importlib.util.find_spec(package) is None:
            raise ConfigError(
                f"model.attn_implementation {value!r} needs the {package} package, which is not installed; "
                'install it or use "sdpa".'
            )
    return value
