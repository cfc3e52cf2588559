"""What the checks before a run find, and how they run: each check's report line (:class:`Check`), every
problem and the values the passing checks produced (:class:`Preflight`, what the dry run reports), a run's complete
inputs (:class:`RunInputs`), what the teacher's checks learn for later ones (:class:`TeacherFacts`), and the
:class:`Runner` that runs one check into the findings. The checks themselves
are :mod:`gencache.run.checks` (the order), :mod:`gencache.run.check_steps` and :mod:`gencache.run.data_checks`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gencache.core.errors import GencacheError, GenerationError, Problem, raise_problems

if TYPE_CHECKING:
    from gencache.config import CacheConfig
    from gencache.data.samples import SampleSet
    from gencache.generation.effective import EffectiveGeneration
    from gencache.generation.engines import Engine
    from gencache.run.sharding import Target

T = TypeVar("T")

#: Where each check's problem is, as a config field (a data config's checks name ``data_configs[i]``).
LOCATIONS = {
    "paths": "paths",
    "output path": "output_dir",
    "model": "model.model_path",
    "tokenizer path": "model.tokenizer_path",
    "device": "model.device",
    "torch device": "model.device",
    "engine package": "engine",
    "show prompt": "--show-prompt",
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
