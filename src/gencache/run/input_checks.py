"""Phase 1 of the checks before a run: everything that needs only the config, the data files and what the machine
shows without torch. No torch, transformers or datasets is imported here (``datasets`` only for a hub source).

:meth:`InputChecks.run` checks the paths that must be valid UTF-8, the output location, where the model and
tokenizer are and each data config on its own (then the ``--shards`` count against the unique keys); it serves an
invalid config too, for the parts that validated on their own. :meth:`InputChecks.machine` ends the phase for a
valid config:
``--show-prompt``'s index, the device as far as it is known without torch and the engine's package. What the
phase finds for phase 2 is gathered in :class:`InputFacts`; each check's line and problem go to the
:class:`~gencache.run.findings.Runner`'s report. Nothing is printed here.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gencache.core.errors import ConfigError, GencacheError, ShardError, reworded
from gencache.run import check_kinds as kinds

if TYPE_CHECKING:
    from gencache.config import CacheConfig, DataConfig, ModelConfig
    from gencache.run.findings import Runner
    from gencache.run.sharding import ShardSpec


@dataclass(frozen=True)
class InputFacts:
    """What phase 2 works from once phase 1 found nothing: the valid config, the shard this process generates,
    the device chosen, the publish rename mode (None when every output is already published) and the run's keys
    in sample order (None when a data config counts teacher tokens, so that its keys are known once the tokenizer
    loads)."""

    config: CacheConfig
    shard: ShardSpec | None
    device: str
    rename_mode: str | None
    keys: list[str] | None


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
    torch was built with CUDA and sees that index is :func:`gencache.run.teacher_checks.check_device`'s, with the
    teacher's checks."""
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


def check_model_location(field_name: str, value: str, revision: str | None) -> str:
    """A local model or tokenizer directory exists (with ``config.json`` for a model); a hub id is reachable or
    cached; every JSON file of a local directory parses. Returns a description."""
    from gencache.config.paths import looks_like_path
    from gencache.core import hub
    from gencache.generation.teacher import check_json_files

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


def _named(index: int, error: GencacheError) -> GencacheError:
    """``error`` naming ``data_configs[index]`` once, with the config field it is about as its location."""
    text = str(error)
    prefix = f"data_configs[{index}]"
    named = reworded(error, text if text.startswith(prefix) else f"{prefix}: {text}")
    field = getattr(error, "field", None)
    named.location = f"{prefix}.{field}" if field else prefix  # type: ignore[attr-defined]
    return named


def _one_data_config(index: int, dc: DataConfig) -> tuple[list[str] | None, str]:
    """The keys of data config ``index`` read from its source (its prompts rendered when the template needs no
    tokenizer), or None when the recipe counts tokens and is checked once the tokenizer loads."""
    from gencache.data.keys import semantic_key
    from gencache.data.prompts import get_template
    from gencache.data.recipes import get_recipe
    from gencache.data.samples import build_samples

    recipe = get_recipe(dc.dataset_name)
    if recipe.needs_tokenizer(dc.data_kwargs):
        return None, f"{dc.dataset_name} counts teacher tokens: checked once the tokenizer loads"
    try:
        if dc.num_samples and not get_template(dc.template).needs_tokenizer:
            built = build_samples([dc], first_index=index)  # the prompts too: the template renders without a tokenizer
            keys, source = [sample.key for sample in built], built.summaries[0].source
        else:
            raw, source = recipe.load(dc, dc.data_kwargs, None)
            if len(raw) != dc.num_samples:
                raise ConfigError(f"dataset {dc.dataset_name!r} returned {len(raw)} samples, not {dc.num_samples}.")
            keys = [semantic_key(sample.semantic) for sample in raw]
    except GencacheError as error:
        raise _named(index, error) from None
    where = f"{source.kind} {source.location}" if source.location else source.kind
    return keys, f"{dc.dataset_name}: {len(keys)} samples, {len(set(keys))} unique keys, from {where}"


def _bind(index: int, dc: DataConfig) -> Callable[[], tuple[list[str] | None, str]]:
    return lambda: _one_data_config(index, dc)


def data_config_steps(
    run: Runner, data_configs: Sequence[tuple[int, DataConfig]], shard: ShardSpec | None
) -> list[str] | None:
    """Each data config on its own (one check each), then the run's sample count and the ``--shards`` count. The
    run's keys in sample order, or None when a data config failed or is checked once the tokenizer loads."""
    counts: list[int] = []
    keys: list[str] = []
    complete = True
    with warnings.catch_warnings():  # a recipe's warnings come once, with the samples of phase 2
        warnings.simplefilter("ignore")
        for index, dc in data_configs:
            found = run.step(kinds.data_config_check(index), _bind(index, dc))
            counts.append(-1 if found is None else len(found))
            complete = complete and found is not None
            keys.extend(found or ())
    run.result.sample_counts = counts
    if data_configs and all(dc.num_samples == 0 for _, dc in data_configs):
        run.result.add_problem(
            kinds.DATASETS,
            ConfigError(
                "No samples: every data config has num_samples 0; raise num_samples of at least one data config."
            ),
        )
    if not complete:
        return None
    shard_count_step(run, len(dict.fromkeys(keys)), shard)
    return keys


