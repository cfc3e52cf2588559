"""Every check a run makes before the teacher's weights load: the one code path of ``generate`` and ``--dry-run``.

:func:`preflight` runs the checks in two phases and collects every problem (one :class:`gencache.core.errors.Problem`
each), skipping only what depends on a check that failed:

1. **The config and the data files** (no torch, transformers or datasets; ``datasets`` only for a hub source):
   paths that must be valid UTF-8, the output location (absent, a name no temporary directory could have,
   lengths the file system takes, a writable parent, rename support), where the model and tokenizer are (a local
   directory whose JSON files all parse, or a hub id, quickly), and each data config on its own (its source read,
   its columns, rows and sample count, its prompts when the template needs no tokenizer, its keys), then the
   ``--shards`` count against the unique keys, ``--show-prompt``'s index against the samples, the device as far as
   it is known without torch (a GPU driver on the machine for a CUDA device, accelerate for ``auto``) and the
   engine's package.
2. **The teacher** (only when phase 1 found nothing: its checks import torch and transformers, and an input
   mistake should be reported in about a second): the device as torch sees it (built with CUDA, the index in
   range), the tokenizer, the effective generation config,
   the engine's refusals, the teacher's config, attention implementation, weight files and vocabulary (every token
   id inside the embedding), the samples tokenized, the context length (longest prompt plus ``max_new_tokens``
   within the teacher's maximum positions), the prompt ids, the continuous engine's paged-cache budget and the
   header budget.

The individual checks are in :mod:`gencache.run.check_steps` (and :mod:`gencache.run.data_checks` for the data configs).
Nothing is printed here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gencache.run import check_kinds as kinds
from gencache.run.check_steps import (
    check_device,
    check_device_present,
    check_engine_package,
    check_model_location,
    check_output_location,
    check_utf8_paths,
)
from gencache.run.findings import Preflight, Runner

if TYPE_CHECKING:
    from gencache.config import CacheConfig, DataConfig, ModelConfig
    from gencache.run.sharding import ShardSpec, Target


def _output_steps(run: Runner, result: Preflight, named_paths: Mapping[str, str]) -> None:
    """Paths that must be valid UTF-8 and the output location."""
    outputs = result.outputs

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

    result.rename_mode = run.step(kinds.OUTPUT_PATH, location)


def _model_location_steps(run: Runner, model: ModelConfig) -> None:
    """Where the model and tokenizer are: local directories that exist, or hub ids that can be had."""
    run.step(kinds.MODEL, lambda: (None, check_model_location("model.model_path", model.model_path, model.revision)))
    if model.effective_tokenizer_path != model.model_path:
        run.step(
            kinds.TOKENIZER_PATH,
            lambda: (
                None,
                check_model_location("model.tokenizer_path", model.effective_tokenizer_path, model.revision),
            ),
        )


def input_checks(
    result: Preflight,
    data_configs: Sequence[tuple[int, DataConfig]],
    *,
    model: ModelConfig | None,
    shard: ShardSpec | None,
) -> None:
    """Phase 1 (see the module docstring): everything that needs only the config and the data files."""
    from gencache.run.data_checks import data_config_steps

    run = Runner(result)
    named = {"output path": str(result.outputs[0]) if result.outputs else ""}
    if model is not None:
        named |= {"model.model_path": model.model_path, "model.tokenizer_path": model.effective_tokenizer_path}
    _output_steps(run, result, named)
    if model is not None:
        _model_location_steps(run, model)
    data_config_steps(run, result, data_configs, shard)


def machine_checks(
    result: Preflight,
    config: CacheConfig,
    shard: ShardSpec | None,
    env: Mapping[str, str] | None,
    show_prompt: int | None,
) -> None:
    """The end of phase 1 for a valid config: ``--show-prompt``'s index, the device as far as it is known without
    torch, and the engine's package."""
    from gencache.core.errors import ConfigError
    from gencache.run.sharding import device_for_rank

    run = Runner(result)
    if show_prompt is not None and result.keys is not None:

        def prompt_index() -> tuple[None, str]:
            count = len(result.keys or ())
            if not 0 <= show_prompt < count:
                raise ConfigError(
                    f"--show-prompt {show_prompt} is out of range: the run has {count} samples (0..{count - 1})."
                )
            return None, f"sample {show_prompt} of {count}"

        run.step(kinds.SHOW_PROMPT, prompt_index)

    def device() -> tuple[str, str]:
        chosen = device_for_rank(config.model.device, shard, env)
        return chosen, check_device_present(chosen, env)

    result.device = run.step(kinds.DEVICE, device)
    run.step(kinds.ENGINE_PACKAGE, lambda: (None, check_engine_package(config.engine)))


def teacher_checks(
    result: Preflight, config: CacheConfig, shard: ShardSpec | None, env: Mapping[str, str] | None
) -> None:
    """Phase 2 (see the module docstring): the device, the tokenizer, the teacher and the tokenized samples."""
    from gencache.run.check_steps import model_steps
    from gencache.run.data_checks import sample_steps

    run = Runner(result)
    run.step(kinds.TORCH_DEVICE, lambda: (None, check_device(result.device or "")))
    model_steps(run, result, config)
    sample_steps(run, result, config, shard)


def preflight(
    config: CacheConfig,
    targets: Sequence[Target],
    shard: ShardSpec | None,
    env: Mapping[str, str] | None,
    show_prompt: int | None = None,
) -> Preflight:
    """Run every model-free check (see the module docstring) and return what they found, every problem in
    :attr:`Preflight.problems`.

    ``targets`` are the artifacts the run publishes (one, or one per shard still to generate); once the samples
    are built, :attr:`Preflight.targets` holds them with the keys each publishes (selected here, once). ``shard``
    is the one shard this process generates, or with ``--shards N`` any of them (its count is checked against the
    unique keys). ``show_prompt`` is the sample ``--show-prompt`` asks for, checked against the samples in phase 1.
    """
    from gencache.data.sources import shared_tables

    result = Preflight(config=config, targets=list(targets))
    with shared_tables():  # phase 2 builds the samples again (tokenized) from the tables phase 1 read
        input_checks(result, list(enumerate(config.data_configs)), model=config.model, shard=shard)
        machine_checks(result, config, shard, env, show_prompt)
        if result.problems:
            why = "not checked: the checks above found problems (the teacher's checks run once they are fixed)"
            runner = Runner(result)
            for kind in kinds.TEACHER_CHECKS:
                runner.skip(kind, why)
            result.not_computed.append(
                "the teacher's checks, prompt token counts, the context-length check and the header budget (the "
                "config or data checks found problems)"
            )
            return result
        teacher_checks(result, config, shard, env)
    return result


def check_inputs_alone(
    data_configs: Sequence[tuple[int, DataConfig]], targets: Sequence[Target], shard: ShardSpec | None
) -> Preflight:
    """Phase 1 for an invalid config: the data configs and the output location that validated on their own."""
    from gencache.data.sources import shared_tables

    result = Preflight(config=None, targets=list(targets))
    with shared_tables():
        input_checks(result, data_configs, model=None, shard=shard)
    return result
