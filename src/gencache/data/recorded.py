"""The run an artifact records, from the artifact alone: its ``resolved_config.json`` checked, and its samples
rebuilt from it, so ``export``, ``audit``, ``score`` and training without a config trust the same checked values.
"""

from __future__ import annotations

import copy
import datetime
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gencache.artifact.mixture import MultiCacheReader, open_caches
from gencache.artifact.names import RESOLVED_NAME, shard_of
from gencache.artifact.resolved import DIGEST_FIELD, resolved_config_problems
from gencache.artifact.store import Location, read_resolved_config
from gencache.config import CacheConfig, parse_config
from gencache.core.errors import ConfigError, DatasetError, FormatError, GencacheError, SourceChangedError, first_line
from gencache.data.samples import SampleSet, build_samples
from gencache.data.sources import file_sha256


@dataclass(frozen=True)
class RecordedRun:
    """The checked record of the run behind an artifact, a shard or a whole shard set (``paths``): its effective
    config and generation settings. ``shards`` is None when ``paths`` hold the whole run."""

    paths: tuple[Location, ...]
    resolved: Mapping[str, Any]
    config: CacheConfig
    generation: Mapping[str, Any]
    shard_count: int = 1
    shards: tuple[int, ...] | None = None

    def owns(self, key: str) -> bool:
        """Whether the run's sample ``key`` belongs in ``paths`` (always, unless they hold only some shards)."""
        return self.shards is None or shard_of(key, self.shard_count) in self.shards


def _refuse(where: Path, problem: str) -> FormatError:
    return FormatError(
        f"{where}: {problem}; the artifact's record of its run is damaged or was edited, so nothing is taken from "
        "it (gencache verify checks the whole artifact; regenerate it)."
    )


def checked_resolved_config(reader: Any) -> dict[str, Any]:
    """An opened artifact's ``resolved_config.json`` after ``gencache verify``'s checks (else a FormatError)."""
    resolved = read_resolved_config(reader.path)
    problems = resolved_config_problems(resolved, reader.provenance, reader.summary.get("shard"))
    if problems:
        raise _refuse(reader.path / RESOLVED_NAME, problems[0])
    return resolved


def run_of_readers(readers: Sequence[Any]) -> RecordedRun:
    """The checked :class:`RecordedRun` of opened ``readers`` (one artifact, or shards of one run), from the first
    one's ``resolved_config.json`` (the sources are not hashed here)."""
    first = readers[0]
    where = first.path / RESOLVED_NAME
    resolved = checked_resolved_config(first)
    if "config" not in resolved and "gencache_version" not in resolved:
        raise ConfigError(
            f"{where} records no run config (the artifact was not made by gencache generate), so its samples "
            "cannot be rebuilt from it; pass the data configs it was generated from."
        )
    if not isinstance(resolved.get(DIGEST_FIELD), str):
        raise _refuse(where, f"it has no {DIGEST_FIELD} (the field was removed)")
    try:
        config = parse_config(copy.deepcopy(dict(resolved["config"])), origin=str(where))
    except GencacheError as error:
        raise _refuse(where, f"its config does not parse ({first_line(error)})") from None
    count, shards = 1, None
    records = [reader.summary.get("shard") for reader in readers]  # each artifact's shard (None: the whole run)
    if records[0] is not None and len(records) != records[0]["count"]:
        count, shards = int(records[0]["count"]), tuple(sorted(int(record["index"]) for record in records))
    paths = tuple(reader.path for reader in readers)
    return RecordedRun(paths, resolved, config, resolved["generation"], shard_count=count, shards=shards)


def _relocated(source: Mapping[str, Any], data_root: Path | None) -> dict[str, str]:
    """The source's files (path -> recorded sha256), moved under ``data_root`` by the location's last component."""
    location = str(source["location"])
    files = {str(entry["path"]): str(entry["sha256"]) for entry in source["files"]}
    if data_root is None or source.get("kind") not in ("directory", "file"):
        return files
    moved = data_root / Path(location).name
    if source.get("kind") == "file":
        return {str(moved): digest for digest in files.values()}
    return {str(moved / os.path.relpath(path, location)): digest for path, digest in files.items()}


WAYS_FORWARD = (
    "restore the file the run read; or train on the data as it is now with "
    'DistillationDataset(ARTIFACT, tokenizer, config=CONFIG, missing="skip") (a sample whose key the cache lacks '
    "is left out); or export the answers without prompts (gencache export ARTIFACT --no-prompts --out FILE); or "
    "regenerate"
)


