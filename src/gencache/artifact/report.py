"""What ``gencache inspect`` and ``gencache verify`` find, as typed values (:mod:`gencache.cli.render` draws them).

:func:`inspect_report` says of each path it is given one of :class:`ArtifactReport`, :class:`ShardedReport`,
:class:`UnreadableArtifact` or :class:`NotAnArtifact` (:func:`classify_path`), in an :class:`InspectReport` (with the
:class:`Overlap` of several); :func:`verify_report` re-hashes artifacts and returns a :class:`VerifyReport` of one
:class:`VerifyResult` per artifact or finding. Each value's ``to_json()`` is what ``--json`` prints, and a report's
``exit_code`` is its command's. Nothing here prints.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gencache.artifact.manifest import PROVENANCE_FIELDS
from gencache.artifact.names import ARTIFACT_FILES, FORMAT_VERSION, MANIFEST_NAME, PAYLOAD_NAME, TEMP_RE
from gencache.artifact.reader import CacheReader, PathLike, ProgressCallback, read_resolved_config, verify
from gencache.artifact.resolved import DIGEST_FIELD, with_resolved_digest
from gencache.artifact.shards import ShardSet, check_shard_set, find_shards, stray_directory
from gencache.artifact.summary import check_data_configs
from gencache.core.errors import FormatError, GencacheError

#: Why a path is not something to open: the user named the wrong thing (exit code 2), not a damaged artifact.
NotArtifactKind = Literal["missing", "temporary", "stray", "parent", "not_artifact"]
VerifyStatus = Literal["ok", "fail", "bad_input"]


@dataclass(frozen=True)
class NotAnArtifact:
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


@dataclass(frozen=True)
class UnreadableArtifact:
    """An artifact (or one shard of a sharded output) that opening refused: ``error`` says why. Exit code 1."""

    path: str
    error: str

    @property
    def kind(self) -> str:
        return "error"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "error": self.error}


@dataclass(frozen=True)
class DataConfigCounts:
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


@dataclass(frozen=True)
class TokenLengths:
    """The shortest, median and longest stored sequence, in tokens."""

    min: int
    median: float
    max: int


@dataclass(frozen=True)
class ArtifactReport:
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


@dataclass(frozen=True)
class ShardSetInfo:
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


@dataclass(frozen=True)
class ShardTotals:
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


@dataclass(frozen=True)
class ShardedReport:
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


@dataclass(frozen=True)
class OverlapPair:
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


@dataclass(frozen=True)
class Overlap:
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


@dataclass(frozen=True)
class InspectReport:
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


@dataclass(frozen=True)
class VerifyResult:
    """One verified artifact or finding: ``ok``, ``fail`` (damaged, or a shard set that is not one whole run) or
    ``bad_input`` (a path that is not an artifact), with one line per problem."""

    path: str
    status: VerifyStatus
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, "problems": list(self.problems)}


@dataclass(frozen=True)
class VerifyReport:
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


PROGRESS_MIN_BYTES = 32 * 1024 * 1024
_NOT_UNICODE = (
    "{path}: the manifest holds text that is not valid Unicode (an escaped lone surrogate such as \\ud800); the "
    "artifact was not written by gencache or was edited."
)
#: Enters a progress display for one artifact (name, total bytes) and yields its callback.
VerifyProgressFactory = Callable[[str, int], AbstractContextManager[ProgressCallback]]
MAX_LISTED_KEYS = 5
MAX_LISTED_CHILDREN = 10


# -- inspect --------------------------------------------------------------------------------------------------
def classify_path(item: PathLike) -> NotAnArtifact | None:
    """Why ``item`` is not something to open as an artifact (None when it may be one): a missing path, the
    temporary directory of an unfinished run, a stray directory that hides the shard directories beside it, or a
    parent directory of artifacts."""
    path = Path(item).expanduser().absolute()
    if not os.path.lexists(path):
        if find_shards(path) is not None:
            return None
        return NotAnArtifact(
            str(path),
            "missing",
            f"{path} does not exist (and no shard directories {path.name}-shard-*-of-* are beside it); check the path.",
        )
    if TEMP_RE.match(path.name) and path.is_dir():
        return NotAnArtifact(
            str(path),
            "temporary",
            f"{path} is the temporary directory of an unfinished gencache run, not an artifact; if that run was "
            f"killed, `gencache clean {path.parent}` removes it (a live run's directory is kept).",
        )
    stray = stray_directory(path)
    if stray is not None:
        return NotAnArtifact(str(path), "stray", stray)
    if path.is_dir() and not (path / MANIFEST_NAME).exists():
        parent = _parent_of_artifacts(path)
        if parent is not None:
            return parent
    if not path.is_dir():
        return NotAnArtifact(
            str(path),
            "not_artifact",
            f"{path} is not an artifact: an artifact is a directory (with cache.safetensors, manifest.json and "
            "resolved_config.json); give its directory.",
        )
    try:
        names = set(os.listdir(path))
    except OSError:
        return None  # opening it says why it cannot be read
    if not names & ARTIFACT_FILES:
        return NotAnArtifact(
            str(path),
            "not_artifact",
            f"{path} is not an artifact: it holds none of cache.safetensors, manifest.json and resolved_config.json; "
            "check the path.",
        )
    return None


def _parent_of_artifacts(path: Path) -> NotAnArtifact | None:
    """``path`` as a parent directory of artifacts (None when no child directory holds a manifest)."""
    children = sorted(
        child.name
        for child in path.iterdir()
        if child.is_dir() and not child.name.startswith(".") and (child / MANIFEST_NAME).is_file()
    )
    if not children:
        return None
    shown = ", ".join(children[:MAX_LISTED_CHILDREN])
    more = f" and {len(children) - MAX_LISTED_CHILDREN} more" if len(children) > MAX_LISTED_CHILDREN else ""
    return NotAnArtifact(
        str(path),
        "parent",
        f"{path} is a parent directory of {len(children)} artifact(s): {shown}{more}; inspect those (or an "
        "unsuffixed sharded output) instead.",
        tuple(children),
    )


def _recorded(reader: CacheReader) -> dict[str, Any]:
    """``resolved_config.json`` when it is a JSON object that matches its ``resolved_digest`` (when it has one);
    an empty dict otherwise, so that nothing from an edited or damaged file is shown (verify says what is wrong)."""
    try:
        resolved = read_resolved_config(reader.path)
    except FormatError:
        return {}
    digest = resolved.get(DIGEST_FIELD)
    if digest is not None and digest != with_resolved_digest(resolved)[DIGEST_FIELD]:
        return {}
    return resolved


def _engine_name(resolved: dict[str, Any]) -> str | None:
    engine = resolved.get("engine")
    name = engine.get("name") if isinstance(engine, dict) else None
    return name if isinstance(name, str) else None


def _determinism(resolved: dict[str, Any]) -> dict[str, Any] | None:
    """What the run recorded of what decides whether its tokens can change between runs (``runtime.determinism``,
    with the engine's sampling rule), or None when it recorded none."""
    runtime, engine = resolved.get("runtime"), resolved.get("engine")
    facts = runtime.get("determinism") if isinstance(runtime, dict) else None
    if not isinstance(facts, dict):
        return None
    sampling = engine.get("sampling") if isinstance(engine, dict) else None
    return {**facts, "sampling": sampling if isinstance(sampling, (str, dict)) else None}


def _conflicting_prompts(resolved: dict[str, Any]) -> int | None:
    """How many duplicated keys rendered different prompts (None if unrecorded)."""
    samples = resolved.get("samples")
    value = samples.get("conflicting_prompts") if isinstance(samples, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _shard_data_configs(resolved: dict[str, Any], summary: dict[str, Any]) -> tuple[DataConfigCounts, ...] | None:
    """A shard's own counts per data config as its run recorded them (None when unrecorded or inconsistent with
    the manifest: one entry per data config of the run, none above the run's counts, as many keys as entries)."""
    shard = resolved.get("shard")
    if summary["shard"] is not None and not summary["data_configs"]:
        return ()  # a run without data configs (an artifact written directly): nothing to count
    if summary["shard"] is None or not isinstance(shard, dict) or "data_configs" not in shard:
        return None
    try:
        counts = check_data_configs(shard["data_configs"], "shard.data_configs")
    except FormatError:
        return None
    run = summary["data_configs"]
    if len(counts) != len(run) or any(
        mine["samples"] > whole["samples"] or mine["unique"] > whole["unique"]
        for mine, whole in zip(counts, run, strict=True)
    ):
        return None
    unique = [item["unique"] for item in counts]
    if counts and not max(unique) <= summary["entries"] <= sum(unique):
        return None
    return data_config_counts(counts)


def _artifact_report(reader: CacheReader) -> ArtifactReport:
    lengths = reader.index.lengths  # every sequence's token count, from the checked index (never re-parsed)
    summary = reader.summary
    resolved = _recorded(reader)
    provenance = reader.provenance
    return ArtifactReport(
        path=str(reader.path),
        teacher=provenance["model_path"],
        tokenizer_path=provenance["tokenizer_path"],
        tokenizer=dict(provenance["tokenizer"]),
        dtype=provenance["dtype"],
        provenance_digest=reader.provenance_digest,
        entries=summary["entries"],
        sequences=summary["sequences"],
        tokens=summary["tokens"],
        token_length=(
            TokenLengths(int(lengths.min()), float(np.median(lengths)), int(lengths.max())) if len(lengths) else None
        ),
        finish_reasons=dict(summary["finish_reasons"]),
        duplicates=summary["duplicates"],
        conflicting_prompts=_conflicting_prompts(resolved),
        data_configs=data_config_counts(summary["data_configs"]),
        shard_data_configs=_shard_data_configs(resolved, summary),
        shard=summary["shard"],
        engine=_engine_name(resolved),
        determinism=_determinism(resolved),
        payload_bytes=reader.payload_bytes,
        header_capacity=reader.header_capacity,
        header_used=reader.header_json_bytes,
    )


def _sharded_report(shards: ShardSet) -> tuple[ShardedReport, list[CacheReader]]:
    readers: list[CacheReader] = []
    reports: list[ArtifactReport | UnreadableArtifact] = []
    infos: dict[int, Any] = {}
    for index, path in shards.present.items():
        try:
            reader = CacheReader(path)
        except GencacheError as error:
            reports.append(UnreadableArtifact(str(path), str(error)))
            continue
        readers.append(reader)
        reports.append(_artifact_report(reader))
        infos[index] = reader.summary["shard"]
    check = check_shard_set(shards, infos)
    readable = [r for r in reports if isinstance(r, ArtifactReport)]
    totals = ShardTotals(
        entries=sum(r.entries for r in readable),
        sequences=sum(r.sequences for r in readable),
        tokens=sum(r.tokens for r in readable),
        payload_bytes=sum(r.payload_bytes for r in readable),
        data_configs=_total_data_configs(reports) if not shards.missing else None,
    )
    info = ShardSetInfo(
        shard_count=shards.count,
        present=tuple(f"{i:05d}" for i in shards.present),
        missing=tuple(f"{i:05d}" for i in shards.missing),
        unreadable=tuple(f"{i:05d}" for i in check.unreadable),
        mislabeled=tuple(f"{i:05d}" for i in check.mislabeled),
        other_run=tuple(f"{i:05d}" for i in check.other_run),
        other_splits=tuple(p.name for paths in shards.other_splits.values() for p in paths),
        run_digest=check.run_digest,
        problems=tuple(check.problems()),
    )
    return ShardedReport(str(shards.base), info, totals, tuple(reports)), readers


def _total_data_configs(reports: list[ArtifactReport | UnreadableArtifact]) -> tuple[DataConfigCounts, ...] | None:
    """The shards' own counts per data config added up (None unless every shard is readable and recorded them)."""
    counts = [r.shard_data_configs if isinstance(r, ArtifactReport) else None for r in reports]
    if not counts or any(c is None for c in counts) or len({len(c) for c in counts if c is not None}) != 1:
        return None
    return tuple(
        DataConfigCounts(
            index,
            sum(c[index].samples for c in counts if c is not None),
            sum(c[index].unique for c in counts if c is not None),
        )
        for index in range(len(counts[0] or ()))
    )


def _overlap(named: list[tuple[str, list[CacheReader]]]) -> Overlap:
    digests: list[dict[str, str]] = []
    for _, readers in named:
        merged: dict[str, str] = {}
        for reader in readers:
            for key, entry in reader.manifest["entries"].items():
                merged.setdefault(key, entry["content_digest"])
        digests.append(merged)
    first = named[0][1][0]
    differing = sorted(
        {
            field
            for _, readers in named
            for reader in readers
            for field in PROVENANCE_FIELDS
            if reader.provenance[field] != first.provenance[field]
        }
    )
    pairs = []
    for i in range(len(named)):
        for j in range(i + 1, len(named)):
            shared = digests[i].keys() & digests[j].keys()
            conflicting = sorted(k for k in shared if digests[i][k] != digests[j][k])
            pairs.append(
                OverlapPair(
                    named[i][0], named[j][0], len(shared), len(conflicting), tuple(conflicting[:MAX_LISTED_KEYS])
                )
            )
    union = set().union(*(d.keys() for d in digests))
    return Overlap(tuple(differing), len(union), tuple(pairs))


def inspect_report(paths: Sequence[PathLike]) -> InspectReport:
    """A description of each path (an artifact, a sharded output directory, or why it is neither or cannot be
    read) and, for several readable paths, their overlap (shared and conflicting keys, provenance)."""
    artifacts: list[PathReport] = []
    opened: list[tuple[str, list[CacheReader]]] = []
    for item in paths:
        path = Path(item).expanduser().absolute()
        not_artifact = classify_path(path)
        if not_artifact is not None:
            artifacts.append(not_artifact)
            continue
        shards = None if os.path.lexists(path) else find_shards(path)
        if shards is not None:
            report, readers = _sharded_report(shards)
            artifacts.append(report)
            if readers:
                opened.append((str(path), readers))
            continue
        try:
            reader = CacheReader(path)
        except GencacheError as error:
            artifacts.append(UnreadableArtifact(str(path), str(error)))
            continue
        except UnicodeError:
            artifacts.append(UnreadableArtifact(str(path), _NOT_UNICODE.format(path=path)))
            continue
        artifacts.append(_artifact_report(reader))
        opened.append((str(path), [reader]))
    return InspectReport(tuple(artifacts), _overlap(opened) if len(opened) > 1 else None)


# -- verify ---------------------------------------------------------------------------------------------------
def _verify_targets(item: PathLike) -> tuple[list[Path], list[str]]:
    """The artifacts ``item`` stands for and the problems of its shard set (one check with ``open_caches``)."""
    path = Path(item).expanduser().absolute()
    if os.path.lexists(path):
        return [path], []
    shards = find_shards(path)
    if shards is None:
        return [path], []
    infos: dict[int, Any] = {}
    for index, shard_dir in shards.present.items():
        try:
            infos[index] = CacheReader(shard_dir).summary["shard"]
        except (GencacheError, OSError):
            continue  # verify() reports why it cannot be read
    return list(shards.present.values()), check_shard_set(shards, infos).problems()


def _verify_one(target: Path, progress: VerifyProgressFactory | None) -> list[str]:
    try:
        size = os.stat(target / PAYLOAD_NAME).st_size
    except OSError:
        size = 0
    try:
        if progress is not None and size >= PROGRESS_MIN_BYTES:
            with progress(target.name, size) as advance:
                return verify(target, advance)
        return verify(target)
    except UnicodeError:
        return [_NOT_UNICODE.format(path=target)]


def verify_report(paths: Sequence[PathLike], progress: VerifyProgressFactory | None = None) -> VerifyReport:
    """Verify every path (a sharded output directory means all its shards and the set's one-run check): one
    :class:`VerifyResult` per artifact or finding.

    ``progress(name, total_bytes)``, when given, is entered around the verification of each artifact of at least
    32 MiB and yields the callback that receives the bytes done.
    """
    results: list[VerifyResult] = []
    for item in paths:
        not_artifact = classify_path(item)
        if not_artifact is not None:
            results.append(VerifyResult(not_artifact.path, "bad_input", (not_artifact.error,)))
            continue
        targets, problems = _verify_targets(item)
        if problems:
            results.append(VerifyResult(str(Path(item).expanduser().absolute()), "fail", tuple(problems)))
        for target in targets:
            found = _verify_one(target, progress)
            results.append(VerifyResult(str(target), "fail" if found else "ok", tuple(found)))
    return VerifyReport(tuple(results))
