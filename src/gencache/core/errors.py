"""The one exception hierarchy: every error gencache raises on purpose is a :class:`GencacheError`, and also the
builtin that fits (``ValueError``, ``OSError``, ``KeyError``, ``RuntimeError``) so callers that catch builtins keep
working. ``exit_code`` is what the CLI exits with: 2 for bad input, 1 for failures."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

E = TypeVar("E", bound=Exception)


class GencacheError(Exception):
    """Root of every error gencache raises on purpose; ``problem`` is set when a check found it."""

    exit_code: int = 1
    problem: Problem | None = None

    def __str__(self) -> str:  # KeyError quotes its message; keep every message plain.
        return str(self.args[0]) if self.args else self.__class__.__name__


def reworded(error: E, message: str) -> E:
    """``error`` with ``message`` instead of its own, of the same type and attributes, chained to ``error``."""
    new = type(error)(message)
    new.__dict__.update(error.__dict__)
    new.__cause__ = error
    return new


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- bad input (exit code 2) ------------------------------------------------------------------------------
class BadInputError(GencacheError):
    """What the user gave is wrong (exit code 2); the subclasses say which input."""

    exit_code = 2


class ConfigError(BadInputError, ValueError):
    """The config file or one of its fields is invalid."""


class DatasetError(BadInputError, ValueError):
    """A dataset source, split or recipe argument cannot produce the requested samples; ``field`` is the data
    config field whose change fixes it, when one does (``source``, ``num_samples``, ``data_kwargs.query``)."""

    def __init__(self, message: str = "", field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class SourceChangedError(DatasetError):
    """A dataset source file differs from the one a run recorded (its SHA-256), so the run's samples cannot be
    rebuilt as they were."""


class PromptError(BadInputError, ValueError):
    """A prompt template cannot render a sample (unknown kwargs, sentinel problems, empty documents)."""


class ShardError(BadInputError, ValueError):
    """A shard specification or a set of shard directories is inconsistent."""


class OutputExistsError(BadInputError, FileExistsError):
    """The output path already exists (a file, a directory, or a dangling symlink)."""


class HeaderCapacityError(BadInputError, ValueError):
    """The run's plan needs a bigger safetensors header than fits (split it with ``--shard``), or the header
    outgrew the capacity reserved for it."""


class InputPathError(BadInputError, FileNotFoundError):
    """A path given on the command line does not exist or is not what the command reads."""


@dataclass(frozen=True)
class Problem:
    """One problem a check found: the check, where (``data_configs[1].source``, an option), the error and, for a config
    value, where it came from (the file, or the ``--set`` that gave it)."""

    check: str
    location: str
    error: GencacheError
    origin: str | None = None

    def to_json(self) -> dict[str, str]:
        found = {"check": self.check, "location": self.location, "message": str(self.error)}
        return found if self.origin is None else {**found, "origin": self.origin}


class InputProblems(GencacheError, ValueError):
    """Several independent problems found before a run loads its teacher, each in :attr:`problems` (the CLI
    prints one ``error:`` line each); ``exit_code`` is the first problem's."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        shown = "; ".join(str(problem.error) for problem in problems)
        super().__init__(f"{len(problems)} problems: {shown}")
        self.problems = list(problems)
        self.exit_code = problems[0].error.exit_code


def raise_problems(problems: Sequence[Problem]) -> None:
    """Raise the one problem's error as it is (its ``problem`` set), :class:`InputProblems` for several."""
    if len(problems) == 1:
        problems[0].error.problem = problems[0]
        raise problems[0].error
    if problems:
        raise InputProblems(problems)


# -- failures (exit code 1) -------------------------------------------------------------------------------
class GenerationError(GencacheError, RuntimeError):
    """Teacher generation failed (model loading, out of memory, invalid generation settings)."""


class WriteError(GencacheError, OSError):
    """Writing or publishing an artifact failed; nothing was published."""


class FormatError(GencacheError, ValueError):
    """An artifact directory is not a valid format-3 artifact."""


class IntegrityError(FormatError):
    """Stored bytes do not match their recorded digest."""


class CompatibilityError(GencacheError, ValueError):
    """An artifact was generated by another teacher, tokenizer state or dtype than the one asked for."""


class MissingEntryError(GencacheError, KeyError):
    """One key is not in the cache."""


class MissingEntriesError(GencacheError, KeyError):
    """Some required keys are not in the cache (coverage check)."""


# -- a stop (not an error) --------------------------------------------------------------------------------
@dataclass(frozen=True)
class StoppedRun:
    """Where a run stood when a stop reached it (``generating`` is None between artifacts)."""

    published: tuple[str, ...] = ()
    generating: str | None = None
    started: bool = True
    remaining: bool = False


class Stopped(BaseException):
    """A signal asked the process to stop (raised by :mod:`gencache.cli.signals`). A ``BaseException`` so that a
    library's ``except Exception`` does not swallow it while every ``finally`` on the way cleans up; a run it passes
    through sets :attr:`run` to what it had published. ``exit_code`` is the shell's, 128 + the signal's number."""

    def __init__(self, signame: str, run: StoppedRun | None = None) -> None:
        super().__init__(signame)
        self.signame, self.run = signame, run
        self.exit_code = 130 if signame == "SIGINT" else 143

    def __str__(self) -> str:
        """The one line of a stop: what was published, what was not, and what to do next."""
        stopped, run = f"Terminated by {self.signame}", self.run or StoppedRun()
        during = f" while generating {run.generating} (not published)" if run.generating is not None else ""
        if not run.published:
            before = "" if run.started else " before generation started"
            return f"{stopped}{before}{during}; nothing was published."
        shown = ", ".join(run.published)
        if run.remaining or run.generating is not None:
            return (
                f"{stopped}{during}; published: {shown}. Rerun the same command to generate the rest (published "
                "shards are verified and skipped)."
            )
        if len(run.published) == 1:
            return f"{stopped} after {shown} was published; the artifact is complete (gencache verify checks it)."
        return f"{stopped} after {shown} were published; they are complete (gencache verify checks them)."
