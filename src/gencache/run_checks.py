"""The individual checks a run makes before its weights load: paths, the output location, the device, where the
model is, the teacher's maximum positions and the context length. :mod:`gencache.checks` runs them in order
(:func:`gencache.checks.preflight`, the one code path of ``generate`` and ``--dry-run``). Nothing is printed here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gencache.errors import ConfigError, GencacheError

#: Fields of a model's ``config.json`` that give its maximum number of positions, in the order tried.
POSITION_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def check_utf8_paths(paths: Mapping[str, str]) -> None:
    """Refuse a path that is not valid UTF-8 (it could not be recorded in the artifact's JSON)."""
    for what, value in paths.items():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            shown = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise ConfigError(
                f"The {what} {shown} is not valid UTF-8, so the artifact could not record it; rename it or run "
                "from a directory whose path is UTF-8."
            ) from None


def _nearest_existing(path: Path) -> Path:
    current = path
    while not os.path.lexists(current) and current.parent != current:
        current = current.parent
    return current


def check_output_location(outputs: Sequence[Path]) -> str:
    """Every output path is absent and its parent can hold it; return the publish rename mode.

    The parent's nearest existing ancestor is checked (a missing parent is created when the run publishes), and
    nothing is left behind.
    """
    from gencache.artifact.publish import check_output_path, probe_rename

    for output in outputs:
        check_output_path(output)
    parent = outputs[0].parent
    ancestor = _nearest_existing(parent)
    if not ancestor.is_dir():
        raise ConfigError(f"Output parent {ancestor} is not a directory; choose an output_dir under a directory.")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(f"Output parent {ancestor} is not writable; choose an output_dir you can write to.")
    try:
        return probe_rename(ancestor)
    except GencacheError as error:
        raise ConfigError(f"The output location {parent} cannot be used: {error}") from None


def check_device(device: str) -> str:
    """The device exists on this machine: ``cpu``, ``cuda``/``cuda:N`` with that GPU, or ``auto`` (the only
    values the config accepts)."""
    import importlib.util

    if device == "cpu":
        return "cpu"
    if device == "auto":
        if importlib.util.find_spec("accelerate") is None:
            raise ConfigError('model.device "auto" needs the accelerate package; install it or name a device.')
        return "auto (device_map)"
    import torch

    try:
        target = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f'model.device {device!r} is not a device; use "cpu", "cuda", "cuda:N" or "auto".') from None
    if target.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"model.device {device!r}: CUDA is not available on this machine (torch {torch.__version__}); "
                'set model.device to "cpu" or run on a machine with a GPU.'
            )
        count = torch.cuda.device_count()
        if target.index is not None and target.index >= count:
            raise ConfigError(
                f"model.device {device!r}: this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1}); "
                "choose one of them."
            )
        return f"{device} ({torch.cuda.get_device_name(target.index or 0)})"
    return device


def check_model_location(field_name: str, value: str, revision: str | None) -> str:
    """A local model or tokenizer directory exists (with ``config.json`` for a model); a hub id is reachable or
    cached. Returns a description."""
    from gencache import hub
    from gencache.config.paths import looks_like_path

    path = Path(value).expanduser()
    if os.path.isdir(path):
        if field_name == "model.model_path" and not (path / "config.json").is_file():
            raise ConfigError(
                f"{field_name} {path} has no config.json; point it at a model directory saved by save_pretrained."
            )
        return f"local directory {path.absolute()}"
    if os.path.lexists(path):
        raise ConfigError(f"{field_name} {path} is not a directory; point it at a model directory or a hub id.")
    if looks_like_path(value):
        raise ConfigError(f"{field_name} {path.absolute()} does not exist; fix the path or give a hub id.")
    hub.require_model_id(field_name, value, revision)
    state = hub.hub_state()
    return f"hub id {value}" + ("" if state.online else " (from the local cache, offline)")


def read_teacher_config(model_path: str, revision: str | None) -> Any:
    """The teacher's ``config.json`` (no weights), read once per run; :class:`ConfigError` when it cannot be read."""
    from transformers import AutoConfig

    try:
        kwargs: dict[str, Any] = {"revision": revision} if revision else {}
        return AutoConfig.from_pretrained(model_path, **kwargs)
    except Exception as error:
        from gencache.errors import first_line

        raise ConfigError(f"Cannot read the teacher's config.json from {model_path!r}: {first_line(error)}") from None


def max_positions_of(config: Any) -> int | None:
    """The teacher's maximum positions from its config (or its text config's), or None when it records none."""
    for candidate in (config, getattr(config, "text_config", None)):
        if candidate is None:
            continue
        for name in POSITION_FIELDS:
            value = getattr(candidate, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def check_context(longest: int, where: str, max_new_tokens: int, max_positions: int) -> str:
    if longest + max_new_tokens > max_positions:
        room = max_positions - longest
        advice = f"lower max_new_tokens to at most {room}" if room > 0 else "shorten the prompts"
        raise ConfigError(
            f"model.generation_kwargs.max_new_tokens {max_new_tokens} plus the longest prompt ({longest} tokens, "
            f"{where}) is {longest + max_new_tokens} tokens, beyond the teacher's {max_positions} positions "
            f"(config.json); {advice}."
        )
    return f"longest prompt {longest} + max_new_tokens {max_new_tokens} <= {max_positions} positions"


__all__ = [
    "POSITION_FIELDS",
    "check_context",
    "check_device",
    "check_model_location",
    "check_output_location",
    "check_utf8_paths",
    "max_positions_of",
    "read_teacher_config",
]
