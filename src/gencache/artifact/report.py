"""What ``gencache inspect`` and ``gencache verify`` find, as typed values (:mod:`gencache.cli.inspect_view` draws
inspect's). Each value's ``to_json()`` is what ``--json`` prints and a report's ``exit_code`` is its command's:
2 when a path is not an artifact at all, 1 when one cannot be read or is damaged, else 0. Nothing here prints.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from gencache.artifact.manifest import PROVENANCE_FIELDS
from gencache.artifact.names import ARTIFACT_FILES, FORMAT_VERSION, MANIFEST_NAME, PAYLOAD_NAME, TEMP_RE
from gencache.artifact.reader import CacheReader, PathLike, ProgressCallback, verify
from gencache.artifact.resolved import DIGEST_FIELD, nested, with_resolved_digest
from gencache.artifact.shards import ShardCheck, ShardSet, check_shard_set, find_shards, stray_directory
from gencache.artifact.store import Location, exists, location, read_resolved_config
from gencache.artifact.summary import check_data_configs
from gencache.config.paths import S3Url
from gencache.core.errors import FormatError, GencacheError

#: Enters a progress display for one artifact (name, total bytes) and yields its callback.
VerifyProgressFactory = Callable[[str, int], AbstractContextManager[ProgressCallback]]
PROGRESS_MIN_BYTES = 32 * 1024 * 1024
MAX_LISTED_KEYS = 5
MAX_LISTED_CHILDREN = 10
_NOT_UNICODE = (
    "{path}: the manifest holds text that is not valid Unicode (an escaped lone surrogate such as \\ud800); the "
    "artifact was not written by gencache or was edited."
)


@dataclass(frozen=True)
class _Json:
    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NotAnArtifact(_Json):
    """A path that is not something to open: ``kind`` is ``missing``, ``temporary`` (an unfinished run's
    directory), ``stray`` (a directory hiding the shard directories beside it), ``parent`` (of the artifacts
    ``children``) or ``not_artifact``. The user named the wrong thing, not a damaged artifact."""

    path: str
    kind: str
    error: str
    children: list[str] = field(default_factory=list)
    exit_code: ClassVar[int] = 2

    def to_json(self) -> dict[str, Any]:
        found = asdict(self)
        if self.kind != "parent":
            del found["children"]
        return found


@dataclass(frozen=True)
class UnreadableArtifact(_Json):
    """An artifact (or one shard of a sharded output) that opening refused, and why."""

    path: str
    error: str
    kind: str = field(default="error", init=False)
    exit_code: ClassVar[int] = 1


@dataclass(frozen=True)
class TokenLengths:
    min: int
    median: float
    max: int


@dataclass(frozen=True)
class ArtifactReport(_Json):
    """One readable artifact. ``data_configs`` are its run's ``{index, samples, unique}`` per data config and
    ``shard_data_configs`` a shard's own (None when unrecorded or inconsistent with the manifest);
    ``conflicting_prompts``, ``engine`` and ``determinism`` are None when the run did not record them."""

    path: str
    teacher: str
    tokenizer_path: str
    tokenizer: dict[str, Any]
    dtype: str
    provenance_digest: str
    entries: int
    sequences: int
    tokens: int
    token_length: TokenLengths | None
    finish_reasons: dict[str, int]
    duplicates: int
    conflicting_prompts: int | None
    data_configs: list[dict[str, int]]
    shard_data_configs: list[dict[str, int]] | None
    shard: dict[str, Any] | None
    engine: str | None
    determinism: dict[str, Any] | None
    payload_bytes: int
    header: dict[str, int]
    kind: str = field(default="artifact", init=False)
    format_version: int = field(default=FORMAT_VERSION, init=False)
    exit_code: ClassVar[int] = 0


@dataclass(frozen=True)
class ShardTotals:
    """The readable shards' counts added up (``data_configs`` None unless every shard recorded its own)."""

    entries: int
    sequences: int
    tokens: int
    payload_bytes: int
    data_configs: list[dict[str, int]] | None


