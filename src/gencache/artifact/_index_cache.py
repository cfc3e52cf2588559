"""An optional cache of reader indexes, outside the artifact, keyed by the identity of the artifact's files.

Opening a large artifact checks its whole manifest and header once; the result (:class:`CompactIndex`) can be saved
in a cache directory and memory-mapped by later opens (other ranks, spawned DataLoader workers, the next run).
The artifact itself stays exactly its three immutable files.

A cached index is used only when it was built from files with the same identity as the ones being opened (device,
inode, size, modification and change times of ``manifest.json`` and ``cache.safetensors``: any rewrite, copy or
regeneration changes them, as git's index trusts stat data), when its own layout checks out and when a checksum over
all its arrays matches; otherwise it is rebuilt from the artifact and rewritten. Entries read through a cached index
are still checked against the payload bytes and the manifest texts on first read, as always. The checksum detects
damage (truncation, flipped bits), not deliberate forgery: the cache directory must be as trusted as the code.
Writing the cache is best effort (a read-only or full disk just means no cache).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from pathlib import Path
from typing import IO, Any

import numpy as np

from gencache.artifact._index import CompactIndex
from gencache.core.errors import WriteError

MAGIC = b"GCINDEX1"
ALIGN = 64
ENV = "GENCACHE_INDEX_CACHE"
_ARRAYS = ("keys", "first", "starts", "lengths", "digests", "reasons", "content", "text_spans")


def cache_directory(setting: str | os.PathLike[str] | bool | None) -> Path | None:
    """Where indexes are cached: ``setting`` (a directory), or ``$GENCACHE_INDEX_CACHE`` when ``setting`` is None;
    None (no cache) when neither is set or ``setting`` is False."""
    if setting is False:
        return None
    if setting is None or setting is True:
        value = os.environ.get(ENV)
        if not value:
            return None
        return Path(value).expanduser()
    return Path(setting).expanduser()


def file_identity(*stats: os.stat_result) -> str:
    """The stat identity of the files an index was built from."""
    fields = [(s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns) for s in stats]
    return hashlib.sha256(json.dumps(["gencache-index-1", fields]).encode()).hexdigest()


def _data_start(metadata_length: int) -> int:
    """Where the arrays begin: after the magic, the length and the metadata, aligned."""
    return -(-(16 + metadata_length) // ALIGN) * ALIGN


def _checksum(region: memoryview | bytes) -> list[int]:
    words = np.frombuffer(region, dtype=np.uint64)
    return [int(words.sum(dtype=np.uint64)), int(np.bitwise_xor.reduce(words)) if len(words) else 0]


def load_index(directory: Path, identity: str, manifest: mmap.mmap | bytes) -> CompactIndex | None:
    """The cached index for ``identity``, memory-mapped, or None when there is none or it does not check out."""
    path = directory / f"{identity}.idx"
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size < 16:
                return None
            mapped = mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ)
    except OSError:
        return None
    try:
        if mapped[:8] != MAGIC:
            return None
        length = int.from_bytes(mapped[8:16], "little")
        meta = json.loads(mapped[16 : 16 + length].decode("utf-8"))
        start = _data_start(length)
        if meta["identity"] != identity or len(mapped) != start + meta["region_bytes"]:
            return None
        region = memoryview(mapped)[start:]
        if len(region) % 8 or _checksum(region) != meta["checksum"]:
            return None
        arrays: dict[str, np.ndarray] = {}
        for name, dtype, shape, offset, nbytes in meta["arrays"]:
            array = np.frombuffer(mapped, dtype=np.dtype(dtype), count=int(np.prod(shape)), offset=start + offset)
            if array.nbytes != nbytes:
                return None
            arrays[name] = array.reshape(shape)
        count = len(arrays["keys"])
        sequences = int(arrays["first"][-1]) if len(arrays["first"]) else -1
        if (
            set(arrays) != set(_ARRAYS)
            or arrays["first"].shape != (count + 1,)
            or arrays["content"].shape != (count, 32)
            or arrays["text_spans"].shape != (count, 2)
            or any(len(arrays[n]) != sequences for n in ("starts", "lengths", "digests", "reasons"))
        ):
            return None
        if meta["text_in_cache"]:
            text_source: mmap.mmap | bytes = bytes(
                memoryview(mapped)[start + meta["text_offset"] :][: meta["text_bytes"]]
            )
        else:
            text_source = manifest
        return CompactIndex(
            **arrays,
            text_source=text_source,
            summary=meta["summary"],
            provenance=meta["provenance"],
            provenance_digest=meta["provenance_digest"],
            fast=meta["fast"],
            header_used=int(meta["header_used"]),
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, OverflowError):
        return None


def save_index(directory: Path, identity: str, index: CompactIndex) -> bool:
    """Write ``index`` for ``identity`` whole or not at all (:func:`~gencache.artifact.publish.publish_file`); False
    when that failed."""
    parts: list[bytes] = []
    described: list[list[Any]] = []
    offset = 0
    for name in _ARRAYS:
        array = np.ascontiguousarray(getattr(index, name))
        data = array.tobytes()
        described.append([name, array.dtype.str, list(array.shape), offset, len(data)])
        parts.append(data + b"\0" * (-len(data) % ALIGN))
        offset += len(parts[-1])
    text_in_cache = not isinstance(index.text_source, mmap.mmap)
    text_bytes = len(index.text_source) if text_in_cache else 0
    if text_in_cache:
        text = bytes(index.text_source)
        parts.append(text + b"\0" * (-len(text) % ALIGN))
    region = b"".join(parts)
    meta = {
        "identity": identity,
        "arrays": described,
        "summary": index.summary,
        "provenance": index.provenance,
        "provenance_digest": index.provenance_digest,
        "fast": index.fast,
        "header_used": index.header_used,
        "text_in_cache": text_in_cache,
        "text_offset": offset,
        "text_bytes": text_bytes,
        "checksum": _checksum(region),
        "region_bytes": len(region),
    }
    encoded = json.dumps(meta, sort_keys=True).encode()
    data_start = _data_start(len(encoded))
    head = MAGIC + len(encoded).to_bytes(8, "little") + encoded
    from gencache.artifact.publish import publish_file  # only to write a cache, not to open or verify an artifact

    def write(handle: IO[bytes]) -> None:
        handle.write(head + b"\0" * (data_start - len(head)))
        handle.write(region)

    try:
        directory.mkdir(parents=True, exist_ok=True)
        publish_file(directory / f"{identity}.idx", write)
    except (OSError, WriteError):
        return False
    return True
