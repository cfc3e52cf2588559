"""The reports of ``gencache inspect`` and ``gencache verify``, as typed values (:mod:`gencache.artifact.report` makes
them, :mod:`gencache.cli.render` draws them).

Inspect says of each path it is given one of :class:`ArtifactReport`, :class:`ShardedReport`,
:class:`UnreadableArtifact` or :class:`NotAnArtifact`, in an :class:`InspectReport` (with the :class:`Overlap` of
several); verify returns a :class:`VerifyReport` of one :class:`VerifyResult` per artifact or finding. Each value's
``to_json()`` is what ``--json`` prints, and a report's ``exit_code`` is its command's.

They are named tuples, immutable and typed: defining a frozen dataclass costs about a millisecond of import on
Python 3.11, and these are defined by every ``inspect`` and ``verify``, whose whole time is a few tens of
milliseconds more than importing numpy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from gencache.artifact.names import FORMAT_VERSION

#: Why a path is not something to open: the user named the wrong thing (exit code 2), not a damaged artifact.
NotArtifactKind = Literal["missing", "temporary", "stray", "parent", "not_artifact"]
VerifyStatus = Literal["ok", "fail", "bad_input"]


class NotAnArtifact(NamedTuple):
    """A path that is not something to open as an artifact: missing, the temporary directory of an unfinished run,
    a stray directory hiding the shard directories beside it, a parent directory of artifacts (``children``) or
    anything else that is no artifact. Bad input: exit code 2."""

    path: str
    kind: NotArtifactKind
    error: str
    children: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"path": self.path, "kind": self.kind, "error": self.error}
        if self.kind == "parent":
            found["children"] = list(self.children)
        return found


class UnreadableArtifact(NamedTuple):
    """An artifact (or one shard of a sharded output) that opening refused: ``error`` says why. Exit code 1."""

    path: str
    error: str

    @property
    def kind(self) -> str:
        return "error"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "error": self.error}


class DataConfigCounts(NamedTuple):
    """One data config's counts (``data_config`` is its index among the run's data configs): its samples and how
    many distinct keys they have."""

    data_config: int
    samples: int
    unique: int

    def to_json(self) -> dict[str, int]:
        return {"index": self.data_config, "samples": self.samples, "unique": self.unique}


def data_config_counts(items: Sequence[Mapping[str, int]]) -> tuple[DataConfigCounts, ...]:
    """Counts per data config as the manifest's ``summary.data_configs`` writes them (``{index, samples, unique}``)."""
    return tuple(DataConfigCounts(item["index"], item["samples"], item["unique"]) for item in items)


def _counts_json(counts: tuple[DataConfigCounts, ...] | None) -> list[dict[str, int]] | None:
    return None if counts is None else [item.to_json() for item in counts]


class TokenLengths(NamedTuple):
    """The shortest, median and longest stored sequence, in tokens."""

    min: int
    median: float
    max: int


class ArtifactReport(NamedTuple):
    """One readable artifact: provenance, counts, token lengths, finish reasons, its shard and what its run
    recorded (engine, determinism). ``shard_data_configs`` is a shard's own counts per data config (None when
    unrecorded or inconsistent); ``conflicting_prompts``, ``engine`` and ``determinism`` are None when unrecorded."""

    path: str
    teacher: str
    tokenizer_path: str
    tokenizer: Mapping[str, Any]
    dtype: str
    provenance_digest: str
    entries: int
    sequences: int
    tokens: int
    token_length: TokenLengths | None
    finish_reasons: Mapping[str, int]
    duplicates: int
    conflicting_prompts: int | None
    data_configs: tuple[DataConfigCounts, ...]
    shard_data_configs: tuple[DataConfigCounts, ...] | None
    shard: Mapping[str, Any] | None
    engine: str | None
    determinism: Mapping[str, Any] | None
    payload_bytes: int
    header_capacity: int
    header_used: int

    @property
    def kind(self) -> str:
        return "artifact"

    @property
    def format_version(self) -> int:
        return FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        lengths = self.token_length
        return {
            "path": self.path,
            "kind": self.kind,
            "format_version": self.format_version,
            "teacher": self.teacher,
            "tokenizer_path": self.tokenizer_path,
            "tokenizer": dict(self.tokenizer),
            "dtype": self.dtype,
            "provenance_digest": self.provenance_digest,
            "entries": self.entries,
            "sequences": self.sequences,
            "tokens": self.tokens,
            "token_length": None
            if lengths is None
            else {"min": lengths.min, "median": lengths.median, "max": lengths.max},
            "finish_reasons": dict(self.finish_reasons),
            "duplicates": self.duplicates,
            "conflicting_prompts": self.conflicting_prompts,
            "data_configs": _counts_json(self.data_configs),
            "shard_data_configs": _counts_json(self.shard_data_configs),
            "shard": None if self.shard is None else dict(self.shard),
            "engine": self.engine,
            "determinism": None if self.determinism is None else dict(self.determinism),
            "payload_bytes": self.payload_bytes,
            "header": {"capacity": self.header_capacity, "used": self.header_used},
        }


