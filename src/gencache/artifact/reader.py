"""Reading format-3 artifacts: one memory map, zero-copy entries, lazy digest checks, mixtures, verification.

:class:`CacheReader` checks everything that needs no tensor data when it opens (SPEC section 8), maps the payload
once with ``torch.UntypedStorage.from_file(path, shared=False, ...)`` and serves ``reader[key]`` as views of that
map. The tensor and content digests of an entry are checked the first time it is read. :func:`open_caches`
combines artifacts (and expands a sharded output directory); :func:`verify` re-hashes a whole artifact.
This module imports torch, never transformers.
"""

from __future__ import annotations

import abc
import copy
import json
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, KeysView, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gencache.artifact.format import (
    ARTIFACT_FILES,
    LENGTH_PREFIX_BYTES,
    MANIFEST_NAME,
    PAYLOAD_NAME,
    PROVENANCE_FIELDS,
    RESOLVED_NAME,
    TOKEN_BYTES,
    check_header,
    check_manifest,
    content_digest,
    is_canonical_header,
    json_file_bytes,
    parse_header,
    read_length_prefix,
)
from gencache.artifact.shards import ShardSet, check_shard_set, expand_output, find_shards
from gencache.canonical import sha256_hex
from gencache.errors import (
    CompatibilityError,
    FormatError,
    GencacheError,
    IntegrityError,
    MissingEntriesError,
    MissingEntryError,
    ShardError,
)
from gencache.tokenizer import tokenizer_state

PathLike = str | os.PathLike[str]
ProgressCallback = Callable[[int, int], None]
MAX_LISTED_PROBLEMS = 100


@dataclass(frozen=True, eq=False)
class Generation:
    """The teacher's answer for one key: 1-D int64 CPU tensors (views of the map), texts and finish reasons."""

    key: str
    sequences: tuple[torch.Tensor, ...]
    texts: tuple[str, ...]
    finish_reasons: tuple[str, ...]


