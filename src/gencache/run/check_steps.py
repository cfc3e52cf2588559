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
from gencache.run import check_kinds as kinds

if TYPE_CHECKING:
    from gencache.config import CacheConfig
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


#: What shows a GPU driver on a machine without loading it: NVIDIA's device nodes, AMD's ROCm node (torch's
#: "cuda" device runs on ROCm too), WSL's GPU node, and NVIDIA's driver library (opened, never initialised: a
#: CUDA context made here would break the processes vLLM forks later).
GPU_DEVICE_NODES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")
CUDA_DRIVER_LIBRARY = "libcuda.so.1"


def _gpu_driver_evidence() -> list[str]:
    """What of :data:`GPU_DEVICE_NODES` and :data:`CUDA_DRIVER_LIBRARY` this machine has (empty: no GPU driver)."""
    import ctypes
    import glob

    found = [node for pattern in GPU_DEVICE_NODES for node in sorted(glob.glob(pattern))]
    try:
        ctypes.CDLL(CUDA_DRIVER_LIBRARY)
    except OSError:
        return found
    return [*found, CUDA_DRIVER_LIBRARY]


def check_device_present(device: str, env: Mapping[str, str] | None = None) -> str:
    """What can be known of ``model.device`` without torch (the first round): ``auto`` needs accelerate, and a CUDA
    device needs a GPU driver on this machine and a ``CUDA_VISIBLE_DEVICES`` that leaves a GPU visible. Whether
    torch was built with CUDA and sees that index is :func:`check_device`'s, with the teacher's checks."""
    import importlib.util

    if device == "cpu":
        return "cpu"
    if device == "auto":
        if importlib.util.find_spec("accelerate") is None:
            raise ConfigError('model.device "auto" needs the accelerate package; install it or name a device.')
        return "auto (device_map)"
    choose = 'set model.device to "cpu" (in the config, or --set model.device=cpu) or run on a machine with a GPU'
    visible = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        raise ConfigError(f"model.device {device!r}: CUDA_VISIBLE_DEVICES is empty, so no GPU is visible; {choose}.")
    evidence = _gpu_driver_evidence()
    if not evidence:
        from gencache.config import ModelConfig

        default = " (the default)" if device == ModelConfig.model_fields["device"].default else ""
        raise ConfigError(
            f"model.device {device!r}{default}: this machine has no GPU driver (no {CUDA_DRIVER_LIBRARY}, "
            f"/dev/nvidia*, /dev/kfd or /dev/dxg); {choose}."
        )
    return f"{device}: GPU driver found ({', '.join(evidence[:3])}); torch checks the device with the teacher"


def check_engine_package(engine: str) -> str:
    """The package the chosen engine runs on is installed (found without importing it)."""
    import importlib.util

    from gencache.config.names import ENGINE_VLLM

    if engine != ENGINE_VLLM:
        return f"{engine}: transformers"
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            'engine "vllm" needs the vllm package, which is not installed in this environment: install it '
            '(pip install "gencache[vllm]", or vLLM\'s CPU build; see docs/engines.md) or set engine to "transformers".'
        )
    return "vllm: installed"


def check_device(device: str) -> str:
    """The device exists on this machine as torch sees it: ``cpu``, ``cuda``/``cuda:N`` with that GPU (torch
    built with CUDA, the index in range), or ``auto``; :func:`check_device_present` ran first, without torch."""
    if device in ("cpu", "auto"):
        return device
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
    cached; every JSON file of a local directory parses. Returns a description."""
    from gencache.config.paths import looks_like_path
    from gencache.core import hub
    from gencache.generation.teacher_files import check_json_files

    path = Path(value).expanduser()
    if os.path.isdir(path):
        if field_name == "model.model_path" and not (path / "config.json").is_file():
            raise ConfigError(
                f"{field_name} {path} has no config.json; point it at a model directory saved by save_pretrained."
            )
        count = check_json_files(path)
        return f"local directory {path.absolute()} ({count} JSON file{'s' if count != 1 else ''} read)"
    if os.path.lexists(path):
        raise ConfigError(f"{field_name} {path} is not a directory; point it at a model directory or a hub id.")
    if looks_like_path(value):
        raise ConfigError(f"{field_name} {path.absolute()} does not exist; fix the path or give a hub id.")
    hub.require_model_id(field_name, value, revision)
    state = hub.hub_state()
    return f"hub id {value}" + ("" if state.online else " (from the local cache, offline)")


def read_teacher_config(model_path: str, revision: str | None) -> Any:
    """The teacher's ``config.json`` (no weights), read once per run; :class:`ConfigError` when it cannot be read
    (invalid JSON named with its file, line and column)."""
    from transformers import AutoConfig
    from transformers.utils.hub import cached_file

    from gencache.core.hub import pretrained_kwargs
    from gencache.generation.teacher_files import read_json_file

    try:
        path = cached_file(
            model_path,
            "config.json",
            _raise_exceptions_for_missing_entries=False,
            **pretrained_kwargs(model_path, revision),
        )
        if path is not None:
            read_json_file(path)
        return AutoConfig.from_pretrained(model_path, **pretrained_kwargs(model_path, revision))
    except ConfigError:
        raise
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


def _teacher_steps(run: Runner, result: Preflight, config: CacheConfig) -> None:
    """The checks of the teacher itself: attention on the device, whole weight files, the vocabulary."""
    from gencache.generation.teacher_files import (
        check_attn_implementation,
        check_teacher_weights,
        check_vocabulary,
        vocab_size_of,
    )

    model = config.model

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

    run.step(kinds.ATTENTION, attention)
    run.step(kinds.TEACHER_WEIGHTS, lambda: (None, check_teacher_weights(model.model_path)))
    run.step(kinds.VOCABULARY, vocabulary)


def model_steps(run: Runner, result: Preflight, config: CacheConfig) -> None:
    """The tokenizer, the effective generation config, the engine, the teacher's config and files of ``config``
    (the valid config of ``result``)."""
    model = config.model

    def tokenizer() -> tuple[Any, str]:
        from gencache.generation.teacher import load_tokenizer

        loaded = load_tokenizer(model.effective_tokenizer_path, revision=model.revision)
        return loaded, f"{type(loaded).__name__}, pad id {loaded.pad_token_id}, eos id {loaded.eos_token_id}"

    result.tokenizer = run.step(kinds.TOKENIZER, tokenizer)

    def generation() -> tuple[EffectiveGeneration, str]:
        from gencache.generation.effective import resolve_generation

        effective = resolve_generation(
            model.generation_kwargs, model_path=model.model_path, revision=model.revision, tokenizer=result.tokenizer
        )
        return effective, (
            f"max_new_tokens {effective.max_new_tokens}, {effective.num_return_sequences} sequence(s) per prompt"
        )

    result.generation = run.step(kinds.GENERATION, generation)

    def engine() -> tuple[Engine, str]:
        from gencache.run.engine_build import build_engine

        assert result.generation is not None and result.device is not None
        built = build_engine(config, generation=result.generation, tokenizer=result.tokenizer, device=result.device)
        return built, f"{config.engine}"

    result.engine = run.step(kinds.ENGINE, engine)

    def positions() -> tuple[int | None, str]:
        run.teacher.config = read_teacher_config(model.model_path, model.revision)
        value = max_positions_of(run.teacher.config)
        return value, f"{value} positions" if value else "config.json records no maximum positions"

    run.teacher.max_positions = run.step(kinds.TEACHER_CONFIG, positions)
    _teacher_steps(run, result, config)
