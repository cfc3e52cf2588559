"""Writing format-3 artifacts (no torch import): :class:`CacheWriter` appends each entry's bytes once behind a
reserved, space-filled header written in place at the end; :class:`ArtifactBuild` publishes the result."""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from gencache.artifact.header import build_header, length_prefix
from gencache.artifact.manifest import (
    build_summary,
    check_provenance,
    iter_manifest_bytes,
    json_file_bytes,
    provenance_digest,
)
from gencache.artifact.names import (
    FINISH_REASONS,
    LENGTH_PREFIX_BYTES,
    MANIFEST_NAME,
    PAYLOAD_NAME,
    RECORD_STRIDE,
    RESOLVED_NAME,
    TOKEN_BYTES,
    Record,
)
from gencache.artifact.publish import (
    check_output_path,
    fsync_dir,
    hold_lock,
    publish,
    release_lock,
    temp_name,
    write_error,
)
from gencache.artifact.store import exists, location, remove
from gencache.artifact.upload import Lease, ObjectUpload, check_absent
from gencache.config.paths import S3Url
from gencache.core.canonical import is_sha256_hex
from gencache.core.errors import FormatError, GencacheError, HeaderCapacityError, WriteError


@contextmanager
def _undone_on_failure(undo: Callable[[], None], what: Callable[[], str]) -> Iterator[None]:
    """Run ``undo`` when the block raises anything (the exception of a Ctrl-C or SIGTERM handler included) and
    re-raise; an ``OSError`` becomes the :class:`WriteError` that names ``what()``."""
    try:
        yield
    except BaseException as error:
        undo()
        if isinstance(error, OSError) and not isinstance(error, GencacheError):
            raise write_error(what(), error) from error
        raise


def _as_view(sequence: object, key: str, i: int) -> memoryview:
    if type(sequence) is bytes and sequence and len(sequence) % TOKEN_BYTES == 0:  # what the engines append
        return memoryview(sequence)
    where = f"Entry {key} sequence {i}"
    try:
        view = memoryview(sequence)  # type: ignore[arg-type]
    except TypeError:
        raise FormatError(
            f"{where} must be a bytes-like object of little-endian int64 token ids (for a tensor: "
            "t.to(torch.int64).contiguous().numpy())."
        ) from None
    kind = view.format.lstrip("@=<")
    if not view.c_contiguous or not (kind in "Bbc" or (kind in "ql" and view.itemsize == TOKEN_BYTES)):
        raise FormatError(
            f"{where} holds elements of format {view.format!r}; give contiguous little-endian int64 token ids or "
            "their raw bytes."
        )
    view = view.cast("B")
    if view.nbytes == 0 or view.nbytes % TOKEN_BYTES:
        raise FormatError(f"{where} must hold at least one int64 token ({view.nbytes} bytes given).")
    return view


