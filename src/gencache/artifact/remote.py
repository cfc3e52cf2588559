"""A committed artifact on an ``s3://`` prefix, as a reader sees it: its three objects listed together (their
ETags name the version read), the payload's header read by range, and the objects downloaded on first use into
``<cache_root>/<bucket>/<key>/<digest of the three ETags>`` (an object that changed gets a new directory, so a stale
copy is never served) or read by range per entry.

A download asks for the listed ETag (``If-Match``), is checked for size and renamed into place under a file lock:
every rank and DataLoader worker of a node shares one copy, never read half written.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
from pathlib import Path
from typing import Any

import numpy as np

from gencache.artifact.header import read_length_prefix
from gencache.artifact.names import LENGTH_PREFIX_BYTES, MANIFEST_NAME, PAYLOAD_NAME, TOKEN_BYTES, files_problem
from gencache.artifact.store import download, list_objects, read_object
from gencache.config.paths import S3Url
from gencache.core.errors import FormatError


class RemoteArtifact:
    """The objects of the artifact at ``where`` (:class:`FormatError` unless exactly the three, committed), cached
    under ``cache_root`` (``$XDG_CACHE_HOME/gencache``, ``~/.cache/gencache`` by default)."""

    def __init__(self, where: S3Url, cache_root: Path | None = None) -> None:
        self.where = where
        listed = {entry["Key"][len(where.prefix) :]: entry for entry in list_objects(where)}
        if not listed:
            raise FormatError(f"Cache {where} does not exist (no objects under it); check the URL (or generate it).")
        if MANIFEST_NAME not in listed:
            raise FormatError(
                f"{where} was never committed (it has no manifest.json): its writer is running or was killed; "
                f"`gencache clean {where.parent}` removes what a killed writer left."
            )
        if problem := files_problem(where, set(listed)):
            raise FormatError(problem)
        self.etags = {name: str(entry["ETag"]) for name, entry in listed.items()}
        self.sizes = {name: int(entry["Size"]) for name, entry in listed.items()}
        version = hashlib.sha256("".join(self.etags[name] for name in sorted(listed)).encode()).hexdigest()[:16]
        cache_root = cache_root or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gencache"
        self.cache = cache_root / where.bucket / where.key / version

    def read(self, name: str, start: int | None = None, length: int | None = None) -> bytes:
        """Bytes of one of the three objects (a range of them), of the listed version."""
        return read_object(self.where / name, start=start, length=length, etag=self.etags[name])

    def payload_head(self) -> tuple[int, bytes]:
        """The payload's size and its header's bytes (length prefix excluded): one or two range reads."""
        size = self.sizes[PAYLOAD_NAME]
        head = self.read(PAYLOAD_NAME, 0, min(size, 64 * 1024))  # usually the whole header
        capacity = read_length_prefix(head[:LENGTH_PREFIX_BYTES], size)
        end = LENGTH_PREFIX_BYTES + capacity
        if end > len(head):
            head += self.read(PAYLOAD_NAME, len(head), end - len(head))
        return size, head[LENGTH_PREFIX_BYTES:end]

    def local(self, name: str) -> Path:
        """The local copy of one object, downloaded into the cache directory unless a process did already."""
        path = self.cache / name
        if path.exists():
            return path
        self.cache.mkdir(parents=True, exist_ok=True)
        with open(self.cache / ".lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one download per node; the others wait for it, then find it
            if path.exists():
                return path
            temp = self.cache / f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
            try:
                download(self.where / name, self.etags[name], temp)
                if temp.stat().st_size != self.sizes[name]:  # a reply without Content-Length that ended early
                    raise FormatError(
                        f"{self.where / name} arrived with {temp.stat().st_size} bytes, not {self.sizes[name]}."
                    )
                os.chmod(temp, 0o444)
                os.replace(temp, path)
            finally:
                temp.unlink(missing_ok=True)
        return path

    def __getitem__(self, span: slice) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The payload's tokens ``[start:stop]`` (in tokens), read by one range request."""
        data = self.read(PAYLOAD_NAME, span.start * TOKEN_BYTES, (span.stop - span.start) * TOKEN_BYTES)
        return np.frombuffer(bytearray(data), dtype="<i8")
