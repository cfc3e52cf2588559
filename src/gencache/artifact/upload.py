"""Publishing an artifact to an ``s3://`` prefix with the promises of a local rename, enforced by the server.

A writer holds a lock object ``<parent>/.<name>.gencache-lock``. The payload is one multipart upload whose first
part (the reserved header) is sent last; every object is created with ``If-None-Match: *``, ``manifest.json`` last:
**the manifest is the commit point**, created only when the other objects are whole, so a reader never sees half an
artifact. What a killed writer left, :func:`clean` removes once its lock is stale.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Sequence
from contextlib import suppress
from typing import Any

from gencache.artifact.names import ARTIFACT_FILES, MANIFEST_NAME, TEMP_RE
from gencache.artifact.publish import host_tag, pid_alive
from gencache.artifact.store import call, client, list_objects, read_object, remove
from gencache.config.paths import S3Url
from gencache.core.errors import ConfigError, FormatError, GencacheError, OutputExistsError

PART_BYTES = 8 * 1024 * 1024
"""The size at which buffered payload bytes are sent as a part (every part but the last must be >= 5 MiB)."""
REFRESH_EVERY = 60.0
STALE_AFTER = 600.0
LOCK_SUFFIX = ".gencache-lock"


def lock_of(where: S3Url) -> S3Url:
    """The lock object of a writer of ``where``: ``<parent>/.<name>.gencache-lock``."""
    return where.parent / f".{where.name}{LOCK_SUFFIX}"


def check_absent(where: S3Url) -> None:
    """Refuse an ``output_dir`` whose bucket is missing or unreadable, or under which anything exists (an artifact,
    a writer's objects, its lock)."""
    if TEMP_RE.match(where.name) or where.name.endswith(LOCK_SUFFIX):
        raise ConfigError(f"output_dir {where} has the form of a gencache temporary name; choose another name.")
    if len((where / MANIFEST_NAME).key.encode()) > 1024:  # S3's longest key
        raise ConfigError(f"output_dir {where} is too long for an object key; choose a shorter prefix.")
    if next(list_objects(where, limit=1), None) is not None:
        raise OutputExistsError(
            f"Output {where} already exists (objects are under it); choose a new output_dir (gencache never "
            f"overwrites an artifact; `gencache clean {where.parent}` removes what a killed writer left)."
        )
    if (holder := _holder(lock_of(where))) is not None:
        raise OutputExistsError(
            f"Output {where} is being written by another gencache run (host {holder.get('host', '?')}, pid "
            f"{holder.get('pid', '?')}), or was left by one that was killed; wait for it, or, once no writer runs, "
            f"`gencache clean {where.parent}` removes what it left."
        )


def _holder(lock: S3Url) -> dict[str, Any] | None:
    try:
        value = json.loads(read_object(lock))
    except FormatError:
        return None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class Lease:
    """A writer's lock object, created by :meth:`acquire` and rewritten every :data:`REFRESH_EVERY` seconds by a
    daemon thread until :meth:`release`, which removes it when it is this lease's, also when a stop interrupted
    :meth:`acquire` after the server had created it."""

    def __init__(self, where: S3Url) -> None:
        self.where, self.lock = where, lock_of(where)
        self.body = json.dumps({"host": host_tag(), "pid": os.getpid(), "output": str(where)}).encode()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._refresh, name="gencache-s3-lease", daemon=True)

    def acquire(self) -> None:
        self._put(IfNoneMatch="*")  # another writer's lock: an OutputExistsError
        self._thread.start()

    def _put(self, **conditions: str) -> None:
        lock = {"Bucket": self.lock.bucket, "Key": self.lock.key, "Body": self.body}
        call(f"Creating the lock {self.lock}", client().put_object, **lock, **conditions)

    def _refresh(self) -> None:
        while not self._stop.wait(REFRESH_EVERY):
            with suppress(GencacheError):  # a missed refresh only ages the lock; the next one may succeed
                self._put()

    def release(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()
        with suppress(GencacheError):
            if read_object(self.lock) == self.body:  # never another writer's
                remove(self.lock)


class ObjectUpload:
    """A new object (``If-None-Match: *``: never one that exists) sent as one multipart upload while it is appended,
    its first ``reserved`` bytes given last (a :class:`gencache.artifact.writer.CacheWriter`'s payload header comes
    last). The first 5 MiB (S3's smallest part) form part 1, kept in memory and sent last; later data is sent in
    parts of about :data:`PART_BYTES` as it arrives, so the object is never staged whole."""

    def __init__(self, where: S3Url, reserved: int) -> None:
        self.where, self.object, self.reserved = where, {"Bucket": where.bucket, "Key": where.key}, reserved
        self.upload_id: str | None = None
        self.created = False  # a create was sent: the server may hold the upload even if its answer never came
        self.parts: dict[int, str] = {}
        self.held = bytearray()  # data bytes of part 1
        self.pending = bytearray()  # data bytes of the next part

    def send(self, number: int, data: bytes | bytearray | memoryview) -> None:
        s3, what = client(), f"Uploading {self.where}"
        if self.upload_id is None:
            self.created = True
            self.upload_id = call(what, s3.create_multipart_upload, **self.object)["UploadId"]
        sent = call(what, s3.upload_part, **self.object, UploadId=self.upload_id, PartNumber=number, Body=bytes(data))
        self.parts[number] = sent["ETag"]

    def append(self, buffers: Sequence[bytes | memoryview]) -> None:
        for buffer in buffers:
            view = memoryview(buffer).cast("B")
            room = max(5 * 1024 * 1024 - self.reserved - len(self.held), 0)
            self.held += view[:room]
            self.pending += view[room:]
        if len(self.pending) >= PART_BYTES:
            self.send(len(self.parts) + 2, self.pending)
            self.pending.clear()

    def finish(self, head: bytes) -> None:
        """Send the last data, then part 1 with ``head`` (space-padded to the reserved size), and complete."""
        if self.pending:
            self.send(len(self.parts) + 2, self.pending)
        self.send(1, head.ljust(self.reserved, b" ") + self.held)
        parts = [{"PartNumber": number, "ETag": tag} for number, tag in sorted(self.parts.items())]
        upload = {"UploadId": self.upload_id, "MultipartUpload": {"Parts": parts}, "IfNoneMatch": "*"}
        try:
            call(f"Publishing {self.where}", client().complete_multipart_upload, **self.object, **upload)
        except OutputExistsError:
            raise OutputExistsError(
                f"Output {self.where.parent} was published by another writer first (the artifact there is theirs); "
                "this run committed nothing."
            ) from None
        self.upload_id, self.created = None, False

    def abort(self) -> None:
        """Abort the upload; one whose create was stopped before its answer came is found by its key (the writer's
        lock makes every upload of this key this writer's)."""
        ids = [] if self.upload_id is None else [self.upload_id]
        self.upload_id, created, self.created = None, self.created, False
        s3 = client()
        with suppress(GencacheError):
            if created and not ids:
                listed = call(
                    "Listing uploads", s3.list_multipart_uploads, Bucket=self.where.bucket, Prefix=self.where.key
                )
                ids = [upload["UploadId"] for upload in listed.get("Uploads", []) if upload["Key"] == self.where.key]
            for upload_id in ids:
                call("Aborting an upload", s3.abort_multipart_upload, **self.object, UploadId=upload_id)


# -- clean ---------------------------------------------------------------------------------------------------
def clean(parent: S3Url, outputs: Iterable[str] | None = None) -> list[str]:
    """Remove what dead writers left under ``parent`` (with ``outputs``, only for these output names): incomplete
    uploads, an uncommitted artifact's files and stale locks (whose host's process is gone, or not rewritten for
    :data:`STALE_AFTER` seconds); never a committed artifact or an object that is no artifact's file. Returns what
    was removed."""
    # uploads first: a writer creates its lock before its upload, so every upload listed has its lock listed below
    paginate = client().get_paginator("list_multipart_uploads").paginate
    listing = {"Bucket": parent.bucket, "Prefix": parent.prefix}
    pages = call(f"Listing uploads under {parent}/", lambda **where: list(paginate(**where)), **listing)
    uploads: dict[str, list[dict[str, Any]]] = {}
    for upload in (upload for page in pages for upload in page.get("Uploads", [])):
        name, _, file = upload["Key"][len(parent.prefix) :].partition("/")
        if file in ARTIFACT_FILES:
            uploads.setdefault(name, []).append(upload)
    locks = {}
    for entry in list_objects(parent, delimiter=True):
        name = entry.get("Key", "")[len(parent.prefix) :]
        if name.startswith(".") and name.endswith(LOCK_SUFFIX):
            locks[name[1 : -len(LOCK_SUFFIX)]] = entry
    removed = []
    for name in sorted(set(locks) | set(uploads)):
        if outputs is not None and name not in outputs:
            continue
        where, lock = parent / name, lock_of(parent / name)
        if (holder := _holder(lock)) is not None:  # kept: a writer that started after the listing, or a live one
            pid = holder.get("pid", "")  # gone when its process on this host is, or when its lock is not rewritten
            here = holder.get("host") == host_tag() and isinstance(pid, int)
            if name not in locks or (
                pid_alive(pid) if here else time.time() - locks[name]["LastModified"].timestamp() <= STALE_AFTER
            ):
                continue
        for upload in uploads.get(name, []):  # one completed or aborted meanwhile is fine
            stale = ObjectUpload(parent / upload["Key"][len(parent.prefix) :], 0)
            stale.upload_id = upload["UploadId"]
            stale.abort()
            removed.append(f"{stale.where} (incomplete upload)")
        files = {entry["Key"][len(where.prefix) :] for entry in list_objects(where)} & ARTIFACT_FILES
        if files and MANIFEST_NAME not in files:
            for file in sorted(files):
                remove(where / file)
            removed.append(f"{where} (uncommitted: {', '.join(sorted(files))})")
        if name in locks:
            remove(lock)
            removed.append(f"{lock} (stale lock)")
    return removed