def _entry_fields(
    key: str, sequences: Sequence[Any], texts: Sequence[str], finish_reasons: Sequence[str]
) -> tuple[list[memoryview], list[Any]]:
    """Check one entry; its buffers and its record fields without the start (str subclasses as plain str)."""
    for name, value in (("texts", texts), ("finish reasons", finish_reasons)):
        if isinstance(value, (str, bytes, bytearray, memoryview)):
            raise FormatError(f"Entry {key}: {name} must be a list of strings, one per sequence, not one string.")
    buffers = [_as_view(sequence, key, i) for i, sequence in enumerate(sequences)]
    texts, reasons = tuple(texts), tuple(finish_reasons)
    if not buffers:
        raise FormatError(f"Entry {key} has no sequences; every entry needs at least one answer.")
    if len(texts) != len(buffers) or len(reasons) != len(buffers):
        raise FormatError(
            f"Entry {key} has {len(buffers)} sequences, {len(texts)} texts and {len(reasons)} finish reasons; "
            "give one text and one finish reason per sequence."
        )
    fields: list[Any] = []
    for i, (buffer, text, reason) in enumerate(zip(buffers, texts, reasons, strict=True)):
        if not isinstance(text, str):
            raise FormatError(f"Entry {key} text {i} must be a str, got {type(text).__name__}.")
        if not text.isascii():  # ASCII text always encodes
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as error:
                raise FormatError(f"Entry {key} text {i} is not valid Unicode ({error.reason}).") from None
        if not isinstance(reason, str) or reason not in FINISH_REASONS:
            raise FormatError(f"Entry {key} finish reason {reason!r} is not one of {', '.join(FINISH_REASONS)}.")
        fields += (buffer.nbytes // TOKEN_BYTES, None, str(text), str(reason))
    return buffers, fields


class _NewFile:
    """A new local file written in order, its head rewritten last (:class:`gencache.artifact.upload.ObjectUpload`
    on a bucket)."""

    def __init__(self, path: Path) -> None:
        self.file = open(path, "xb")  # noqa: SIM115  (closed by finish or abort)

    def reserve(self, prefix: bytes, capacity: int) -> None:
        self.file.write(prefix)
        spaces = b" " * min(capacity, 8 * 1024 * 1024)  # written in pieces of at most 8 MiB
        for offset in range(0, capacity, len(spaces)):
            self.file.write(spaces[: capacity - offset])
        self.file.flush()

    def append(self, buffers: Sequence[bytes | memoryview]) -> None:
        self.file.writelines(buffers)
        self.file.flush()

    def finish(self, head: bytes) -> None:
        self.file.seek(0)
        self.file.write(head)
        self.file.flush()
        os.fchmod(self.file.fileno(), 0o444)  # published files are read-only
        os.fsync(self.file.fileno())
        self.file.close()

    def abort(self) -> None:
        with suppress(OSError):  # a failed write's bytes still buffered
            self.file.close()


class CacheWriter:
    """Streams entries into ``<directory>/cache.safetensors`` (a local directory or an ``s3://`` prefix) and
    finalizes the artifact's three files, keeping only entry metadata in memory.

    Any failure of an append or of :meth:`finalize` removes the writer's files. Until :meth:`finalize` the header is
    all spaces, so no safetensors loader accepts the file.
    """

    def __init__(self, directory: Path | S3Url, *, provenance: Mapping[str, Any], header_capacity: int) -> None:
        self.directory = directory
        self.provenance = check_provenance(provenance)
        self.provenance_digest = provenance_digest(self.provenance)
        prefix = length_prefix(header_capacity)
        self.header_capacity = header_capacity
        self.path = directory / PAYLOAD_NAME
        self._records: dict[str, Record] = {}
        self._data_end = 0
        self.state = "open"  # then "finalized" or "aborted"
        self._created: list[Path | S3Url] = []
        self._payload: _NewFile | ObjectUpload
        if isinstance(directory, S3Url):
            self._payload = ObjectUpload(directory / PAYLOAD_NAME, LENGTH_PREFIX_BYTES + header_capacity)
            return
        try:
            self._payload = _NewFile(directory / PAYLOAD_NAME)
        except OSError as error:
            raise write_error(f"Creating {self.path}", error) from error
        self._created.append(self.path)
        with _undone_on_failure(self.abort, lambda: f"Reserving the header of {self.path}"):
            self._payload.reserve(prefix, header_capacity)

    def add(self, key: str, sequences: Sequence[Any], texts: Sequence[str], finish_reasons: Sequence[str]) -> bool:
        """Append one entry: its answer sequences (bytes-like, little-endian int64), one text and one finish
        reason per sequence. Returns False for an identical re-add (nothing written)."""
        if self.state != "open":
            raise WriteError(f"Cannot add entries: this CacheWriter is {self.state}; start a new artifact.")
        if not is_sha256_hex(key):
            raise FormatError(f"Entry key {key!r} is not a 64-character lowercase hex semantic key.")
        buffers, fields = _entry_fields(key, sequences, texts, finish_reasons)
        fields[1::RECORD_STRIDE] = [hashlib.sha256(b).digest() for b in buffers]
        if key in self._records:
            if self._records[key][1:] == tuple(fields):
                return False
            raise FormatError(f"Conflicting duplicate key {key}: it was added before with other content.")
        start = self._data_end
        with _undone_on_failure(self.abort, lambda: f"Appending entry {key} to {self.path}"):
            self._payload.append(buffers)
        self._records[key] = (start, *fields)
        self._data_end = start + sum(map(len, buffers))
        return True

    def finalize(self, *, resolved_config: Mapping[str, Any], summary: Mapping[str, Any]) -> None:
        """Write the header in place, ``resolved_config.json`` and last ``manifest.json`` (on a bucket its
        creation is the commit). ``summary`` holds the caller's ``duplicates``, ``data_configs`` and ``shard`` (any
        may be omitted)."""
        if self.state != "open":
            raise WriteError(f"Cannot finalize: this CacheWriter is {self.state}; start a new artifact.")
        with _undone_on_failure(self.abort, lambda: f"Finalizing {self.directory}"):
            keys = sorted(self._records)
            header = build_header(self._records, self.provenance_digest, sorted_keys=keys)
            if len(header) > self.header_capacity:
                raise HeaderCapacityError(
                    f"The safetensors header needs {len(header):,} bytes but only {self.header_capacity:,} were "
                    "reserved; split the run with --shard. Nothing was published."
                )
            # streamed (memory stays flat); its first piece, the summary built, before anything is written
            manifest = iter_manifest_bytes(
                self.provenance, self._records, build_summary(self._records, summary), sorted_keys=keys
            )
            first = next(manifest)
            resolved = json_file_bytes(dict(resolved_config))
            self._payload.finish(length_prefix(self.header_capacity) + header)
            self._created.append(self.path)  # on a bucket the payload exists from here on (locally: listed twice)
            self._write_new(self.directory / RESOLVED_NAME, (resolved,))
            self._write_new(self.directory / MANIFEST_NAME, itertools.chain((first,), manifest))
            if isinstance(self.directory, Path):
                fsync_dir(self.directory)
        self.state = "finalized"

    def _write_new(self, where: Path | S3Url, pieces: Iterable[bytes]) -> None:
        self._created.append(where)
        sink = ObjectUpload(where, 0) if isinstance(where, S3Url) else _NewFile(where)
        try:
            for piece in pieces:  # the manifest is streamed: memory stays flat
                sink.append([piece])
            sink.finish(b"")
        finally:
            sink.abort()

    def abort(self) -> None:
        """Close and remove this writer's files (idempotent; a finalized or committed writer keeps them)."""
        if self.state == "finalized":
            return
        self._payload.abort()
        manifest = self.directory / MANIFEST_NAME
        if isinstance(manifest, S3Url) and manifest in self._created and exists(manifest):
            self.state = "finalized"  # committed, though the reply never came: the artifact is whole
            return
        for where in self._created:
            remove(where)
        self._created.clear()
        self.state = "aborted"


class ArtifactBuild:
    """Context manager for one artifact: where it is built, the writer, signal-safe cleanup, publish.

    Locally the writer fills a locked temporary directory beside the output that :meth:`publish` renames into
    place; on an ``s3://`` prefix the objects are written in place under a lock object, the manifest last, which
    commits. Any exception (a signal handler's included) before the publish removes what the build made; the build
    installs no signal handler, and :attr:`published` says after an interruption whether the output is complete.
    """

    def __init__(self, output_dir: Path | str | S3Url, *, provenance: Mapping[str, Any], header_capacity: int) -> None:
        self.output_dir = location(output_dir)
        self.provenance = check_provenance(provenance)
        self.header_capacity = header_capacity
        self.temp_dir: Path | None = None
        self._writer: CacheWriter | None = None
        self._release: Callable[[], None] | None = None  # of the temporary directory's lock or the bucket's lease

    @property
    def writer(self) -> CacheWriter:
        if self._writer is None:
            raise WriteError("ArtifactBuild.writer is only available inside the with block.")
        return self._writer

    def __enter__(self) -> ArtifactBuild:
        output = directory = self.output_dir
        if isinstance(output, S3Url):
            check_absent(output)
            lease = Lease(output)
            self._release = lease.release  # set before the lock exists: a stop at any moment still removes it
        else:
            check_output_path(output)
        with _undone_on_failure(self._cleanup, lambda: f"Starting {output}"):
            if isinstance(output, S3Url):
                lease.acquire()
            else:
                output.parent.mkdir(parents=True, exist_ok=True)
                directory = temp = output.parent / temp_name(output)
                fd = hold_lock(temp)  # held until exit: gencache clean leaves a live build alone
                self._release = lambda: release_lock(temp, fd)
                self.temp_dir = temp  # before it exists: a stop as mkdir returns still finds it to remove
                temp.mkdir(mode=0o700)
            self._writer = CacheWriter(directory, provenance=self.provenance, header_capacity=self.header_capacity)
        return self

    def publish(self) -> str:
        """Publish the finalized artifact: rename the temporary directory to ``output_dir`` and return
        ``"renameat2"`` or ``"rename"``; on a bucket the writer's manifest already committed it (``"s3"``)."""
        if self._writer is None or self._writer.state != "finalized":
            raise WriteError("Finalize the writer inside the with block before publishing; nothing was published.")
        temp = self.temp_dir
        if temp is None:
            return "s3"
        if self.published:
            raise WriteError(f"{self.output_dir} is published already; publish() is called once per build.")
        return publish(temp, self.output_dir)  # type: ignore[arg-type]

    @property
    def published(self) -> bool:
        """Whether the output is in place, though an exception may have interrupted :meth:`publish` after the rename
        or the commit: only the rename moves the temporary directory away, and the output did not exist before."""
        if self._writer is None or self._writer.state != "finalized":  # only a finalized build is renamed or committed
            return False
        return self.temp_dir is None or (not os.path.lexists(self.temp_dir) and exists(self.output_dir))

    def _cleanup(self) -> None:
        try:
            if not self.published:
                if self._writer is not None:
                    self._writer.abort()
                if self.temp_dir is not None:
                    shutil.rmtree(self.temp_dir, ignore_errors=True)
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()

    def __exit__(self, *exc: object) -> None:
        self._cleanup()
