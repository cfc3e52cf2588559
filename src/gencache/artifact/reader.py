"""Reading format-3 artifacts: a compact checked index, one memory map, zero-copy entries, lazy digest checks.

:class:`CacheReader` checks everything that needs no tensor data when it opens (the three files, the manifest,
the header against the manifest, coverage of every tensor), keeps the result as flat arrays
(:mod:`gencache.artifact._index`) and serves ``reader[key]`` as views of one map of the payload, made with
``torch.UntypedStorage.from_file(path, shared=False, ...)`` when the first tensor is built. The tensor and content
digests of an entry are checked the first time it is read. :func:`verify` re-hashes a whole artifact; mixtures and
sharded output directories are opened by :func:`gencache.artifact.mixture.open_caches`.

This module never imports transformers, and imports torch only when a read builds the first tensor: opening,
:func:`verify`, the index and :meth:`CacheReader.get_arrays` (numpy arrays read from the file) need no torch.
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import os
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gencache.artifact._files import check_artifact_files, map_regular, open_regular, pread_exact, read_regular
from gencache.artifact._index import CompactIndex, build_index
from gencache.artifact._index_cache import cache_directory, file_identity, load_index, save_index
from gencache.artifact.cache import Generation, GenerationArrays, GenerationCache
from gencache.artifact.header import is_canonical_header, read_length_prefix
from gencache.artifact.manifest import content_digest, json_file_bytes
from gencache.artifact.names import (
    FINISH_REASONS,
    LENGTH_PREFIX_BYTES,
    MANIFEST_NAME,
    PAYLOAD_NAME,
    RESOLVED_NAME,
    TOKEN_BYTES,
)
from gencache.artifact.resolved import resolved_config_problems
from gencache.core.errors import ConfigError, FormatError, GencacheError, IntegrityError

if TYPE_CHECKING:
    import torch

PathLike = str | os.PathLike[str]
ProgressCallback = Callable[[int, int], None]
MAX_LISTED_PROBLEMS = 100
PAYLOAD_CHECK_INTERVAL = 1.0
"""Seconds a reader serves repeated reads of verified entries without checking its payload file again (the default
of ``CacheReader(payload_check_interval=...)``): the window in which a payload changed in place can go unnoticed."""
_TEXTS: list[Any] = []  # the msgspec decoder of an entry's texts, made on the first read (opening needs none)


def _texts_decoder() -> Any:
    import msgspec

    _TEXTS.append(msgspec.json.Decoder(list[str]))
    return _TEXTS[0]


_PROC_FD = "/proc/self/fd"


def read_resolved_config(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed ``resolved_config.json`` of an artifact directory (provenance only); :class:`FormatError` when it
    is missing, not a regular file or not a JSON object."""
    path = Path(directory) / RESOLVED_NAME
    raw = read_regular(path, "Resolved config")
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise FormatError(f"Resolved config {path} is not valid UTF-8 JSON ({error}).") from None
    if not isinstance(value, dict):
        raise FormatError(f"Resolved config {path} does not hold a JSON object.")
    return value


