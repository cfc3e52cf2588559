"""What the checks before a run find, and how they run: each check's report line (:class:`Check`), the dry run's
report (:class:`Preflight`: every line and problem, and what the samples showed), a run's complete inputs
(:class:`RunInputs`, handed from check to check and assembled by the last) and the :class:`Runner` that runs one
check (a :class:`~gencache.run.check_kinds.CheckKind`) into the report. The checks themselves are
:mod:`gencache.run.checks` (the order), :mod:`gencache.run.input_checks` (phase 1) and
:mod:`gencache.run.teacher_checks` (phase 2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from gencache.core.errors import GencacheError, GenerationError, Problem, raise_problems
from gencache.run.check_kinds import CheckKind

if TYPE_CHECKING:
    from gencache.config import CacheConfig
    from gencache.data.samples import SampleSet
    from gencache.generation.effective import EffectiveGeneration
    from gencache.generation.engines import Engine
    from gencache.run.sharding import Target

T = TypeVar("T")
A = TypeVar("A")


@dataclass(frozen=True)
class Check:
    """One line of the dry-run report: ``status`` is ``ok``, ``failed`` or ``skipped``."""

    name: str
    status: str
    detail: str


@dataclass(frozen=True)
class RunInputs:
    """What a run takes from the checks, every part present: the last of the teacher's checks builds it when every
    check passed (:meth:`Preflight.run_inputs` returns it or raises the problems)."""

    device: str
    tokenizer: Any
    generation: EffectiveGeneration
    engine: Engine
    samples: SampleSet
    capacity: Mapping[Path, int]
    rename_mode: str


@dataclass
class Preflight:
    """The dry run's report: each check's line, every problem, what was not computed, and what the samples showed
    (their counts per data config, the built samples once the tokenizer loads, each target with its keys and the
    header budget). ``config`` is None when the config itself is invalid: then only what validated on its own was
    checked. ``inputs`` is the run's complete inputs, present only when every check passed."""

    config: CacheConfig | None
    targets: list[Target]
    samples: SampleSet | None = None
    sample_counts: list[int] | None = None
    capacity: dict[Path, int] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    not_computed: list[str] = field(default_factory=list)
    inputs: RunInputs | None = None

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
        several as :class:`gencache.core.errors.InputProblems`); with no problem and no inputs (every output was
        already published), a :class:`GenerationError`."""
        raise_problems(self.problems)
        if self.inputs is None:
            raise GenerationError("The checks before the run produced no inputs: there is nothing to publish.")
        return self.inputs


class Runner:
    """Runs checks into a :class:`Preflight`: each records its line, and its problem when it fails."""

    def __init__(self, result: Preflight) -> None:
        self.result = result

    def skip(self, kind: CheckKind, why: str) -> None:
        self.result.checks.append(Check(kind.name, "skipped", why))

    @overload
    def step(self, kind: CheckKind, action: Callable[[], tuple[T, str]], /) -> T | None: ...

    @overload
    def step(self, kind: CheckKind, action: Callable[[A], tuple[T, str]], given: A | None, /) -> T | None: ...

    def step(self, kind: CheckKind, action: Callable[..., tuple[T, str]], /, *given: Any) -> T | None:
        """Run check ``kind`` on what an earlier check produced (``given``): its value, or None when it failed
        (its problem recorded at the error's own ``location``, if it has one, else the check's). It is skipped,
        saying why, when a check it needs failed or produced nothing."""
        blocked = [need.name for need in kind.needs if self.result.failed(need)]
        if blocked or any(value is None for value in given):
            why = ", ".join(blocked) + " failed" if blocked else "what it needs is unknown"
            self.skip(kind, f"not checked: {why}")
            return None
        try:
            value, detail = action(*given)
        except GencacheError as error:
            self.result.add_problem(kind, error, getattr(error, "location", None))
            return None
        self.result.checks.append(Check(kind.name, "ok", detail))
        return value
