"""The individual checks a run makes before its weights load: paths, the output location, the device, where the
model is, the teacher's checks (tokenizer, effective generation config, engine, config, attention, weight files,
vocabulary), its maximum positions and the context length. :mod:`gencache.run.checks` runs them in order
(:func:`gencache.run.checks.preflight`, the one code path of ``generate`` and ``--dry-run``). Nothing is printed here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gencache.core.errors import ConfigError, GencacheError

if TYPE_CHECKING:
    from gencache.generation.effective import EffectiveGeneration
    from gencache.generation.engines import Engine
    from gencache.run.findings import Preflight, Runner

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


def _free_name(output: Path) -> str | None:
    """A sibling of ``output`` that does not exist yet (``<name>-2``, ``<name>-3``, ...), to suggest."""
    for number in range(2, 100):
        candidate = output.with_name(f"{output.name}-{number}")
        if not os.path.lexists(candidate):
            return str(candidate)
    return None


def check_output_location(outputs: Sequence[Path]) -> str:
    """Every output path is absent and its parent can hold it; return the publish rename mode.

    The parent's nearest existing ancestor is checked (a missing parent is created when the run publishes), and
    nothing is left behind.
    """
    from gencache.artifact.publish import check_output_path, probe_rename
    from gencache.core.errors import OutputExistsError

    for output in outputs:
        try:
            check_output_path(output)
        except OutputExistsError as error:
            free = _free_name(output)
            raise OutputExistsError(f"{error} {free} is free.") if free else error from None
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
    from gencache.config.paths import looks_like_path
    from gencache.core import hub

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

    from gencache.core.hub import pretrained_kwargs

    try:
        return AutoConfig.from_pretrained(model_path, **pretrained_kwargs(model_path, revision))
    except Exception as error:
        from gencache.core.errors import first_line

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


def _teacher_steps(run: Runner, result: Preflight) -> None:
    """The checks of the teacher itself: attention on the device, whole weight files, the vocabulary."""
    from gencache.generation.teacher_files import (
        check_attn_implementation,
        check_teacher_weights,
        check_vocabulary,
        vocab_size_of,
    )

    assert result.config is not None
    model = result.config.model

    def attention() -> tuple[None, str]:
        assert result.device is not None
        return None, check_attn_implementation(model.attn_implementation, result.device)

    def vocabulary() -> tuple[None, str]:
        vocab_size = vocab_size_of(run.teacher.config)
        if vocab_size is None:
            return None, "not checked: config.json records no vocab_size"
        run.teacher.vocab_size = vocab_size
        assert result.generation is not None
        return None, check_vocabulary(result.tokenizer, vocab_size, result.generation.kwargs)

    run.step("attention", attention, needs=("device",))
    run.step("teacher weights", lambda: (None, check_teacher_weights(model.model_path)), needs=("model",))
    run.step("vocabulary", vocabulary, needs=("tokenizer", "generation", "teacher config"))


def model_steps(run: Runner, result: Preflight) -> None:
    """The tokenizer, the effective generation config, the engine, the teacher's config and files."""
    config = result.config
    assert config is not None
    model = config.model

    def tokenizer() -> tuple[Any, str]:
        from gencache.generation.teacher import load_tokenizer

        loaded = load_tokenizer(model.effective_tokenizer_path, revision=model.revision)
        return loaded, f"{type(loaded).__name__}, pad id {loaded.pad_token_id}, eos id {loaded.eos_token_id}"

    result.tokenizer = run.step("tokenizer", tokenizer, needs=("model", "tokenizer path"))

    def generation() -> tuple[EffectiveGeneration, str]:
        from gencache.generation.effective import resolve_generation

        effective = resolve_generation(
            model.generation_kwargs, model_path=model.model_path, revision=model.revision, tokenizer=result.tokenizer
        )
        return effective, (
            f"max_new_tokens {effective.max_new_tokens}, {effective.num_return_sequences} sequence(s) per prompt"
        )

    result.generation = run.step("generation", generation, needs=("tokenizer",))

    def engine() -> tuple[Engine, str]:
        from gencache.generation.engines import EngineContext, create_engine

        assert result.generation is not None and result.device is not None
        created = create_engine(  # refuses settings the engine cannot honour
            config.engine,
            EngineContext(
                generation=result.generation,
                tokenizer=result.tokenizer,
                model_path=model.model_path,
                dtype=model.dtype,
                device=result.device,
                revision=model.revision,
                attn_implementation=model.attn_implementation,
                batch_size=config.gen_batch_size,
                seed=config.seed,
                options=config.engine_options,
            ),
        )
        return created, f"{config.engine}"

    result.engine = run.step("engine", engine, needs=("generation", "device"))

    def positions() -> tuple[int | None, str]:
        run.teacher.config = read_teacher_config(model.model_path, model.revision)
        value = max_positions_of(run.teacher.config)
        return value, f"{value} positions" if value else "config.json records no maximum positions"

    run.teacher.max_positions = run.step("teacher config", positions, needs=("model",))
    _teacher_steps(run, result)


__all__ = [
    "POSITION_FIELDS",
    "check_context",
    "check_device",
    "check_model_location",
    "check_output_location",
    "check_utf8_paths",
    "max_positions_of",
    "model_steps",
    "read_teacher_config",
]
