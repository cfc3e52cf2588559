"""What the checks before a run find, and how they run: each check's report line (:class:`Check`), every
problem and the values the passing checks produced (:class:`Preflight`, what the dry run reports), a run's complete
inputs (:class:`RunInputs`), what the teacher's checks learn for later ones (:class:`TeacherFacts`), and the
:class:`Runner` that runs one check (a :class:`~gencache.run.check_kinds.CheckKind`) into the findings. The
checks themselves are :mod:`gencache.run.checks` (the order), :mod:`gencache.run.check_steps` and
:mod:`gencache.run.data_checks`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gencache.core.errors import GencacheError, GenerationError, Problem, raise_problems
from gencache.run.check_kinds import CheckKind

if TYPE_CHECKING:
    from gencache.config import CacheConfig
    from gencache.data.samples import SampleSet
    from gencache.generation.effective import EffectiveGeneration
    from gencache.generation.engines import Engine
    from gencache.run.sharding import Target

T = TypeVar("T")


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

    def failed(self, kind: CheckKind) -> bool:
        return any(c.name == kind.name and c.status != "ok" for c in self.checks)

    def add_problem(self, kind: CheckKind, error: GencacheError, location: str | None = None) -> None:
        """Record ``error`` as the problem of check ``kind`` (and its report line), at ``location`` or the
        check's own."""
        self.problems.append(Problem(kind.name, location or kind.location, error))
        self.checks.append(Check(kind.name, "failed", str(error)))

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

    def skip(self, kind: CheckKind, why: str) -> None:
        self.result.checks.append(Check(kind.name, "skipped", why))

    def step(self, kind: CheckKind, action: Callable[[], tuple[T, str]]) -> T | None:
        """Run check ``kind`` (skipped when one it needs failed): its value, or None when it failed (its problem
        recorded at the error's own ``location``, if it has one, else the check's)."""
        blocked = [need.name for need in kind.needs if self.result.failed(need)]
        if blocked:
            self.skip(kind, f"not checked: {', '.join(blocked)} failed")
            return None
        try:
            value, detail = action()
        except GencacheError as error:
            self.result.add_problem(kind, error, getattr(error, "location", None))
            return None
        self.result.checks.append(Check(kind.name, "ok", detail))
        return value