def rebuild_samples(
    run: RecordedRun,
    tokenizer: Any | None = None,
    *,
    sources: Mapping[int, str] | None = None,
    data_root: str | os.PathLike[str] | None = None,
) -> SampleSet:
    """The run's samples, rebuilt from its recorded config (tokenized when ``tokenizer`` is given).

    ``sources`` (``--source I=PATH``) reads some data configs from elsewhere; ``data_root`` (``--data-root``) holds
    the recorded local sources by their last path component. Every recorded local source file is hashed again
    first, so a file that is gone or changed is refused in one line before its rows are read."""
    chosen, count = dict(sources or {}), len(run.config.data_configs)
    for index in chosen:
        if type(index) is not int or not 0 <= index < count:
            raise ConfigError(f"--source {index}=...: the run has data configs 0..{count - 1}.")
    root = None if data_root is None else Path(data_root).expanduser().absolute()
    for index, source in enumerate(run.resolved["sources"]):
        if index in chosen:
            continue
        for name, recorded in _relocated(source, root).items():
            file = Path(name)
            if not file.is_file():
                raise DatasetError(
                    f"data_configs[{index}]: the recorded source file {file} is gone; restore it, or point "
                    "--data-root/--source (data_root/sources) at the data."
                )
            if (found := file_sha256(file)) != recorded:  # its size and mtime now help find what changed it
                stat = file.stat()
                when = datetime.datetime.fromtimestamp(stat.st_mtime, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
                raise SourceChangedError(
                    f"data_configs[{index}]: source file {file} changed since generation (sha256 {recorded[:12]}... "
                    f"recorded, {found[:12]}... now; now {stat.st_size:,} bytes, modified {when}), so its rows no "
                    f"longer give the run's prompts: {WAYS_FORWARD}."
                )
    config = run.config
    if chosen or root is not None:  # each data config's source replaced, or moved under data_root
        raw = copy.deepcopy(dict(run.resolved["config"]))
        for index, data_config in enumerate(raw["data_configs"]):
            if index in chosen:
                data_config["source"] = chosen[index]
            elif root is not None and isinstance(data_config.get("source"), str):
                data_config["source"] = str(root / Path(data_config["source"]).name)
        config = parse_config(raw, origin=f"{run.paths[0] / RESOLVED_NAME} with the sources given")
    samples = build_samples(config, tokenizer)
    for summary in samples.summaries:  # the rebuild must read the files (or hub tables) the run read
        if summary.index in chosen:
            continue
        index, info, recorded = summary.index, summary.source, run.resolved["sources"][summary.index]
        files, read = _relocated(recorded, root), dict(info.files)  # the digests were checked above
        for name in sorted(set(read) ^ set(files)):
            what = "was not read by the run" if name not in files else "was read by the run but not now"
            raise SourceChangedError(f"data_configs[{index}]: source file {name} {what}: {WAYS_FORWARD}.")
        fingerprints = recorded.get("fingerprints")
        if info.kind == "hub" and isinstance(fingerprints, dict) and fingerprints != dict(info.fingerprints):
            raise SourceChangedError(
                f"data_configs[{index}]: hub dataset {info.location} changed since generation (its fingerprints "
                "differ); pin the revision the run read, or regenerate."
            )
    return samples


def open_recorded_run(path: str | os.PathLike[str]) -> tuple[Any, RecordedRun]:
    """The reader of ``path`` (an artifact, one shard, or a shard base) and the checked record of its run."""
    reader = open_caches(path)
    return reader, run_of_readers(list(reader.readers) if isinstance(reader, MultiCacheReader) else [reader])


def recorded_directory(path: str, what: str, option: str) -> str:
    """``path``, a teacher or tokenizer the run used, refused when it was a local directory that is gone (the run
    recorded local directories as absolute paths, and a hub id is never one)."""
    if os.path.isabs(path) and not os.path.isdir(path):
        raise ConfigError(f"the {what} directory the run used, {path}, is gone (moved or deleted); {option}.")
    return path


def load_recorded_tokenizer(run: RecordedRun, path: str | None = None, *, moved: str = "restore it") -> Any:
    """The tokenizer at ``path``, else the run's (``moved``: what to do when it is gone), prepared as for generation."""
    from gencache.generation.teacher import load_tokenizer

    model = run.config.model
    path = path or recorded_directory(model.effective_tokenizer_path, "tokenizer", moved)
    return load_tokenizer(path, revision=model.revision)