def _read_regular(path: Path, what: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise FormatError(f"{what} {path} cannot be opened ({error.strerror}).") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FormatError(f"{what} {path} is not a regular file.")
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read()
    finally:
        os.close(fd)


def read_resolved_config(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed ``resolved_config.json`` of an artifact directory (provenance only); :class:`FormatError` when it
    is missing, not a regular file or not a JSON object."""
    path = Path(directory) / RESOLVED_NAME
    raw = _read_regular(path, "Resolved config")
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise FormatError(f"Resolved config {path} is not valid UTF-8 JSON ({error}).") from None
    if not isinstance(value, dict):
        raise FormatError(f"Resolved config {path} does not hold a JSON object.")
    return value


def _dtype_name(dtype: str | torch.dtype) -> str:
    if isinstance(dtype, torch.dtype):
        return str(dtype).removeprefix("torch.")
    return str(dtype)


class _CacheAPI(abc.ABC):
    """What :class:`CacheReader` and :class:`MultiCacheReader` share; subclasses provide the lookups."""

    provenance: dict[str, Any]
    provenance_digest: str

    @abc.abstractmethod
    def _describe(self) -> str: ...

    @abc.abstractmethod
    def keys(self) -> KeysView[str]: ...

    @abc.abstractmethod
    def __getitem__(self, key: str) -> Generation:
        """The entry of ``key``: zero-copy int64 views of one private memory map of the payload, its texts and
        finish reasons. ``.clone()`` a tensor before modifying it in place: an in-place edit would change what
        later reads of that key return in this process (the file itself is never written)."""

    def __len__(self) -> int:
        return len(self.keys())

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def get(self, key: str) -> Generation | None:
        """The entry for ``key``, or None when the cache does not hold it."""
        return self[key] if key in self.keys() else None

    def _missing(self, key: object) -> MissingEntryError:
        return MissingEntryError(
            f"Key {key!r} is not in the cache {self._describe()}; the sample was not generated for this artifact "
            "(check the data configs, or use .get() to test membership)."
        )

    def require(self, keys: Iterable[str]) -> None:
        """Coverage check: raise :class:`MissingEntriesError` unless every key is present."""
        wanted = set(keys)
        available = self.keys()
        missing = sorted(k for k in wanted if k not in available)
        if missing:
            raise MissingEntriesError(
                f"Generation cache {self._describe()} is missing {len(missing)} required semantic samples "
                f"(of {len(wanted)} unique keys; first: {missing[0]}); generate an artifact for those data configs "
                "or add the artifact that holds them."
            )

    def check_compatible(
        self, *, model_path: str, tokenizer_path: str, dtype: str | torch.dtype, tokenizer: Any
    ) -> None:
        """Raise one :class:`CompatibilityError` naming every provenance field that differs from the training
        setup (paths as exact strings, dtype as a string or ``torch.dtype``, the tokenizer state)."""
        ours = self.provenance
        requested = {
            "model_path": model_path,
            "tokenizer_path": tokenizer_path,
            "dtype": _dtype_name(dtype),
            "tokenizer": tokenizer_state(tokenizer),
        }
        differences = [
            f"{field} (cache {ours[field]!r}, requested {requested[field]!r})"
            for field in PROVENANCE_FIELDS
            if ours[field] != requested[field]
        ]
        if differences:
            hint = (
                "; pass the training tokenizer through gencache.prepare_tokenizer() so its padding side and pad id "
                "match generation"
                if ours["tokenizer"] != requested["tokenizer"]
                else ""
            )
            raise CompatibilityError(
                f"Generation cache {self._describe()} is incompatible with the training setup: "
                f"{'; '.join(differences)}{hint}; or regenerate the cache with this teacher."
            )


class CacheReader(_CacheAPI):
    """One format-3 artifact, opened without reading tensor data.

    ``reader[key]`` returns a :class:`Generation` of zero-copy views (raising :class:`MissingEntryError`, also a
    ``KeyError``); ``get`` returns None instead. The first read of a key checks its tensor and content digests
    (:class:`IntegrityError` on mismatch). Picklable: unpickling reopens and rechecks the artifact.
    """

    def __init__(self, path: PathLike) -> None:
        self.path = Path(path).expanduser().absolute()
        self._open()

    def _describe(self) -> str:
        return str(self.path)

    def _fail(self, message: str) -> FormatError:
        return FormatError(f"{self.path}: {message}")

    def _open(self) -> None:
        if sys.byteorder != "little":
            raise FormatError("gencache artifacts store little-endian int64 tokens; this host is big-endian.")
        path = self.path
        try:
            names = set(os.listdir(path))
        except FileNotFoundError:
            raise FormatError(f"Cache directory {path} does not exist; check the path (or generate it).") from None
        except NotADirectoryError:
            raise FormatError(f"Cache path {path} is not a directory.") from None
        except OSError as error:
            raise FormatError(f"Cache directory {path} cannot be listed ({error.strerror}).") from None
        if names != ARTIFACT_FILES:
            extra, missing = sorted(names - ARTIFACT_FILES), sorted(ARTIFACT_FILES - names)
            raise self._fail(
                "an artifact directory holds exactly cache.safetensors, manifest.json and resolved_config.json "
                f"(missing: {', '.join(missing) or 'none'}; extra: {', '.join(extra) or 'none'}); move other files "
                "elsewhere or regenerate."
            )
        for name in sorted(ARTIFACT_FILES):
            try:
                mode = os.lstat(path / name).st_mode
            except OSError as error:
                raise self._fail(f"{name} cannot be read ({error.strerror}).") from None
            if not stat.S_ISREG(mode):
                kind = "a symlink" if stat.S_ISLNK(mode) else "not a regular file"
                raise self._fail(f"{name} is {kind}; artifact files must be regular files (copy, do not link).")
        raw_manifest = _read_regular(path / MANIFEST_NAME, "Manifest")
        try:
            parsed = json.loads(raw_manifest.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            raise self._fail(f"manifest.json is not valid UTF-8 JSON ({error}); the artifact is damaged.") from None
        try:
            manifest = check_manifest(parsed)
        except FormatError as error:
            raise self._fail(str(error)) from None
        payload = path / PAYLOAD_NAME
        try:
            fd = os.open(payload, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as error:
            raise self._fail(f"{PAYLOAD_NAME} cannot be opened ({error.strerror}).") from None
        try:
            size = os.fstat(fd).st_size
            try:
                capacity = read_length_prefix(os.pread(fd, LENGTH_PREFIX_BYTES, 0), size)
                raw = _pread_exact(fd, capacity, LENGTH_PREFIX_BYTES)
                header = parse_header(raw)
                starts = check_header(header, manifest, size)
            except FormatError as error:
                raise self._fail(str(error)) from None
        finally:
            os.close(fd)
        self.manifest: dict[str, Any] = manifest.raw
        self.summary: dict[str, Any] = manifest.summary
        self.provenance = manifest.provenance
        self.provenance_digest = manifest.provenance_digest
        self.header_capacity = capacity
        self.header_json_bytes = header.json_length
        self.payload_bytes = size
        self._entries = manifest.entries
        self._starts = starts
        self._data_offset = LENGTH_PREFIX_BYTES + capacity
        self._verified: set[str] = set()
        try:
            self._storage: torch.UntypedStorage = torch.UntypedStorage.from_file(  # type: ignore[assignment]
                str(payload), shared=False, nbytes=size
            )
        except RuntimeError as error:
            raise self._fail(f"{PAYLOAD_NAME} cannot be memory-mapped ({error}).") from None

    # -- mapping API --------------------------------------------------------------------------------------
    def keys(self) -> KeysView[str]:
        """Keys in manifest (sorted) order."""
        return self._entries.keys()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: str) -> Generation | None:
        return self[key] if key in self._entries else None

    def metadata(self, key: str) -> dict[str, Any] | None:
        """A copy of the manifest entry for ``key`` (tensor refs, text, finish reasons, digests), or None."""
        entry = self._entries.get(key)
        return copy.deepcopy(entry) if entry is not None else None

    def __getitem__(self, key: str) -> Generation:
        entry = self._entries.get(key) if isinstance(key, str) else None
        if entry is None:
            raise self._missing(key)
        sequences = tuple(
            self._view(start, ref["shape"][0]) for start, ref in zip(self._starts[key], entry["sequences"], strict=True)
        )
        if key not in self._verified:
            problems = _entry_problems(key, entry, [_digest_tensor(t) for t in sequences])
            if problems:
                raise IntegrityError(
                    f"{self.path}: {problems[0]}; the artifact is damaged (run gencache verify), regenerate it or "
                    "restore a copy."
                )
            self._verified.add(key)
        return Generation(key, sequences, tuple(entry["text"]), tuple(entry["finish_reasons"]))

    def _view(self, start: int, length: int) -> torch.Tensor:
        offset = (self._data_offset + start) // TOKEN_BYTES
        return torch.empty(0, dtype=torch.int64).set_(self._storage, offset, (length,), (1,))

    # -- pickling (DataLoader workers reopen the map) -----------------------------------------------------
    def __getstate__(self) -> dict[str, str]:
        return {"path": str(self.path), "provenance_digest": self.provenance_digest}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.path = Path(state["path"])
        self._open()
        if self.provenance_digest != state["provenance_digest"]:
            raise self._fail("the artifact changed since the reader was pickled (another provenance).")

    def __repr__(self) -> str:
        return f"CacheReader({str(self.path)!r}, entries={len(self)})"

    # -- full verification ----------------------------------------------------------------------------------
    def _verify_all(self, progress: ProgressCallback | None) -> list[str]:
        problems: list[str] = []
        raw_manifest = _read_regular(self.path / MANIFEST_NAME, "Manifest")
        if raw_manifest != json_file_bytes(self.manifest):
            problems.append("manifest.json is not canonical JSON plus a newline (it was edited)")
        raw_resolved = _read_regular(self.path / RESOLVED_NAME, "Resolved config")
        try:
            resolved = json.loads(raw_resolved.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            problems.append(f"resolved_config.json is not valid UTF-8 JSON ({error})")
        else:
            if not isinstance(resolved, dict):
                problems.append("resolved_config.json does not hold a JSON object")
            elif raw_resolved != json_file_bytes(resolved):
                problems.append("resolved_config.json is not canonical JSON plus a newline (it was edited)")
        tensors = sorted((start, key, i) for key, starts in self._starts.items() for i, start in enumerate(starts))
        total = self.payload_bytes
        with open(self.path / PAYLOAD_NAME, "rb", buffering=8 * 1024 * 1024) as handle:
            raw = handle.read(self._data_offset)
            if not is_canonical_header(raw[LENGTH_PREFIX_BYTES:]):
                problems.append(f"{PAYLOAD_NAME} header is not canonical JSON padded with spaces (it was edited)")
            done = len(raw)
            digests = {key: [""] * len(starts) for key, starts in self._starts.items()}
            for _start, key, i in tensors:
                length = self._entries[key]["sequences"][i]["shape"][0] * TOKEN_BYTES
                data = handle.read(length)
                digests[key][i] = sha256_hex(data)
                done += len(data)
                if progress is not None:
                    progress(done, total)
        for key, entry in self._entries.items():
            problems.extend(_entry_problems(key, entry, digests.get(key, [])))
        if progress is not None:
            progress(total, total)
        return problems


def _pread_exact(fd: int, length: int, offset: int) -> bytes:
    chunks = []
    while length:
        chunk = os.pread(fd, min(length, 64 * 1024 * 1024), offset)
        if not chunk:
            raise FormatError(f"{PAYLOAD_NAME} ended early (truncated).")
        chunks.append(chunk)
        length -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _digest_tensor(tensor: torch.Tensor) -> str:
    return sha256_hex(tensor.numpy().data)


def _entry_problems(key: str, entry: dict[str, Any], digests: Sequence[str]) -> list[str]:
    problems = []
    refs = entry["sequences"]
    for ref, digest in zip(refs, digests, strict=False):
        if digest != ref["digest"]:
            problems.append(f"tensor {ref['tensor']} digest mismatch (the payload bytes changed)")
    if len(digests) != len(refs):
        problems.append(f"entry {key} has {len(digests)} of its {len(refs)} tensors in the payload")
    if content_digest(refs, entry["text"], entry["finish_reasons"]) != entry["content_digest"]:
        problems.append(f"entry {key} content_digest mismatch (its texts, finish reasons or digests were changed)")
    return problems


def verify(path: PathLike, progress: ProgressCallback | None = None) -> list[str]:
    """Check one artifact completely: every open-time check, canonical manifest and header, a JSON-object
    resolved config, every tensor digest (re-hashed from the file) and every content digest.

    Returns the problems found (empty means the artifact is intact); ``progress(done_bytes, total_bytes)`` is
    called while hashing.
    """
    try:
        reader = CacheReader(path)
        problems = reader._verify_all(progress)
    except GencacheError as error:
        return [str(error)]
    except OSError as error:
        return [f"{path}: {error.strerror or error} while reading"]
    if len(problems) > MAX_LISTED_PROBLEMS:
        problems = [*problems[:MAX_LISTED_PROBLEMS], f"... and {len(problems) - MAX_LISTED_PROBLEMS} more problems"]
    return [f"{reader.path}: {problem}" for problem in problems]


def _expand(path: PathLike) -> tuple[list[Path], ShardSet | None]:
    expanded, shards = expand_output(path)
    if shards is None and not os.path.lexists(expanded[0]):
        raise FormatError(
            f"Cache directory {expanded[0]} does not exist (and no shard directories {expanded[0].name}-shard-*-of-* "
            "are beside it); check the path."
        )
    if shards is not None and (shards.missing or shards.other_splits):
        raise ShardError(" ".join(check_shard_set(shards, {}).problems()))
    return expanded, shards


# -- mixtures -----------------------------------------------------------------------------------------------
class MultiCacheReader(_CacheAPI):
    """Several artifacts with identical provenance read as one cache (same API as :class:`CacheReader`).

    Keys are the union; a key present in several artifacts must have the same content digest everywhere
    (checked at open), and the first artifact holding it serves it.
    """

    def __init__(self, readers: Sequence[CacheReader]) -> None:
        if not readers:
            raise FormatError("A mixture needs at least one artifact.")
        self.readers = tuple(readers)
        first = self.readers[0]
        for reader in self.readers[1:]:
            if reader.provenance_digest != first.provenance_digest:
                fields = [f for f in PROVENANCE_FIELDS if reader.provenance[f] != first.provenance[f]]
                raise CompatibilityError(
                    f"Generation caches {first.path} and {reader.path} have incompatible provenance (differing: "
                    f"{', '.join(fields)}); mix only artifacts of one teacher, tokenizer state and dtype."
                )
        self.provenance = first.provenance
        self.provenance_digest = first.provenance_digest
        owners: dict[str, int] = {}
        for position, reader in enumerate(self.readers):
            for key, entry in reader._entries.items():
                owner = owners.setdefault(key, position)
                if owner != position:
                    other = self.readers[owner]._entries[key]
                    if other["content_digest"] != entry["content_digest"]:
                        raise FormatError(
                            f"Generation caches contain conflicting duplicate key {key}: {self.readers[owner].path} "
                            f"and {reader.path} store different generations for it; drop one of the artifacts."
                        )
        self._owners = owners

    @property
    def paths(self) -> tuple[Path, ...]:
        return tuple(reader.path for reader in self.readers)

    def _describe(self) -> str:
        return f"({', '.join(str(p) for p in self.paths)})"

    def keys(self) -> KeysView[str]:
        return self._owners.keys()

    def __len__(self) -> int:
        return len(self._owners)

    def __contains__(self, key: object) -> bool:
        return key in self._owners

    def __getitem__(self, key: str) -> Generation:
        owner = self._owners.get(key) if isinstance(key, str) else None
        if owner is None:
            raise self._missing(key)
        return self.readers[owner][key]

    def get(self, key: str) -> Generation | None:
        return self[key] if key in self._owners else None

    def metadata(self, key: str) -> dict[str, Any] | None:
        owner = self._owners.get(key)
        return None if owner is None else self.readers[owner].metadata(key)

    def source(self, key: str) -> Path:
        """The artifact that serves ``key``."""
        owner = self._owners.get(key)
        if owner is None:
            raise self._missing(key)
        return self.readers[owner].path

    def __repr__(self) -> str:
        return f"MultiCacheReader({[str(p) for p in self.paths]!r}, entries={len(self)})"


def open_caches(paths: PathLike | Sequence[PathLike]) -> CacheReader | MultiCacheReader:
    """Open one artifact or a mixture.

    A path that does not exist but has shard siblings ``<path>-shard-IIIII-of-NNNNN`` stands for all N shards
    (every shard must exist and come from the same run). The same directory twice (even through a symlink),
    differing provenance or a key stored with different content in two artifacts are errors.
    """
    items: list[PathLike] = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not items:
        raise FormatError("open_caches needs at least one artifact path.")
    groups = [_expand(item) for item in items]
    seen: dict[str, Path] = {}
    for expanded, _ in groups:
        for path in expanded:
            real = os.path.realpath(path)
            if real in seen:
                raise FormatError(
                    f"Cache paths {seen[real]} and {path} are the same directory ({real}); list each artifact once."
                )
            seen[real] = path
    readers: list[CacheReader] = []
    for expanded, shards in groups:
        opened = [CacheReader(path) for path in expanded]
        if shards is not None:
            infos = {index: reader.summary["shard"] for index, reader in zip(shards.present, opened, strict=True)}
            problems = check_shard_set(shards, infos).problems()
            if problems:
                raise ShardError(" ".join(problems))
        readers.extend(opened)
    return readers[0] if len(readers) == 1 else MultiCacheReader(readers)


__all__ = [
    "CacheReader",
    "Generation",
    "MultiCacheReader",
    "ShardSet",
    "find_shards",
    "open_caches",
    "verify",
]
