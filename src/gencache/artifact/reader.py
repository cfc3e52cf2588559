"""Reading format-3 artifacts: a compact checked index, one memory map, zero-copy entries, lazy digest checks.

:class:`GenerationCache` is what every cache offers (this reader and a mixture). :func:`verify` re-hashes a whole
artifact; :func:`is_published` recognises one a run published without reading its payload. torch is imported only
when a read builds the first tensor, so opening, verifying and :meth:`CacheReader.get_arrays` need none.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import numpy as np

from gencache.artifact._index import OTHERS, TEXTS, CompactIndex, build_index, check_payload, manifest_tail
from gencache.artifact.cache import GenerationCache
from gencache.artifact.header import read_length_prefix
from gencache.artifact.manifest import check_manifest, content_digest, json_file_bytes
from gencache.artifact.names import (
    ARTIFACT_FILES,
    FINISH_REASONS,
    LENGTH_PREFIX_BYTES,
    MANIFEST_NAME,
    PAYLOAD_NAME,
    RESOLVED_NAME,
    TEMP_RE,
    TOKEN_BYTES,
    files_problem,
)
from gencache.artifact.remote import RemoteArtifact
from gencache.artifact.resolved import resolved_config_problems
from gencache.artifact.shards import find_shards
from gencache.artifact.store import Location, PathLike, location, open_regular, read_regular, read_resolved_config
from gencache.config.paths import S3Url
from gencache.core.errors import FormatError, GencacheError, IntegrityError


# -- reading the files of an artifact (regular files only, never through a symlink) ------------------------------
def check_artifact_files(path: Path) -> None:
    """Raise :class:`FormatError` unless ``path`` is a published directory of exactly the three artifact files, each
    a regular file (no symlink). A writer's temporary directory is refused by its name, even complete: a run killed
    before its rename leaves one, and what was never published is not an artifact."""
    if TEMP_RE.match(path.name):
        raise FormatError(
            f"{path} is the temporary directory of a gencache run that never published it (killed before its "
            f"rename); it is not an artifact: `gencache clean {path.parent}` removes it once its writer is gone."
        )
    try:
        with os.scandir(path) as listing:
            found = {entry.name: entry for entry in listing}
        if problem := files_problem(path, set(found)):
            raise FormatError(problem)
        for name in sorted(ARTIFACT_FILES):
            if not found[name].is_file(follow_symlinks=False):
                kind = "a symlink" if found[name].is_symlink() else "not a regular file"
                raise FormatError(f"{path}: {name} is {kind}; artifact files must be regular files (copy, not link).")
    except FileNotFoundError:  # a shard base (its shards beside it) is opened with open_caches
        if (shards := find_shards(path)) is None:
            raise FormatError(f"Cache directory {path} does not exist; check the path (or generate it).") from None
        raise FormatError(
            f"{path} is the base of {len(shards.present)} shard directories ({path.name}-shard-*-of-"
            f"{shards.count:05d}), not one artifact: open the shards together with gencache.open_caches("
            f"{str(path)!r}) (CacheReader opens one artifact or one shard directory)."
        ) from None
    except OSError as error:
        raise FormatError(f"Cache directory {path} cannot be read ({error.strerror}).") from None


ProgressCallback = Callable[[int, int], None]
MAX_LISTED_PROBLEMS = 100


def is_published(path: PathLike | S3Url, run_digest: str) -> bool:
    """Whether ``path`` is an artifact that the run of ``run_digest`` published, recognised by what its publish
    guarantees (the open-time checks: files, the manifest's members after its entries, the header, the payload's
    size) and the run digest its resolved config records, without reading its entries or its payload (``verify``
    is the full check). :class:`FormatError` names what is wrong with one that is not whole."""
    where = location(path)
    if isinstance(where, S3Url):  # by range: the payload's header and the manifest's few KiB after its entries
        remote = RemoteArtifact(where)
        size, header_raw = remote.payload_head()
        manifest_size, length, tail = remote.sizes[MANIFEST_NAME], 1024, b""
        while OTHERS not in tail and len(tail) < manifest_size:
            length *= 4
            tail = remote.read(MANIFEST_NAME, max(manifest_size - length, 0))
        try:
            check_payload(manifest_tail(tail)[1], header_raw, size)
        except FormatError as error:
            raise FormatError(f"{where}: {error}") from None
    else:
        CacheReader(where)  # maps the manifest, reads its members after the entries and the payload's header
    return read_resolved_config(where).get("run_digest") == run_digest


class CacheReader(GenerationCache):
    """One format-3 artifact, opened without reading tensor data or the manifest's entries (the index of
    :mod:`gencache.artifact._index`).

    Each returned tensor has its own small storage that points into one private map of the payload, so it crosses
    process boundaries (DataLoader workers under fork or spawn) as exactly its own bytes. Unpickling reopens the
    artifact and refuses one whose entries differ. The reader keeps the payload file it opened (its descriptor,
    until the map is made), so replacing the directory or renaming another file over the payload does not affect
    it. Artifacts are immutable and the reader trusts that: an entry is checked against the header and its digests
    once, on its first read (:class:`FormatError`, :class:`IntegrityError`), and served from the map after that.
    """

    _tokens: np.ndarray[Any, np.dtype[np.int64]] | RemoteArtifact | None

    def __init__(self, path: PathLike | S3Url, *, download: bool = True, cache_dir: PathLike | None = None) -> None:
        self.path: Location = location(path)
        self.download = download
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self.paths = (self.path,)
        if sys.byteorder != "little":
            raise FormatError("gencache artifacts store little-endian int64 tokens; this host is big-endian.")
        self._remote = RemoteArtifact(self.path, self.cache_dir) if isinstance(self.path, S3Url) else None
        if self._remote is None:
            check_artifact_files(cast(Path, self.path))
        fd = open_regular(self._file(MANIFEST_NAME), "Manifest")
        try:  # a read-only shared map: file-backed pages that forked processes share
            manifest = mmap.mmap(fd, 0, prot=mmap.PROT_READ) if os.fstat(fd).st_size else b""
        finally:
            os.close(fd)
        # the payload (on a bucket: if a process of this node downloaded it, else its header is read by range),
        # kept open until it is mapped (get_arrays reads it, the map is made from it): the file opened here
        payload = (self._remote.cache if self._remote is not None else cast(Path, self.path)) / PAYLOAD_NAME
        self._fd = open_regular(payload, PAYLOAD_NAME) if self._remote is None or payload.exists() else None
        if self._fd is not None:
            self._close_fd = weakref.finalize(self, os.close, self._fd)
        try:
            if self._fd is None:
                self.payload_bytes, header_raw = cast(RemoteArtifact, self._remote).payload_head()
            else:
                self.payload_bytes = os.fstat(self._fd).st_size
                capacity = read_length_prefix(os.pread(self._fd, LENGTH_PREFIX_BYTES, 0), self.payload_bytes)
                header_raw = os.pread(self._fd, capacity, LENGTH_PREFIX_BYTES)  # the prefix checked it fits
            index = build_index(manifest, header_raw, self.payload_bytes)
        except BaseException as error:
            if self._fd is not None:
                self._close_fd()
            if isinstance(error, FormatError):
                raise FormatError(f"{self.path}: {error}") from None
            raise
        self.header_capacity = len(header_raw)
        self._tokens = None
        self._mapping = threading.Lock()  # threads that read first at once map the payload once
        self.index: CompactIndex = index  # the checked index (flat arrays; read-only by convention)
        self.summary: dict[str, Any] = index.members["summary"]
        self.provenance: dict[str, Any] = index.members["provenance"]
        self.provenance_digest: str = index.members["provenance_digest"]
        self.header_json_bytes = header_raw.rfind(b"}") + 1  # the JSON before its padding, without copying it
        self._data_offset = LENGTH_PREFIX_BYTES + self.header_capacity
        # filled on an entry's first read, once it is checked (zeros until then): a row per entry of its first
        # sequence's token start and length in the map and where its texts' JSON is in the manifest (one row, so
        # that a later read costs one memory access), and its sequences' finish-reason codes
        self._rows = np.zeros((len(index.keys), 4), dtype=np.int64)
        self._manifest = memoryview(index.manifest)  # texts are decoded from it without a copy
        self._reasons = np.zeros(len(index.starts), dtype=np.uint8)
        self._single = len(index.starts) == len(index.keys)  # one sequence per entry (every entry has at least one)

    def _map(self) -> np.ndarray[Any, np.dtype[np.int64]] | RemoteArtifact:
        """The one private (copy-on-write) map of the payload file this reader opened, as int64 tokens, made on
        first use (on a bucket: of the payload downloaded into the local cache, or range reads without it)."""
        with self._mapping:
            if self._tokens is not None:  # another thread mapped it meanwhile
                return self._tokens
            if self._fd is None:  # on a bucket, not downloaded yet
                assert self._remote is not None
                if not self.download:
                    self._tokens = self._remote
                    return self._tokens
                self._fd = open_regular(self._remote.local(PAYLOAD_NAME), PAYLOAD_NAME)
                self._close_fd = weakref.finalize(self, os.close, self._fd)
            try:
                mapped = mmap.mmap(self._fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            except (OSError, ValueError) as error:
                raise FormatError(f"{self.path}: {PAYLOAD_NAME} cannot be memory-mapped ({error}).") from None
            self._tokens = np.frombuffer(mapped, dtype="<i8")
            self._fd = None
            self._close_fd()
            return self._tokens

    # -- mapping -------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.index.keys)

    def __iter__(self) -> Iterator[str]:
        """Keys in sorted (manifest) order."""
        return self.index.iter_keys()

    def _position(self, key: object) -> int:
        return self.index.find(key)

    def metadata(self, key: str) -> dict[str, Any] | None:
        position = self.index.find(key)
        return None if position < 0 else self._manifest_entry(position)[0]

    def _file(self, name: str) -> Path:
        """The local file of one of the artifact's three (on a bucket: its copy in the local cache)."""
        return self._remote.local(name) if self._remote is not None else cast(Path, self.path) / name

    def _manifest_entry(self, position: int) -> tuple[dict[str, Any], tuple[int, int]]:
        try:
            return self.index.entry(position)
        except FormatError as error:
            raise FormatError(f"{self.path}: {error}") from None

    def _entry(self, position: int) -> tuple[list[np.ndarray[Any, Any]], tuple[str, ...], tuple[str, ...]]:
        """The entry's sequences as views of the map, its texts and finish reasons, checked on its first read."""
        tokens = self._tokens if self._tokens is not None else self._map()
        start, length, texts_at, texts_end = self._rows[position].tolist()
        arrays = None
        if not texts_end:  # the first read: the arrays checked are the ones returned
            arrays = self._sequences(position, tokens)
            start, length, texts_at, texts_end = self._verify_entry(position, arrays)
        texts: tuple[str, ...] = TEXTS.decode(self._manifest[texts_at:texts_end])
        if self._single:  # every entry has one sequence: entry i is sequence i
            arrays = arrays or [tokens[start : start + length]]
            return arrays, texts, (FINISH_REASONS[self._reasons.item(position)],)
        lo, hi = self.index.first[position : position + 2].tolist()
        reasons = tuple(FINISH_REASONS[code] for code in self._reasons[lo:hi].tolist())
        return arrays or self._sequences(position, tokens), texts, reasons

    def _sequences(self, position: int, tokens: Any) -> list[np.ndarray[Any, Any]]:
        """The entry's sequences as views of the map, from the index."""
        index = self.index
        lo, hi = index.first[position : position + 2].tolist()
        starts = ((self._data_offset + index.starts[lo:hi]) // TOKEN_BYTES).tolist()
        return [tokens[s : s + n] for s, n in zip(starts, index.lengths[lo:hi].tolist(), strict=True)]

    def _verify_entry(self, position: int, arrays: list[np.ndarray[Any, Any]]) -> list[int]:
        """Check an entry's ``arrays`` against the manifest and its digests and remember it as checked: its row."""
        entry, (texts_at, texts_end) = self._manifest_entry(position)
        problems = _entry_problems(self.index.key(position), entry, [hashlib.sha256(a.data).digest() for a in arrays])
        if problems:
            raise IntegrityError(
                f"{self.path}: {problems[0]}; the artifact is damaged (run gencache verify), regenerate it or "
                "restore a copy."
            )
        lo = int(self.index.first[position])
        self._reasons[lo : lo + len(arrays)] = [FINISH_REASONS.index(reason) for reason in entry["finish_reasons"]]
        start = (self._data_offset + int(self.index.starts[lo])) // TOKEN_BYTES
        row = [start, int(self.index.lengths[lo]), texts_at, texts_end]
        self._rows[position] = row
        return row

    # -- pickling (DataLoader workers reopen the map) -----------------------------------------------------
    @cached_property
    def identity(self) -> str:
        """SHA-256 over the manifest (provenance, every entry's digests and texts) and every sequence's key, offset
        and length: two readers with the same identity serve the same bytes and texts."""
        digest = hashlib.sha256(self.index.manifest)
        for array in (self.index.keys, self.index.first, self.index.starts, self.index.lengths):
            digest.update(np.ascontiguousarray(array).data)
        return digest.hexdigest()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path), "identity": self.identity, "download": self.download, "cache": self.cache_dir}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], download=state["download"], cache_dir=state["cache"])  # type: ignore[misc]
        if self.identity != state["identity"]:
            raise FormatError(
                f"{self.path}: the artifact at this path is not the one the reader was pickled from (it was "
                "regenerated or replaced); open the new artifact explicitly."
            )