@dataclass(frozen=True)
class ShardedReport(_Json):
    """An unsuffixed sharded output: its shard set, the totals and one report per present shard, in order."""

    path: str
    shards: ShardCheck
    totals: ShardTotals
    artifacts: list[ArtifactReport | UnreadableArtifact]
    kind: str = field(default="sharded", init=False)

    @property
    def exit_code(self) -> int:
        """1 when a shard cannot be read or the set is not one whole run."""
        return int(bool(self.shards.problems) or any(a.exit_code for a in self.artifacts))


PathReport = ArtifactReport | ShardedReport | UnreadableArtifact | NotAnArtifact


@dataclass(frozen=True)
class OverlapPair:
    """Two inspected paths: the keys both hold, and those whose stored contents differ (the first few)."""

    a: str
    b: str
    shared: int
    conflicting: int
    conflicting_keys: list[str]


@dataclass(frozen=True)
class Overlap:
    """How several readable paths overlap: ``identical`` or ``differs`` (in the provenance fields ``differing``),
    the union of keys and each pair."""

    provenance: str
    differing: list[str]
    union: int
    pairs: list[OverlapPair]


@dataclass(frozen=True)
class InspectReport:
    artifacts: list[PathReport]
    overlap: Overlap | None

    @property
    def exit_code(self) -> int:
        return max((artifact.exit_code for artifact in self.artifacts), default=0)

    def to_json(self) -> dict[str, Any]:
        overlap = None if self.overlap is None else asdict(self.overlap)
        return {"artifacts": [artifact.to_json() for artifact in self.artifacts], "overlap": overlap}


@dataclass(frozen=True)
class VerifyResult(_Json):
    """One verified artifact or finding: ``ok``, ``fail`` (damaged, or a shard set that is not one whole run) or
    ``bad_input`` (not an artifact), with one line per problem."""

    path: str
    status: str
    problems: list[str]


@dataclass(frozen=True)
class VerifyReport:
    results: list[VerifyResult]

    @property
    def ok(self) -> bool:
        return all(result.status == "ok" for result in self.results)

    @property
    def exit_code(self) -> int:
        return max(({"ok": 0, "fail": 1}.get(result.status, 2) for result in self.results), default=0)

    def lines(self) -> list[str]:
        """``OK   <path>`` per intact artifact, ``FAIL <problem>`` per problem."""
        lines: list[str] = []
        for result in self.results:
            lines += [f"OK   {result.path}"] if result.status == "ok" else []
            lines += [f"FAIL {problem}" for problem in result.problems]
        return lines

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "results": [result.to_json() for result in self.results]}


def classify_path(item: PathLike | S3Url) -> NotAnArtifact | None:
    """Why ``item`` is not something to open as an artifact, or None when it may be one."""
    path = location(item)
    if not exists(path):
        if find_shards(path) is not None:
            return None
        return NotAnArtifact(
            str(path),
            "missing",
            f"{path} does not exist (and no shard directories {path.name}-shard-*-of-* are beside it); check the path.",
        )
    if isinstance(path, S3Url):
        return None  # opening it says why it is not an artifact (never committed, other objects)
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
    if not path.is_dir():
        return NotAnArtifact(
            str(path),
            "not_artifact",
            f"{path} is not an artifact: an artifact is a directory (with cache.safetensors, manifest.json and "
            "resolved_config.json); give its directory.",
        )
    try:
        names = os.listdir(path)
    except OSError:
        return None  # opening it says why it cannot be read
    if not (path / MANIFEST_NAME).exists():
        children = sorted(
            name for name in names if not name.startswith(".") and (path / name / MANIFEST_NAME).is_file()
        )
        if children:
            more = len(children) - MAX_LISTED_CHILDREN
            return NotAnArtifact(
                str(path),
                "parent",
                f"{path} is a parent directory of {len(children)} artifact(s): "
                f"{', '.join(children[:MAX_LISTED_CHILDREN])}{f' and {more} more' if more > 0 else ''}; inspect "
                "those (or an unsuffixed sharded output) instead.",
                children,
            )
    if not ARTIFACT_FILES.intersection(names):
        return NotAnArtifact(
            str(path),
            "not_artifact",
            f"{path} is not an artifact: it holds none of cache.safetensors, manifest.json and resolved_config.json; "
            "check the path.",
        )
    return None


