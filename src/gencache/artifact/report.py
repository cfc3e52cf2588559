"""What ``gencache inspect`` and ``gencache verify`` find: one JSON-ready dict per path, gathered in a report whose
``to_json()`` is what ``--json`` prints and whose ``exit_code`` is its command's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gencache.artifact.manifest import PROVENANCE_FIELDS, check_data_configs
from gencache.artifact.names import ARTIFACT_FILES, FORMAT_VERSION, MANIFEST_NAME, PAYLOAD_NAME, TEMP_RE
from gencache.artifact.reader import CacheReader, ProgressCallback, verify
from gencache.artifact.resolved import DIGEST_FIELD, nested, with_resolved_digest
from gencache.artifact.shards import ShardSet, check_shard_set, find_shards, stray_directory
from gencache.artifact.store import Location, PathLike, exists, listdir, location, read_resolved_config
from gencache.config.paths import S3Url
from gencache.core.errors import FormatError, GencacheError

#: Enters a progress display for one artifact (name, total bytes) and yields its callback.
VerifyProgressFactory = Callable[[str, int], AbstractContextManager[ProgressCallback]]
PROGRESS_MIN_BYTES = 32 * 1024 * 1024
MAX_LISTED_CHILDREN = 10
NOT_ARTIFACT_KINDS = ("missing", "temporary", "stray", "parent", "not_artifact")


def exit_code(report: dict[str, Any]) -> int:
    """2 for a path that is not an artifact, 1 for one that cannot be read or shards that are not one run, else 0."""
    if report["kind"] == "sharded":
        return int(bool(report["shards"]["problems"]) or any(map(exit_code, report["artifacts"])))
    return 2 if report["kind"] in NOT_ARTIFACT_KINDS else int(report["kind"] == "error")


@dataclass(frozen=True)
class InspectReport:
    """One report per path (a dict: ``kind`` ``artifact``, ``sharded``, ``error`` or one of
    :data:`NOT_ARTIFACT_KINDS`) and, for several readable paths, their overlap."""

    artifacts: list[dict[str, Any]]
    overlap: dict[str, Any] | None

    @property
    def exit_code(self) -> int:
        return max(map(exit_code, self.artifacts), default=0)

    def to_json(self) -> dict[str, Any]:
        return {"artifacts": self.artifacts, "overlap": self.overlap}


@dataclass(frozen=True)
class VerifyReport:
    """One ``{path, status, problems}`` per artifact or finding: ``ok``, ``fail`` (damaged, or a shard set that is
    not one whole run) or ``bad_input`` (not an artifact), with one line per problem."""

    results: list[dict[str, Any]]

    @property
    def exit_code(self) -> int:
        return max(({"ok": 0, "fail": 1}.get(result["status"], 2) for result in self.results), default=0)

    def lines(self) -> list[str]:
        """``OK   <path>`` per intact artifact, ``FAIL <problem>`` per problem."""
        lines: list[str] = []
        for found in self.results:  # an intact artifact has no problems, the others one or more
            lines += [f"OK   {found['path']}"] if found["status"] == "ok" else [f"FAIL {p}" for p in found["problems"]]
        return lines

    def to_json(self) -> dict[str, Any]:
        return {"ok": not self.exit_code, "results": self.results}


def _not_artifact(path: Location, kind: str, error: str, children: list[str] | None = None) -> dict[str, Any]:
    return {"path": str(path), "kind": kind, "error": error, **({} if children is None else {"children": children})}


def classify_path(item: PathLike | S3Url) -> dict[str, Any] | None:
    """The report of ``item`` when it is not something to open as an artifact (``error`` says why), or None when
    it may be one."""
    path = location(item)
    if not exists(path):
        if find_shards(path) is not None:
            return None
        return _not_artifact(
            path,
            "missing",
            f"{path} does not exist (and no shard directories {path.name}-shard-*-of-* are beside it); check the path.",
        )
    if isinstance(path, S3Url):
        return None  # opening it says why it is not an artifact (never committed, other objects)
    if TEMP_RE.match(path.name) and path.is_dir():
        return _not_artifact(
            path,
            "temporary",
            f"{path} is the temporary directory of an unfinished gencache run, not an artifact; if that run was "
            f"killed, `gencache clean {path.parent}` removes it (a live run's directory is kept).",
        )
    if (stray := stray_directory(path)) is not None:
        return _not_artifact(path, "stray", stray)
    if (names := listdir(path) if path.is_dir() else []) is None:
        return None  # opening it says why it cannot be read
    if not (path / MANIFEST_NAME).exists():
        children = sorted(
            name for name in names if not name.startswith(".") and (path / name / MANIFEST_NAME).is_file()
        )
        if children:
            more = len(children) - MAX_LISTED_CHILDREN
            return _not_artifact(
                path,
                "parent",
                f"{path} is a parent directory of {len(children)} artifact(s): "
                f"{', '.join(children[:MAX_LISTED_CHILDREN])}{f' and {more} more' if more > 0 else ''}; inspect "
                "those (or an unsuffixed sharded output) instead.",
                children,
            )
    if not ARTIFACT_FILES.intersection(names):
        return _not_artifact(
            path,
            "not_artifact",
            f"{path} is not an artifact (a directory of cache.safetensors, manifest.json and resolved_config.json); "
            "check the path.",
        )
    return None


def _recorded(reader: CacheReader) -> dict[str, Any]:
    """``resolved_config.json`` when it matches its ``resolved_digest`` (when it has one), else an empty dict, so that
    nothing from an edited or damaged file is shown (verify says what is wrong)."""
    try:
        resolved = read_resolved_config(reader.path)
        digest = resolved.get(DIGEST_FIELD)
        matches = digest is None or digest == with_resolved_digest(resolved)[DIGEST_FIELD]
    except (FormatError, UnicodeEncodeError):  # unreadable, or a text that is not valid Unicode: damaged
        return {}
    return resolved if matches else {}


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


def _artifact_report(reader: CacheReader) -> dict[str, Any]:
    lengths, summary, provenance = reader.index.lengths, reader.summary, reader.provenance
    resolved = _recorded(reader)
    engine, facts = resolved.get("engine"), nested(resolved, "runtime", "determinism")
    sampling, conflicting = nested(engine, "sampling"), nested(resolved, "samples", "conflicting_prompts")
    return {
        "path": str(reader.path),
        "kind": "artifact",
        "format_version": FORMAT_VERSION,
        "teacher": provenance["model_path"],
        "tokenizer_path": provenance["tokenizer_path"],
        "tokenizer": dict(provenance["tokenizer"]),
        "dtype": provenance["dtype"],
        "provenance_digest": reader.provenance_digest,
        **{name: summary[name] for name in ("entries", "sequences", "tokens", "duplicates", "data_configs", "shard")},
        "token_length": {"min": int(lengths.min()), "median": float(np.median(lengths)), "max": int(lengths.max())}
        if len(lengths)
        else None,
        "finish_reasons": dict(summary["finish_reasons"]),
        "conflicting_prompts": conflicting if type(conflicting) is int else None,
        "shard_data_configs": _shard_data_configs(resolved, summary),
        "engine": name if isinstance(name := nested(engine, "name"), str) else None,
        "determinism": {**facts, "sampling": sampling if isinstance(sampling, (str, dict)) else None}
        if isinstance(facts, dict)
        else None,
        "payload_bytes": reader.payload_bytes,
        "header": {"capacity": reader.header_capacity, "used": reader.header_json_bytes},
    }


def _open(path: Location) -> CacheReader | dict[str, Any]:
    """A reader of ``path``, or the report of why it cannot be opened."""
    try:
        return CacheReader(path)
    except (GencacheError, OSError) as error:
        return {"path": str(path), "kind": "error", "error": str(error)}


def _sharded_report(shards: ShardSet) -> tuple[dict[str, Any], list[CacheReader]]:
    opened = {index: _open(path) for index, path in shards.present.items()}
    readers = {i: r for i, r in opened.items() if isinstance(r, CacheReader)}
    reports = [_artifact_report(r) if isinstance(r, CacheReader) else r for r in opened.values()]
    readable = [r for r in reports if r["kind"] == "artifact"]
    own = [r["shard_data_configs"] for r in readable if r["shard_data_configs"] is not None]
    counted = ("entries", "sequences", "tokens", "payload_bytes")
    totals: dict[str, Any] = {name: sum(r[name] for r in readable) for name in counted}
    # the shards' own counts add up to the run's only when every shard is there and recorded them
    totals["data_configs"] = (
        None
        if shards.missing or not own or len(own) != len(reports) or len({len(c) for c in own}) != 1
        else [
            {"index": i, "samples": sum(c[i]["samples"] for c in own), "unique": sum(c[i]["unique"] for c in own)}
            for i in range(len(own[0]))
        ]
    )
    check = check_shard_set(shards, {i: r.summary["shard"] for i, r in readers.items()})
    report = {"path": str(shards.base), "kind": "sharded", "shards": check, "totals": totals}
    return {**report, "artifacts": reports}, list(readers.values())


def _overlap(named: list[tuple[str, list[CacheReader]]]) -> dict[str, Any]:
    """Two or more readable paths: which provenance fields differ, the union of their keys, and per pair the keys
    both hold and those whose stored contents differ (the first few)."""
    digests = [
        {k: e["content_digest"] for reader in reversed(readers) for k in reader if (e := reader.metadata(k))}
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
            pair = {"a": named[i][0], "b": named[j][0], "shared": len(shared), "conflicting": len(conflicting)}
            pairs.append({**pair, "conflicting_keys": conflicting[:5]})
    provenance = "differs" if differing else "identical"
    return {"provenance": provenance, "differing": differing, "union": len(set().union(*digests)), "pairs": pairs}


def inspect_report(paths: Sequence[PathLike]) -> InspectReport:
    """A description of each path (an artifact, a sharded output directory, or why it is neither or cannot be
    read) and, for several readable paths, their overlap."""
    artifacts: list[dict[str, Any]] = []
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
        elif isinstance(reader := _open(path), dict):
            artifacts.append(reader)
        else:
            artifacts.append(_artifact_report(reader))
            opened.append((str(path), [reader]))
    return InspectReport(artifacts, _overlap(opened) if len(opened) > 1 else None)


def verify_report(paths: Sequence[PathLike], progress: VerifyProgressFactory | None = None) -> VerifyReport:
    """Verify every path (a sharded output directory means all its shards and the set's one-run check);
    ``progress`` is entered around each artifact of at least :data:`PROGRESS_MIN_BYTES`."""
    results: list[dict[str, Any]] = []
    for item in paths:
        path = location(item)
        not_artifact = classify_path(path)
        if not_artifact is not None:
            results.append({"path": not_artifact["path"], "status": "bad_input", "problems": [not_artifact["error"]]})
            continue
        shards = None if exists(path) else find_shards(path)
        # the set's problems; verify() below says why a shard failed to open
        if shards is not None and (problems := _sharded_report(shards)[0]["shards"]["problems"]):
            results.append({"path": str(path), "status": "fail", "problems": problems})
        for target in [path] if shards is None else shards.present.values():
            payload = target / PAYLOAD_NAME
            size = os.stat(payload).st_size if isinstance(payload, Path) and payload.is_file() else 0
            shown = progress is not None and size >= PROGRESS_MIN_BYTES
            with progress(target.name, size) if shown else nullcontext() as advance:  # type: ignore[misc]
                found = verify(target, advance)
            results.append({"path": str(target), "status": "fail" if found else "ok", "problems": found})
    return VerifyReport(results)
