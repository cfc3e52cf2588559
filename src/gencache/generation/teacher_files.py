"""What can be known about the teacher before its weights load: its JSON files parse, its weight files are all
there and whole, its vocabulary fits the tokenizer and every token id of the generation config, and the attention
implementation can run on the chosen device.

Reads the safetensors headers only (never tensor data) and takes the teacher's config as the run read it.
Every problem is a :class:`ConfigError` (bad input, exit 2) naming the file or the setting.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gencache.core.errors import ConfigError

#: The attention implementations transformers knows by name; ``flash_attention_<N>`` (any N), a hub kernel
#: (``org/name``) and a ``paged|...`` form are accepted too and resolved by transformers when the teacher loads.
ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention", "flash_attention_<N>")
_FLASH = re.compile(r"^flash_attention_\d+\Z")

#: A tokenizer with fewer tokens than this share of the teacher's embedding rows belongs to another model (real
#: models pad their embedding by well under 1%).
MIN_VOCAB_COVERAGE = 0.9

#: How many tokens a tokenizer may have beyond the embedding (at least; 1% of it for large vocabularies): some
#: models ship special tokens the model never sees (Gemma 3: 262,145 tokens, 262,144 rows). The ids a run really
#: uses, those of the prompts and of the generation config, must all be inside the embedding.
MAX_EXTRA_TOKENS = 64

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

#: Where transformers looks for weights, in its order: the first that exists is what loads.
_WEIGHT_NAMES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def read_json_file(path: str | Path) -> Any:
    """One of the teacher's (or tokenizer's) JSON files, parsed; a :class:`ConfigError` naming the file and, for
    invalid JSON, the line and column, when it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"The teacher's file {path} is not UTF-8 text (byte {error.start:,}); re-download or re-save the model."
        ) from None
    except OSError as error:
        raise ConfigError(f"The teacher's file {path} cannot be read: {error.strerror or error}.") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"The teacher's file {path} is not valid JSON: {error.msg} at line {error.lineno}, column "
            f"{error.colno}; fix it or re-download the model."
        ) from None


def check_json_files(directory: Path) -> int:
    """Parse every JSON file directly in a local model or tokenizer directory (its config, generation config,
    tokenizer files and weight index: what transformers reads as the tokenizer and the teacher load), so that a
    broken one is named with its line and column before any model library is imported; returns their count."""
    files = sorted(path for path in directory.glob("*.json") if path.is_file())
    for path in files:
        read_json_file(path)
    return len(files)


def _weight_files(directory: Path) -> list[Path]:
    for name in _WEIGHT_NAMES:
        path = directory / name
        if not path.is_file():
            continue
        if not name.endswith(".index.json"):
            return [path]
        index = read_json_file(path)
        try:
            names = sorted(set(index["weight_map"].values()))
        except (KeyError, TypeError, AttributeError) as error:
            raise ConfigError(
                f"Teacher weight index {path} cannot be read ({error}); re-download or re-save the model."
            ) from None
        return [directory / shard for shard in names]
    raise ConfigError(
        f"model.model_path {directory} has no weights (none of {', '.join(_WEIGHT_NAMES)}); point it at a "
        "directory saved by save_pretrained."
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


def vocab_size_of(config: Any) -> int | None:
    """The teacher's embedding rows (``vocab_size`` of its config, or of its text config), or None."""
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
    if tokens > vocab_size + max(MAX_EXTRA_TOKENS, vocab_size // 100):
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


def check_prompt_ids(largest: int, where: str, vocab_size: int) -> str:
    """Every prompt token id is inside the teacher's embedding (``largest`` is the largest, in ``where``)."""
    if largest >= vocab_size:
        raise ConfigError(
            f"model.tokenizer_path: prompt token id {largest} ({where}) is outside the teacher's {vocab_size:,}-row "
            "embedding (vocab_size in config.json); use the teacher's tokenizer."
        )
    return f"largest prompt token id {largest} < {vocab_size:,}"


def check_attn_implementation(value: str | None, device: str) -> str:
    """``model.attn_implementation`` is one transformers knows (or a hub kernel) and can run on ``device``:
    flash attention needs a CUDA device (whether its package or a kernel fallback is installed, transformers
    decides when the teacher loads)."""
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
            f"model.attn_implementation {value!r} needs a CUDA device (model.device is {device!r}); "
            'use "sdpa" or "eager" on this device.'
        )
    return value