def _recorded(reader: CacheReader) -> dict[str, Any]:
    """``resolved_config.json`` when it is a JSON object that matches its ``resolved_digest`` (when it has one),
    else an empty dict, so that nothing from an edited or damaged file is shown (verify says what is wrong).
    Each value read from it is type-checked for the same reason."""
    try:
        resolved = read_resolved_config(reader.path)
    except FormatError:
        return {}
    digest = resolved.get(DIGEST_FIELD)
    return {} if digest is not None and digest != with_resolved_digest(resolved)[DIGEST_FIELD] else resolved


def _shard_data_configs(resolved: dict[str, Any], summary: dict[str, Any]) -> list[dict[str, int]] | None:
    """A shard's own counts as its run recorded them (None when unrecorded or malformed)."""
    if summary["shard"] is None:
        return None
    if not summary["data_configs"]:
        return []  # a run without data configs (an artifact written directly): nothing to count
    try:
        return check_data_configs(nested(resolved, "shard", "data_configs"), "shard.data_configs")
    except FormatError:
        return None


def _artifact_report(reader: CacheReader) -> ArtifactReport:
    lengths, summary, provenance = reader.index.lengths, reader.summary, reader.provenance
    resolved = _recorded(reader)
    engine, facts = resolved.get("engine"), nested(resolved, "runtime", "determinism")
    sampling, conflicting = nested(engine, "sampling"), nested(resolved, "samples", "conflicting_prompts")
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
        token_length=TokenLengths(int(lengths.min()), float(np.median(lengths)), int(lengths.max()))
        if len(lengths)
        else None,
        finish_reasons=dict(summary["finish_reasons"]),
        duplicates=summary["duplicates"],
        conflicting_prompts=conflicting if type(conflicting) is int else None,
        data_configs=summary["data_configs"],
        shard_data_configs=_shard_data_configs(resolved, summary),
        shard=summary["shard"],
        engine=name if isinstance(name := nested(engine, "name"), str) else None,
        determinism={**facts, "sampling": sampling if isinstance(sampling, (str, dict)) else None}
        if isinstance(facts, dict)
        else None,
        payload_bytes=reader.payload_bytes,
        header={"capacity": reader.header_capacity, "used": reader.header_json_bytes},
    )


def _open(path: Location) -> CacheReader | UnreadableArtifact:
    try:
        return CacheReader(path)
    except (GencacheError, OSError) as error:
        return UnreadableArtifact(str(path), str(error))
    except UnicodeError:
        return UnreadableArtifact(str(path), _NOT_UNICODE.format(path=path))


def _sharded_report(shards: ShardSet) -> tuple[ShardedReport, list[CacheReader]]:
    opened = {index: _open(path) for index, path in shards.present.items()}
    readers = {i: r for i, r in opened.items() if isinstance(r, CacheReader)}
    reports = [r if isinstance(r, UnreadableArtifact) else _artifact_report(r) for r in opened.values()]
    readable = [r for r in reports if isinstance(r, ArtifactReport)]
    own = [r.shard_data_configs for r in readable if r.shard_data_configs is not None]
    totals = ShardTotals(
        sum(r.entries for r in readable),
        sum(r.sequences for r in readable),
        sum(r.tokens for r in readable),
        sum(r.payload_bytes for r in readable),
        None  # the shards' own counts add up to the run's only when every shard is there and recorded them
        if shards.missing or not own or len(own) != len(reports) or len({len(c) for c in own}) != 1
        else [
            {"index": i, "samples": sum(c[i]["samples"] for c in own), "unique": sum(c[i]["unique"] for c in own)}
            for i in range(len(own[0]))
        ],
    )
    check = check_shard_set(shards, {i: r.summary["shard"] for i, r in readers.items()})
    return ShardedReport(str(shards.base), check, totals, reports), list(readers.values())