def _json_file(raw: bytes, name: str, problems: list[str]) -> Any:
    """The JSON file ``name`` (``raw``, its bytes) parsed, or None; what is wrong with it added to ``problems``."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        problems.append(f"{name} is not valid UTF-8 JSON ({error})")
        return None
    if raw != json_file_bytes(value):
        problems.append(f"{name} is not canonical JSON plus a newline (it was edited)")
    return value


def _entry_problems(key: str, entry: Mapping[str, Any], digests: list[bytes]) -> list[str]:
    """What a checked manifest entry does not match: its tensors' ``digests`` (of the payload's bytes) and its
    content digest."""
    refs = entry["sequences"]
    problems = [
        f"tensor {key}.{i} digest mismatch (the payload bytes changed)"
        for i, (digest, ref) in enumerate(zip(digests, refs, strict=True))
        if digest.hex() != ref["digest"]
    ]
    try:
        digest = content_digest(refs, entry["text"], entry["finish_reasons"])
    except FormatError:  # a text that is not valid Unicode
        digest = ""
    if digest != entry["content_digest"]:
        problems.append(f"entry {key} content_digest mismatch (its texts, finish reasons or digests were changed)")
    return problems


def verify(path: PathLike | S3Url, progress: ProgressCallback | None = None) -> list[str]:
    """The problems of one artifact (none: it is intact): every open-time check, canonical manifest and resolved
    config, every tensor digest (re-hashed from the file) and every content digest; ``progress(done_bytes,
    total_bytes)`` is called while hashing."""
    problems: list[str] = []
    try:
        reader = CacheReader(path)
        index, total = reader.index, reader.payload_bytes
        manifest = _json_file(read_regular(reader._file(MANIFEST_NAME), "Manifest"), MANIFEST_NAME, problems)
        try:
            if manifest is not None:
                check_manifest(manifest)  # every entry, and the summary's counts of them
        except FormatError as error:
            problems.append(str(error))
        resolved = _json_file(read_regular(reader._file(RESOLVED_NAME), "Resolved config"), RESOLVED_NAME, problems)
        if isinstance(resolved, dict):
            problems.extend(resolved_config_problems(resolved, reader.provenance, reader.summary.get("shard")))
        elif resolved is not None:
            problems.append("resolved_config.json does not hold a JSON object")
        order = np.argsort(index.starts, kind="stable")
        digests: list[bytes] = [b""] * len(order)
        with open(reader._file(PAYLOAD_NAME), "rb", buffering=8 * 1024 * 1024) as handle:
            done = len(handle.read(reader._data_offset))  # the header: checked at open
            for sequence, length in zip(order.tolist(), index.lengths[order].tolist(), strict=True):
                data = handle.read(length * TOKEN_BYTES)
                digests[sequence] = hashlib.sha256(data).digest()
                done += len(data)
                if progress is not None:
                    progress(done, total)
        first = index.first.tolist()
        for position, key in enumerate(index.iter_keys()):
            try:
                entry = index.entry(position)[0]
            except FormatError as error:
                problems.append(str(error))
                continue
            problems.extend(_entry_problems(key, entry, digests[first[position] : first[position + 1]]))
    except GencacheError as error:
        return [str(error)]
    except OSError as error:
        return [f"{path}: {error.strerror or error} while reading"]
    if len(problems) > MAX_LISTED_PROBLEMS:
        problems = [*problems[:MAX_LISTED_PROBLEMS], f"... and {len(problems) - MAX_LISTED_PROBLEMS} more problems"]
    return [f"{reader.path}: {problem}" for problem in problems]