class ShardSetInfo(NamedTuple):
    """What the shard directories of a sharded output are: shard names (``00003``) present, missing, unreadable,
    misnamed or of another run, directories of other splits, the set's run and its problems (one line each)."""

    shard_count: int
    present: tuple[str, ...]
    missing: tuple[str, ...]
    unreadable: tuple[str, ...]
    mislabeled: tuple[str, ...]
    other_run: tuple[str, ...]
    other_splits: tuple[str, ...]
    run_digest: str | None
    problems: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.shard_count,
            "present": list(self.present),
            "missing": list(self.missing),
            "unreadable": list(self.unreadable),
            "mislabeled": list(self.mislabeled),
            "other_run": list(self.other_run),
            "other_splits": list(self.other_splits),
            "run_digest": self.run_digest,
            "problems": list(self.problems),
        }


class ShardTotals(NamedTuple):
    """The readable shards' counts added up (``data_configs`` None unless every shard is readable and recorded its
    own counts)."""

    entries: int
    sequences: int
    tokens: int
    payload_bytes: int
    data_configs: tuple[DataConfigCounts, ...] | None

    def to_json(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "sequences": self.sequences,
            "tokens": self.tokens,
            "payload_bytes": self.payload_bytes,
            "data_configs": _counts_json(self.data_configs),
        }


class ShardedReport(NamedTuple):
    """An unsuffixed sharded output: its shard set, the totals and one report per present shard, in order."""

    path: str
    shards: ShardSetInfo
    totals: ShardTotals
    artifacts: tuple[ArtifactReport | UnreadableArtifact, ...]

    @property
    def kind(self) -> str:
        return "sharded"

    @property
    def failed(self) -> bool:
        """Whether a shard cannot be read or the set is not one whole run (exit code 1)."""
        return bool(self.shards.problems) or any(isinstance(a, UnreadableArtifact) for a in self.artifacts)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "shards": self.shards.to_json(),
            "totals": self.totals.to_json(),
            "artifacts": [artifact.to_json() for artifact in self.artifacts],
        }


#: What inspect says about one path it was given.
PathReport = ArtifactReport | ShardedReport | UnreadableArtifact | NotAnArtifact


class OverlapPair(NamedTuple):
    """Two of the inspected paths: keys both hold, and those whose stored contents differ (the first few)."""

    a: str
    b: str
    shared: int
    conflicting: int
    conflicting_keys: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "shared": self.shared,
            "conflicting": self.conflicting,
            "conflicting_keys": list(self.conflicting_keys),
        }


class Overlap(NamedTuple):
    """How several readable paths overlap: the provenance fields that differ, the union of keys, each pair."""

    differing: tuple[str, ...]
    union: int
    pairs: tuple[OverlapPair, ...]

    @property
    def provenance(self) -> Literal["identical", "differs"]:
        return "differs" if self.differing else "identical"

    def to_json(self) -> dict[str, Any]:
        return {
            "provenance": self.provenance,
            "differing": list(self.differing),
            "union": self.union,
            "pairs": [pair.to_json() for pair in self.pairs],
        }


class InspectReport(NamedTuple):
    """One report per inspected path, in order, and their overlap when several are readable."""

    artifacts: tuple[PathReport, ...]
    overlap: Overlap | None

    @property
    def exit_code(self) -> int:
        """``gencache inspect``'s exit code, with verify's meaning: 2 when a path is missing or not an artifact; 1
        when an artifact or any shard of a sharded output cannot be read (what opening checks: files, manifest,
        header, sizes) or a shard set is not one whole run; else 0."""
        if any(isinstance(artifact, NotAnArtifact) for artifact in self.artifacts):
            return 2
        for artifact in self.artifacts:
            if isinstance(artifact, UnreadableArtifact) or (isinstance(artifact, ShardedReport) and artifact.failed):
                return 1
        return 0

    def to_json(self) -> dict[str, Any]:
        return {
            "artifacts": [artifact.to_json() for artifact in self.artifacts],
            "overlap": None if self.overlap is None else self.overlap.to_json(),
        }


class VerifyResult(NamedTuple):
    """One verified artifact or finding: ``ok``, ``fail`` (damaged, or a shard set that is not one whole run) or
    ``bad_input`` (a path that is not an artifact), with one line per problem."""

    path: str
    status: VerifyStatus
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, "problems": list(self.problems)}


class VerifyReport(NamedTuple):
    """Every result of one ``gencache verify``, in order."""

    results: tuple[VerifyResult, ...]

    @property
    def ok(self) -> bool:
        """Whether every artifact is intact."""
        return all(result.status == "ok" for result in self.results)

    @property
    def exit_code(self) -> int:
        """``gencache verify``'s exit code: 2 when a path is not an artifact, 1 on any other problem, else 0."""
        if any(result.status == "bad_input" for result in self.results):
            return 2
        return 0 if self.ok else 1

    def lines(self) -> list[str]:
        """The report as lines: ``OK   <path>`` per intact artifact, ``FAIL <problem>`` per problem."""
        lines: list[str] = []
        for result in self.results:
            if result.status == "ok":
                lines.append(f"OK   {result.path}")
            lines.extend(f"FAIL {problem}" for problem in result.problems)
        return lines

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "results": [result.to_json() for result in self.results]}