def _overlap(named: list[tuple[str, list[CacheReader]]]) -> Overlap:
    digests = [
        {k: e["content_digest"] for reader in reversed(readers) for k, e in reader.manifest["entries"].items()}
        for _, readers in named
    ]
    first = named[0][1][0].provenance
    differing = sorted(
        {f for _, readers in named for r in readers for f in PROVENANCE_FIELDS if r.provenance[f] != first[f]}
    )
    pairs = []
    for i in range(len(named)):
        for j in range(i + 1, len(named)):
            shared = digests[i].keys() & digests[j].keys()
            conflicting = sorted(k for k in shared if digests[i][k] != digests[j][k])
            pairs.append(
                OverlapPair(named[i][0], named[j][0], len(shared), len(conflicting), conflicting[:MAX_LISTED_KEYS])
            )
    union = len(set().union(*digests))
    return Overlap("differs" if differing else "identical", differing, union, pairs)


def inspect_report(paths: Sequence[PathLike]) -> InspectReport:
    """A description of each path (an artifact, a sharded output directory, or why it is neither or cannot be
    read) and, for several readable paths, their overlap (shared and conflicting keys, provenance)."""
    artifacts: list[PathReport] = []
    opened: list[tuple[str, list[CacheReader]]] = []
    for item in paths:
        path = location(item)
        not_artifact = classify_path(path)
        shards = None if not_artifact or exists(path) else find_shards(path)
        if not_artifact is not None:
            artifacts.append(not_artifact)
        elif shards is not None:
            report, readers = _sharded_report(shards)
            artifacts.append(report)
            opened += [(str(path), readers)] if readers else []
        elif isinstance(reader := _open(path), UnreadableArtifact):
            artifacts.append(reader)
        else:
            artifacts.append(_artifact_report(reader))
            opened.append((str(path), [reader]))
    return InspectReport(artifacts, _overlap(opened) if len(opened) > 1 else None)


def verify_report(paths: Sequence[PathLike], progress: VerifyProgressFactory | None = None) -> VerifyReport:
    """Verify every path (a sharded output directory means all its shards and the set's one-run check).

    ``progress(name, total_bytes)``, when given, is entered around the verification of each artifact of at least
    32 MiB and yields the callback that receives the bytes done.
    """
    results: list[VerifyResult] = []
    for item in paths:
        path = location(item)
        not_artifact = classify_path(path)
        if not_artifact is not None:
            results.append(VerifyResult(not_artifact.path, "bad_input", [not_artifact.error]))
            continue
        shards = None if exists(path) else find_shards(path)
        if shards is not None:
            readers = {i: r for i, shard in shards.present.items() if isinstance(r := _open(shard), CacheReader)}
            if problems := check_shard_set(shards, {i: r.summary["shard"] for i, r in readers.items()}).problems:
                results.append(VerifyResult(str(path), "fail", problems))  # a shard not opened: verify() says why
        for target in [path] if shards is None else shards.present.values():
            payload = target / PAYLOAD_NAME
            size = os.stat(payload).st_size if isinstance(payload, Path) and payload.is_file() else 0
            try:
                if progress is not None and size >= PROGRESS_MIN_BYTES:
                    with progress(target.name, size) as advance:
                        found = verify(target, advance)
                else:
                    found = verify(target)
            except UnicodeError:
                found = [_NOT_UNICODE.format(path=target)]
            results.append(VerifyResult(str(target), "fail" if found else "ok", found))
    return VerifyReport(results)