class CacheReader(GenerationCache):
    """One format-3 artifact, opened without reading tensor data; a read-only mapping from key to
    :class:`Generation`.

    ``reader[key]`` returns a :class:`Generation` of zero-copy views (raising :class:`MissingEntryError`, also a
    ``KeyError``); ``get`` returns None instead; ``get_many(keys)`` reads several. The first read of a key checks
    its tensor and content digests (:class:`IntegrityError` on mismatch).

    Each returned tensor has its own small storage that points into the map, so it crosses process boundaries
    (DataLoader workers under fork or spawn, either sharing strategy) as exactly its own bytes. The index is held
    in flat arrays, so forked workers share it without copying. Picklable: unpickling reopens the artifact and
    refuses one whose entries differ from those of the pickled reader.

    ``index_cache`` (a directory; by default ``$GENCACHE_INDEX_CACHE`` when set, ``False`` to disable) keeps the
    checked index outside the artifact, keyed by the stat identity of its files, so that later opens (other ranks,
    spawned workers, the next run) memory-map it instead of re-checking the manifest; a stale or damaged cached
    index is rebuilt, never used (:mod:`gencache.artifact._index_cache`). ``index_cached`` says which happened.

    Opening imports no torch: the payload is memory-mapped (and torch imported) when the first tensor is built;
    :meth:`get_arrays` reads entries as numpy arrays without torch. The reader keeps the payload file it opened
    (its descriptor, until the map is made), so replacing the directory or renaming another file over the payload
    does not affect it.

    The reader checks (one ``os.stat``) that the payload file it opened keeps its size and modification time: on
    the first read of every entry not verified yet, on the first read of every batch (:meth:`__getitems__`, which
    torch's DataLoader uses, and :meth:`get_many`), and on any read that begins ``payload_check_interval`` seconds
    (default :data:`PAYLOAD_CHECK_INTERVAL`, 1 s; ``0`` checks before every read) or more after the last check. A
    payload truncated or grown makes every later read raise :class:`IntegrityError`. When only its modification
    time moved (rewritten in place, or touched), every entry is checked against its digests again on its next
    read, so a changed token raises :class:`IntegrityError` even for an entry already verified. The window: for up
    to ``payload_check_interval`` after a change, within one batch, repeated reads of entries verified before it
    are not checked. Tensors returned before a change are views of the map and change with the file (or, for pages
    cut off by a truncation, read as zeros or raise SIGBUS, as with any memory map): copy them (``.clone()``) to
    keep them independent of the file. Artifacts are immutable; replace one by publishing a new directory, never
    by editing its files.
    """

    _payload_identity: tuple[int, int]
    _payload_stamp: tuple[int, int]
    _verified: np.ndarray[Any, np.dtype[np.bool_]]
    _storage: torch.UntypedStorage | None
    _fd: int | None

    def __init__(
        self,
        path: PathLike,
        *,
        index_cache: PathLike | bool | None = None,
        payload_check_interval: float = PAYLOAD_CHECK_INTERVAL,
    ) -> None:
        self.path = Path(path).expanduser().absolute()
        self.index_cache = index_cache
        self.payload_check_interval = _check_interval(payload_check_interval)
        self._identity: str | None = None
        self._open()

    def _check_payload(self) -> None:
        """Raise when the payload file this reader opened was truncated or grown since; when only its modification
        time moved (a rewrite in place, or a mere ``touch``), forget which entries were verified so that each is
        re-checked against its digests on its next read. A payload replaced by another file (a new inode at the
        path) does not concern this reader, which keeps the file it opened."""
        self._next_check = time.monotonic() + self.payload_check_interval
        try:
            info = os.stat(self.path / PAYLOAD_NAME)
        except OSError:
            return  # removed or replaced: the reader still holds the opened file
        if (info.st_dev, info.st_ino) != self._payload_identity:
            return
        if info.st_size != self._payload_stamp[0]:
            raise IntegrityError(
                f"{self.path}: {PAYLOAD_NAME} changed while it was open (size {self._payload_stamp[0]} -> "
                f"{info.st_size} bytes); artifacts are immutable: reopen it after restoring or regenerating it."
            )
        if info.st_mtime_ns != self._payload_stamp[1]:
            self._verified[:] = False
            self._payload_stamp = (info.st_size, info.st_mtime_ns)

    def _check_due(self, position: int) -> None:
        """The payload check before reading the entry at ``position`` when one is due (see the class docstring)."""
        if not self._verified[position] or time.monotonic() >= self._next_check:
            self._check_payload()

    def _batch_started(self) -> None:
        self._next_check = -math.inf

    @property
    def paths(self) -> tuple[Path, ...]:
        return (self.path,)

    def _describe(self) -> str:
        return str(self.path)

    def _fail(self, message: str) -> FormatError:
        return FormatError(f"{self.path}: {message}")

    def _load_index(self, fd: int, manifest: mmap.mmap | bytes, manifest_stat: os.stat_result) -> CompactIndex:
        """The checked index of the opened payload ``fd`` and manifest (from the index cache when it holds it)."""
        try:
            payload_stat = os.fstat(fd)
            capacity = read_length_prefix(os.pread(fd, LENGTH_PREFIX_BYTES, 0), payload_stat.st_size)
            directory = cache_directory(self.index_cache)
            identity = file_identity(manifest_stat, payload_stat)
            index = None if directory is None else load_index(directory, identity, manifest)
            self.index_cached = index is not None
            if index is None:
                index = build_index(manifest, pread_exact(fd, capacity, LENGTH_PREFIX_BYTES), payload_stat.st_size)
                if directory is not None:
                    save_index(directory, identity, index)
        except FormatError as error:
            raise self._fail(str(error)) from None
        except UnicodeEncodeError:
            raise self._fail(
                "the manifest holds text that is not valid Unicode (an escaped lone surrogate such as \\ud800); "
                "the artifact was not written by gencache or was edited."
            ) from None
        # The payload checks compare the file at the path, when it is still the one opened, with its size and mtime.
        self._payload_identity = (payload_stat.st_dev, payload_stat.st_ino)
        self._payload_stamp = (payload_stat.st_size, payload_stat.st_mtime_ns)
        self.header_capacity = capacity
        self.payload_bytes = payload_stat.st_size
        return index

    def _open(self) -> None:
        if sys.byteorder != "little":
            raise FormatError("gencache artifacts store little-endian int64 tokens; this host is big-endian.")
        check_artifact_files(self.path)
        manifest, manifest_stat = map_regular(self.path / MANIFEST_NAME, "Manifest")
        fd = open_regular(self.path / PAYLOAD_NAME, PAYLOAD_NAME)
        try:
            index = self._load_index(fd, manifest, manifest_stat)
        except BaseException:
            os.close(fd)
            raise
        # Kept until the payload is mapped (get_arrays reads it, the map is made from it): the file opened here.
        self._fd = fd
        self._close_fd = weakref.finalize(self, os.close, fd)
        self._storage = None
        self._next_check = -math.inf
        self._index: CompactIndex = index
        self.summary: dict[str, Any] = index.summary
        self.provenance = index.provenance
        self.provenance_digest = index.provenance_digest
        self.header_json_bytes = index.header_used
        self._data_offset = LENGTH_PREFIX_BYTES + self.header_capacity
        self._verified = np.zeros(len(index), dtype=np.bool_)
        self._single = len(index.starts) == len(index)  # one sequence per entry (every entry has at least one)

    def _map(self) -> torch.UntypedStorage:
        """The one private map of the payload file this reader opened, made (and torch imported) on first use."""
        import torch

        fd = self._fd
        source = f"{_PROC_FD}/{fd}" if fd is not None and os.path.isdir(_PROC_FD) else str(self.path / PAYLOAD_NAME)
        try:
            storage: torch.UntypedStorage = torch.UntypedStorage.from_file(  # type: ignore[assignment]
                source, shared=False, nbytes=self.payload_bytes
            )
        except RuntimeError as error:
            raise self._fail(f"{PAYLOAD_NAME} cannot be memory-mapped ({error}).") from None
        self._storage = storage
        self._fd = None
        self._close_fd()
        return storage

    # -- mapping -------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._index)

    def __iter__(self) -> Iterator[str]:
        """Keys in sorted (manifest) order."""
        return self._index.iter_keys()

    def _position(self, key: object) -> int:
        return self._index.find(key)

    @property
    def index(self) -> CompactIndex:
        """The checked index (flat arrays; read-only by convention)."""
        return self._index

    def entry_at(self, position: int, key: str | None = None) -> Generation:
        """The entry of the ``position``-th key in sorted order (what a mixture's index points at); ``key``, when
        given, must be that key (it spares decoding it)."""
        if not 0 <= position < len(self._index):
            raise IndexError(f"entry position {position} is out of range for {len(self._index)} entries")
        return self._read(position, key)

    @property
    def manifest(self) -> dict[str, Any]:
        """The whole manifest, parsed from ``manifest.json`` on every access (large for big artifacts: prefer
        :attr:`summary`, :meth:`metadata` and the mapping itself)."""
        try:
            value: dict[str, Any] = json.loads(read_regular(self.path / MANIFEST_NAME, "Manifest").decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            raise self._fail(f"manifest.json is not valid UTF-8 JSON ({error}); the artifact is damaged.") from None
        return value

    def metadata(self, key: str) -> dict[str, Any] | None:
        position = self._index.find(key)
        if position < 0:
            return None
        texts = self._texts(position)
        return {
            "sequences": self._index.sequence_refs(position),
            "text": list(texts) if texts is not None else None,
            "finish_reasons": list(self._index.finish_reasons(position)),
            "content_digest": bytes(self._index.content[position]).hex(),
        }

    def source(self, key: str) -> Path:
        if self._index.find(key) < 0:
            raise self._missing(key)
        return self.path

    def _texts(self, position: int) -> tuple[str, ...] | None:
        try:
            return tuple((_TEXTS[0] if _TEXTS else _texts_decoder()).decode(self._index.texts_json(position)))
        except ValueError:  # msgspec.DecodeError and UnicodeDecodeError are ValueErrors
            return None

    def _read(self, position: int, key: str | None = None) -> Generation:
        import torch

        self._check_due(position)
        storage = self._storage if self._storage is not None else self._map()
        index = self._index
        if self._single:  # every entry has one sequence: entry i is sequence i
            offset = self._data_offset + int(index.starts[position])
            end = offset + int(index.lengths[position]) * TOKEN_BYTES
            sequences: tuple[torch.Tensor, ...] = (torch.empty(0, dtype=torch.int64).set_(storage[offset:end]),)
            reasons: tuple[str, ...] = (FINISH_REASONS[index.reasons[position]],)
        else:
            lo, hi = index.first[position : position + 2].tolist()
            spans = zip(index.starts[lo:hi].tolist(), index.lengths[lo:hi].tolist(), strict=True)
            sequences = tuple(self._view(storage, start, length) for start, length in spans)
            reasons = index.finish_reasons(position)
        texts = self._texts(position)
        if texts is None or not self._verified[position]:
            texts = self._verify_entry(position, [hashlib.sha256(t.numpy().data).digest() for t in sequences], texts)
        return Generation(index.key(position) if key is None else key, sequences, texts, reasons)

    def _read_arrays(self, position: int, key: str | None = None) -> GenerationArrays:
        """The entry as numpy arrays: views of the map once it is made, else read from the opened file (no torch)
        and checked against their digests on every read (they are fresh copies of the file's bytes)."""
        fd = self._fd
        if fd is None:
            return super()._read_arrays(position, key)
        self._check_due(position)
        index = self._index
        lo, hi = index.first[position : position + 2].tolist()
        chunks = []
        for start, length in zip(index.starts[lo:hi].tolist(), index.lengths[lo:hi].tolist(), strict=True):
            try:
                chunks.append(pread_exact(fd, length * TOKEN_BYTES, self._data_offset + start))
            except FormatError as error:
                raise IntegrityError(f"{self.path}: {error} Reopen it after restoring or regenerating it.") from None
        texts = self._verify_entry(
            position, [hashlib.sha256(chunk).digest() for chunk in chunks], self._texts(position)
        )
        sequences = tuple(np.frombuffer(chunk, dtype="<i8") for chunk in chunks)
        return GenerationArrays(
            index.key(position) if key is None else key, sequences, texts, index.finish_reasons(position)
        )

    def _verify_entry(self, position: int, digests: list[bytes], texts: tuple[str, ...] | None) -> tuple[str, ...]:
        """Check an entry's tensor ``digests`` and texts against the manifest and remember it as verified."""
        problems = self._entry_problems(position, digests, texts)
        if problems:
            raise IntegrityError(
                f"{self.path}: {problems[0]}; the artifact is damaged (run gencache verify), regenerate it or "
                "restore a copy."
            )
        assert texts is not None
        self._verified[position] = True
        return texts

    def _view(self, storage: torch.UntypedStorage, start: int, length: int) -> torch.Tensor:
        """A 1-D int64 tensor over ``length`` tokens at ``start`` (relative to the data): its own storage, a slice
        of the map (zero-copy; it keeps the map alive), so pickling it for another process carries only these
        bytes, never the map's file descriptor or the whole payload."""
        import torch

        begin = self._data_offset + start
        return torch.empty(0, dtype=torch.int64).set_(storage[begin : begin + length * TOKEN_BYTES])

    def _entry_problems(self, position: int, digests: list[bytes], texts: tuple[str, ...] | None) -> list[str]:
        index = self._index
        key = index.key(position)
        lo, hi = index.first[position : position + 2].tolist()
        problems = [
            f"tensor {key}.{i} digest mismatch (the payload bytes changed)"
            for i, (digest, expected) in enumerate(zip(digests, index.digests[lo:hi], strict=True))
            if digest != expected.tobytes()
        ]
        if texts is None:
            problems.append(f"entry {key} texts in manifest.json cannot be decoded as a JSON list of strings")
            return problems
        refs = [
            {"dtype": ref["dtype"], "shape": ref["shape"], "digest": ref["digest"]}
            for ref in index.sequence_refs(position)
        ]
        try:
            digest = content_digest(refs, texts, index.finish_reasons(position))
        except FormatError:
            digest = ""
        if len(texts) != hi - lo or digest != bytes(index.content[position]).hex():
            problems.append(f"entry {key} content_digest mismatch (its texts, finish reasons or digests were changed)")
        return problems

    # -- pickling (DataLoader workers reopen the map) -----------------------------------------------------
    @property
    def identity(self) -> str:
        """SHA-256 over the provenance digest and every entry's key, content digest, offset and length: two
        readers with the same identity serve the same bytes and texts (computed once, on first use)."""
        if self._identity is None:
            index = self._index
            digest = hashlib.sha256(self.provenance_digest.encode())
            for array in (index.keys, index.first, index.starts, index.lengths, index.digests, index.content):
                digest.update(np.ascontiguousarray(array).data)
            self._identity = digest.hexdigest()
        return self._identity

    def __getstate__(self) -> dict[str, Any]:
        cache = self.index_cache
        return {
            "path": str(self.path),
            "identity": self.identity,
            "index_cache": cache if isinstance(cache, (bool, type(None))) else os.fspath(cache),
            "payload_check_interval": self.payload_check_interval,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = Path(state["path"])
        self.index_cache = state.get("index_cache")
        self.payload_check_interval = state.get("payload_check_interval", PAYLOAD_CHECK_INTERVAL)
        self._identity = None
        self._open()
        if self.identity != state["identity"]:
            raise self._fail(
                "the artifact at this path is not the one the reader was pickled from (it was regenerated or "
                "replaced); open the new artifact explicitly."
            )

    def __repr__(self) -> str:
        return f"CacheReader({str(self.path)!r}, entries={len(self)})"

    # -- full verification ----------------------------------------------------------------------------------
    def verify_all(self, progress: ProgressCallback | None = None) -> list[str]:
        """Every check of :func:`verify` on this opened artifact; the problems found (without the path)."""
        problems: list[str] = []
        raw_manifest = read_regular(self.path / MANIFEST_NAME, "Manifest")
        try:
            if raw_manifest != json_file_bytes(json.loads(raw_manifest.decode("utf-8"))):
                problems.append("manifest.json is not canonical JSON plus a newline (it was edited)")
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            problems.append(f"manifest.json is not valid UTF-8 JSON ({error})")
        raw_resolved = read_regular(self.path / RESOLVED_NAME, "Resolved config")
        try:
            resolved = json.loads(raw_resolved.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            problems.append(f"resolved_config.json is not valid UTF-8 JSON ({error})")
        else:
            if not isinstance(resolved, dict):
                problems.append("resolved_config.json does not hold a JSON object")
            elif raw_resolved != json_file_bytes(resolved):
                problems.append("resolved_config.json is not canonical JSON plus a newline (it was edited)")
            else:
                problems.extend(resolved_config_problems(resolved, self.provenance, self.summary.get("shard")))
        index = self._index
        order = np.argsort(index.starts, kind="stable")
        digests: list[bytes] = [b""] * len(order)
        total = self.payload_bytes
        with open(self.path / PAYLOAD_NAME, "rb", buffering=8 * 1024 * 1024) as handle:
            raw = handle.read(self._data_offset)
            if not is_canonical_header(raw[LENGTH_PREFIX_BYTES:]):
                problems.append(f"{PAYLOAD_NAME} header is not canonical JSON padded with spaces (it was edited)")
            done = len(raw)
            for sequence, length in zip(order.tolist(), index.lengths[order].tolist(), strict=True):
                data = handle.read(length * TOKEN_BYTES)
                digests[sequence] = hashlib.sha256(data).digest()
                done += len(data)
                if progress is not None:
                    progress(done, total)
        first = index.first.tolist()
        for position in range(len(index)):
            problems.extend(
                self._entry_problems(position, digests[first[position] : first[position + 1]], self._texts(position))
            )
        if progress is not None:
            progress(total, total)
        return problems


def _check_interval(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigError(f"payload_check_interval must be a number of seconds >= 0 (math.inf allowed), got {value!r}.")
    return float(value)


def verify(path: PathLike, progress: ProgressCallback | None = None) -> list[str]:
    """Check one artifact completely: every open-time check, canonical manifest and header, a JSON-object
    resolved config, every tensor digest (re-hashed from the file) and every content digest.

    Returns the problems found (empty means the artifact is intact); ``progress(done_bytes, total_bytes)`` is
    called while hashing.
    """
    try:
        reader = CacheReader(path)
        problems = reader.verify_all(progress)
    except GencacheError as error:
        return [str(error)]
    except OSError as error:
        return [f"{path}: {error.strerror or error} while reading"]
    if len(problems) > MAX_LISTED_PROBLEMS:
        problems = [*problems[:MAX_LISTED_PROBLEMS], f"... and {len(problems) - MAX_LISTED_PROBLEMS} more problems"]
    return [f"{reader.path}: {problem}" for problem in problems]
