"""Every check a run makes before the teacher's weights load: the one code path of ``generate`` and ``--dry-run``.

:func:`preflight` runs the checks in two phases and collects every problem (one :class:`gencache.core.errors.Problem`
each), skipping only what depends on a check that failed:

1. **The config and the data files** (no torch, transformers or datasets; ``datasets`` only for a hub source):
   paths that must be valid UTF-8, the output location (absent, a name no temporary directory could have,
   lengths the file system takes, a writable parent, rename support), where the model and tokenizer are (a local
   directory, or a hub id, quickly), and each data config on its own (its source read, its columns, rows and
   sample count, its prompts when the template needs no tokenizer, its keys), then the ``--shards`` count
   against the unique keys.
2. **The teacher** (only when phase 1 found nothing: its checks import torch and transformers, and an input
   mistake should be reported in about a second): the device, the tokenizer, the effective generation config,
   the engine's refusals, the teacher's config, attention implementation, weight files and vocabulary (every token
   id inside the embedding), the samples tokenized, the context length (longest prompt plus ``max_new_tokens``
   within the teacher's maximum positions), the prompt ids, the continuous engine's paged-cache budget and the
   header budget.

The individual checks are in :mod:`gencache.run.check_steps` (and :mod:`gencache.run.data_checks` for the data configs).
Nothing is printed here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gencache.core.errors import GencacheError, GenerationError, Problem, raise_problems
from gencache.run.check_steps import (
    check_device,
    check_model_location,
    check_output_location,
    check_utf8_paths,
)

if TYPE_CHECKING:
    from gencache.config import CacheConfig, DataConfig, ModelConfig
    from gencache.data.samples import SampleSet
    from gencache.generation.effective import EffectiveGeneration
    from gencache.generation.engines import Engine
    from gencache.run.sharding import ShardSpec, Target

T = TypeVar("T")

#: Where each check's problem is, as a config field (a data config's checks name ``data_configs[i]``).
LOCATIONS = {
    "paths": "paths",
    "output path": "output_dir",
    "model": "model.model_path",
    "tokenizer path": "model.tokenizer_path",
    "device": "model.device",
    "tokenizer": "model.tokenizer_path",
    "generation": "model.generation_kwargs",
    "engine": "engine_options",
    "teacher config": "model.model_path",
    "attention": "model.attn_implementation",
    "teacher weights": "model.model_path",
    "vocabulary": "model.tokenizer_path",
    "datasets": "data_configs",
    "samples": "data_configs",
    "context length": "model.generation_kwargs.max_new_tokens",
    "prompt ids": "data_configs",
    "paged cache": "engine_options.kv_cache_memory_gib",
    "header budget": "output_dir",
}
#: The checks of phase 2, in order (skipped, with the reason, when phase 1 found a problem).
TEACHER_CHECKS = (
    "device", "tokenizer", "generation", "engine", "teacher config", "attention", "teacher weights", "vocabulary",
    "samples", "context length", "header budget",
)  # fmt: skip


@dataclass(frozen=True)
class Check:
    """One line of the dry-run report: ``status`` is ``ok``, ``failed`` or ``skipped``."""

    name: str
    status: str
    detail: str


@dataclass(frozen=True)
class RunInputs:
    """What a run takes from the checks, every part present (:meth:`Preflight.run_inputs` builds it or raises)."""

    device: str
    tokenizer: Any
    generation: EffectiveGeneration
    engine: Engine
    samples: SampleSet
    capacity: Mapping[Path, int]
    rename_mode: str


@dataclass
class Preflight:
    """What the checks found, as the dry run reports it: each check's line, every problem, and the values the
    checks that passed produced (a value is None when its check failed or was skipped). ``config`` is None when
    the config itself is invalid: then only what validated on its own was checked."""

    config: CacheConfig | None
    targets: list[Target]
    device: str | None = None
    tokenizer: Any | None = None
    generation: EffectiveGeneration | None = None
    engine: Engine | None = None
    samples: SampleSet | None = None
    sample_counts: list[int] | None = None
    keys: list[str] | None = None
    capacity: dict[Path, int] = field(default_factory=dict)
    rename_mode: str | None = None
    checks: list[Check] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    not_computed: list[str] = field(default_factory=list)

    @property
    def outputs(self) -> list[Path]:
        """The directories the run publishes (one, or one per shard still to generate)."""
        return [target.output_dir for target in self.targets]

    @property
    def errors(self) -> list[GencacheError]:
        """Every problem's error, in the order found."""
        return [problem.error for problem in self.problems]

    @property
    def exit_code(self) -> int:
        """What ``generate`` would exit with: the first problem's code, 0 when there is none."""
        return self.problems[0].error.exit_code if self.problems else 0

    def failed(self, name: str) -> bool:
        return any(c.name == name and c.status != "ok" for c in self.checks)

    def add_problem(self, check: str, error: GencacheError, location: str | None = None) -> None:
        """Record ``error`` as the problem of ``check`` (and its report line)."""
        self.problems.append(Problem(check, location or LOCATIONS.get(check, check), error))
        self.checks.append(Check(check, "failed", str(error)))

    def run_inputs(self) -> RunInputs:
        """The complete inputs of a run that publishes :attr:`outputs`: the problems are raised (one as it is,
        several as :class:`gencache.core.errors.InputProblems`), and a value no check produced is a
        :class:`GenerationError` naming it."""
        raise_problems(self.problems)
        device, tokenizer, generation, engine = self.device, self.tokenizer, self.generation, self.engine
        samples, rename_mode = self.samples, self.rename_mode
        produced = {"device": device, "tokenizer": tokenizer, "generation": generation, "engine": engine}
        produced |= {"samples": samples, "output location": rename_mode}
        missing = [name for name, value in produced.items() if value is None]
        missing += [f"the header budget of {path}" for path in self.outputs if path not in self.capacity]
        # the None tests repeat ``missing`` for the type checker
        if missing or device is None or generation is None or engine is None or samples is None or not rename_mode:
            raise GenerationError(f"The checks before the run left {', '.join(missing)} unknown; nothing was loaded.")
        return RunInputs(device, tokenizer, generation, engine, samples, dict(self.capacity), rename_mode)