def shard_count_step(run: Runner, unique: int, shard: ShardSpec | None) -> None:
    """``--shards N`` with more shards than the run has unique keys is refused (some shards would be empty). One
    shard of a launched or ``--shard I/N`` run that owns no key is still published empty, so that the set of shards
    is complete (generate says so)."""
    if shard is None or shard.origin != "--shards":
        return

    def count() -> tuple[None, str]:
        if shard.count > max(unique, 1):
            raise ShardError(
                f"{shard.origin} asks for {shard.count} shards but the run has {unique} unique key(s): some shards "
                f"would be empty; use at most {max(unique, 1)} shards."
            )
        return None, f"{shard.count} shards over {unique} unique keys"

    run.step(kinds.SHARDS, count)


class InputChecks:
    """Phase 1 for one run (see the module docstring): the :class:`~gencache.run.findings.Runner` whose report
    holds the outputs and gets each check's line, the data configs (with their indices in the config), the shard
    this process generates and the valid ``config`` (None when the config is invalid: then only the data configs
    and the output location that validated on their own are checked)."""

    def __init__(
        self,
        runner: Runner,
        data_configs: Sequence[tuple[int, DataConfig]],
        shard: ShardSpec | None,
        config: CacheConfig | None = None,
    ) -> None:
        self.runner, self.data_configs, self.shard, self.config = runner, data_configs, shard, config

    def run(self) -> tuple[str | None, list[str] | None]:
        """The paths, the output location, the model's and tokenizer's locations and each data config, then the
        ``--shards`` count. Returns the publish rename mode and the run's keys (each None when unknown)."""
        outputs = self.runner.result.outputs
        named = {"output path": str(outputs[0]) if outputs else ""}
        if self.config is not None:
            model = self.config.model
            named |= {"model.model_path": model.model_path, "model.tokenizer_path": model.effective_tokenizer_path}
        rename_mode = self._output(named)
        if self.config is not None:
            self._model_location(self.config.model)
        return rename_mode, data_config_steps(self.runner, self.data_configs, self.shard)

    def machine(self, env: Mapping[str, str] | None, show_prompt: int | None, keys: list[str] | None) -> str | None:
        """The end of phase 1 for a valid config: ``--show-prompt``'s index against the run's ``keys``, the device
        as far as it is known without torch, and the engine's package. Returns the device (None when its check
        failed or the config is invalid)."""
        from gencache.run.sharding import device_for_rank

        run, config = self.runner, self.config
        if config is None:
            return None
        if show_prompt is not None and keys is not None:
            count = len(keys)

            def prompt_index() -> tuple[None, str]:
                if not 0 <= show_prompt < count:
                    raise ConfigError(
                        f"--show-prompt {show_prompt} is out of range: the run has {count} samples (0..{count - 1})."
                    )
                return None, f"sample {show_prompt} of {count}"

            run.step(kinds.SHOW_PROMPT, prompt_index)

        def device() -> tuple[str, str]:
            chosen = device_for_rank(config.model.device, self.shard, env)
            return chosen, check_device_present(chosen, env)

        chosen = run.step(kinds.DEVICE, device)
        run.step(kinds.ENGINE_PACKAGE, lambda: (None, check_engine_package(config.engine)))
        return chosen

    def _output(self, named_paths: Mapping[str, str]) -> str | None:
        """Paths that must be valid UTF-8 and the output location; the rename mode the run publishes with."""
        run = self.runner
        outputs = run.result.outputs

        def paths() -> tuple[None, str]:
            check_utf8_paths({"working directory": os.getcwd(), **named_paths})
            return None, "working directory and output path are valid UTF-8"

        run.step(kinds.PATHS, paths)

        def location() -> tuple[str | None, str]:
            if not outputs:
                return None, "every output is already published"
            mode = check_output_location(outputs)
            shown = str(outputs[0]) if len(outputs) == 1 else f"{len(outputs)} shard directories beside {outputs[0]}"
            return mode, f"{shown} is free; publish with {mode}"

        return run.step(kinds.OUTPUT_PATH, location)

    def _model_location(self, model: ModelConfig) -> None:
        """Where the model and tokenizer are: local directories that exist, or hub ids that can be had."""
        run = self.runner
        run.step(
            kinds.MODEL, lambda: (None, check_model_location("model.model_path", model.model_path, model.revision))
        )
        if model.effective_tokenizer_path != model.model_path:
            run.step(
                kinds.TOKENIZER_PATH,
                lambda: (
                    None,
                    check_model_location("model.tokenizer_path", model.effective_tokenizer_path, model.revision),
                ),
            )