@dataclass
class TeacherFacts:
    """What the teacher's checks learn and later checks use (not part of the report): its ``config.json``, its
    maximum positions and its vocabulary size (None when unknown)."""

    config: Any | None = None
    max_positions: int | None = None
    vocab_size: int | None = None


class Runner:
    """Runs checks into a :class:`Preflight`: each records its line, and its problem when it fails. ``teacher``
    carries what one check learns of the teacher to the checks after it."""

    def __init__(self, result: Preflight) -> None:
        self.result = result
        self.teacher = TeacherFacts()

    def skip(self, name: str, why: str) -> None:
        self.result.checks.append(Check(name, "skipped", why))

    def step(
        self,
        name: str,
        action: Callable[[], tuple[T, str]],
        *,
        needs: Sequence[str] = (),
        location: str | None = None,
    ) -> T | None:
        blocked = [n for n in needs if self.result.failed(n)]
        if blocked:
            self.skip(name, f"not checked: {', '.join(blocked)} failed")
            return None
        try:
            value, detail = action()
        except GencacheError as error:
            self.result.add_problem(name, error, getattr(error, "location", None) or location)
            return None
        self.result.checks.append(Check(name, "ok", detail))
        return value


def _output_steps(run: Runner, result: Preflight, named_paths: Mapping[str, str]) -> None:
    """Paths that must be valid UTF-8 and the output location."""
    outputs = result.outputs

    def paths() -> tuple[None, str]:
        check_utf8_paths({"working directory": os.getcwd(), **named_paths})
        return None, "working directory and output path are valid UTF-8"

    run.step("paths", paths)

    def location() -> tuple[str | None, str]:
        if not outputs:
            return None, "every output is already published"
        mode = check_output_location(outputs)
        shown = str(outputs[0]) if len(outputs) == 1 else f"{len(outputs)} shard directories beside {outputs[0]}"
        return mode, f"{shown} is free; publish with {mode}"

    result.rename_mode = run.step("output path", location, needs=("paths",))


def _model_location_steps(run: Runner, model: ModelConfig) -> None:
    """Where the model and tokenizer are: local directories that exist, or hub ids that can be had."""
    run.step("model", lambda: (None, check_model_location("model.model_path", model.model_path, model.revision)))
    if model.effective_tokenizer_path != model.model_path:
        run.step(
            "tokenizer path",
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


def _device_step(run: Runner, result: Preflight, shard: ShardSpec | None, env: Mapping[str, str] | None) -> None:
    from gencache.run.sharding import device_for_rank

    assert result.config is not None
    model = result.config.model

    def device() -> tuple[str, str]:
        chosen = device_for_rank(model.device, shard, env)
        return chosen, check_device(chosen)

    result.device = run.step("device", device)


def teacher_checks(result: Preflight, shard: ShardSpec | None, env: Mapping[str, str] | None) -> None:
    """Phase 2 (see the module docstring): the device, the tokenizer, the teacher and the tokenized samples."""
    from gencache.core.quiet import prepare_model_libraries
    from gencache.run.check_steps import model_steps
    from gencache.run.data_checks import sample_steps

    prepare_model_libraries()
    run = Runner(result)
    _device_step(run, result, shard, env)
    model_steps(run, result)
    sample_steps(run, result, shard)


def preflight(
    config: CacheConfig, targets: Sequence[Target], shard: ShardSpec | None, env: Mapping[str, str] | None
) -> Preflight:
    """Run every model-free check (see the module docstring) and return what they found, every problem in
    :attr:`Preflight.problems`.

    ``targets`` are the artifacts the run publishes (one, or one per shard still to generate); once the samples
    are built, :attr:`Preflight.targets` holds them with the keys each publishes (selected here, once). ``shard``
    is the one shard this process generates, or with ``--shards N`` any of them (its count is checked against the
    unique keys).
    """
    from gencache.data.sources import shared_tables

    result = Preflight(config=config, targets=list(targets))
    with shared_tables():  # phase 2 builds the samples again (tokenized) from the tables phase 1 read
        input_checks(result, list(enumerate(config.data_configs)), model=config.model, shard=shard)
        if result.problems:
            why = "not checked: the checks above found problems (the teacher's checks run once they are fixed)"
            for name in TEACHER_CHECKS:
                Runner(result).skip(name, why)
            result.not_computed.append(
                "the teacher's checks, prompt token counts, the context-length check and the header budget (the "
                "config or data checks found problems)"
            )
            return result
        teacher_checks(result, shard, env)
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


__all__ = ["LOCATIONS", "Check", "Preflight", "RunInputs", "Runner", "TeacherFacts", "check_inputs_alone", "preflight"]
