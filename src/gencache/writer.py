"""Writing and publishing format-3 artifacts (bytes in, bytes out: no torch import).

The protocol (SPEC section 7):

1. :func:`check_output_path` refuses an existing output path, even a dangling symlink.
2. :func:`gencache.format.header_capacity` fixes the header reservation before any generation;
   :func:`probe_rename` learns whether the filesystem has ``renameat2(RENAME_NOREPLACE)``.
3. :class:`ArtifactBuild` creates ``.<name>.gencache-<host>-<pid>-<random>`` beside the output directory and a
   :class:`CacheWriter` in it, which writes the length field and a space-filled header (no loader accepts that
   file), then appends each entry's bytes once while hashing them.
4. :meth:`CacheWriter.finalize` writes the header in place at offset 8 (same inode, payload untouched), then
   ``manifest.json`` and ``resolved_config.json``, all read-only, fsyncing the files and the directory.
5. :meth:`ArtifactBuild.publish` renames the directory into place without replacing anything and fsyncs the
   parent. Any exception, Ctrl-C or SIGTERM before that removes the temporary directory.
6. :func:`clean` removes the temporary directories that killed processes of this host left behind.

Test hook (used by the crash tests only): when the environment variable ``GENCACHE_TEST_PHASE_FD`` holds
``"W"`` or ``"W:R"`` (file descriptor numbers inherited from a test process), each phase writes its name and a
newline to ``W`` and, with ``R``, then blocks reading one byte from ``R``, so the test can kill the process at
exactly that phase. Phases: ``temp_created``, ``appended`` (after each entry), ``header_written``,
``manifest_written``, ``resolved_written``, ``renamed`` (before the parent fsync) and ``published``.
The variable is read once at import; without it the hook costs one ``None`` check.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import itertools
import os
import re
import secrets
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterable, Iterator, KeysView, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from gencache.errors import ConfigError, FormatError, HeaderCapacityError, OutputExistsError, Terminated, WriteError
from gencache.format import (
    FINISH_REASONS,
    LENGTH_PREFIX_BYTES,
    MANIFEST_NAME,
    PAYLOAD_NAME,
    RECORD_STRIDE,
    RESOLVED_NAME,
    TOKEN_BYTES,
    Record,
    build_header,
    build_summary,
    check_provenance,
    iter_manifest_bytes,
    json_file_bytes,
    length_prefix,
    provenance_digest,
    sorted_record_keys,
)

PHASE_ENV = "GENCACHE_TEST_PHASE_FD"
RENAME_MODES = ("renameat2", "rename")
READ_ONLY = 0o444
_CHUNK = 8 * 1024 * 1024
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_IOV_BATCH = 64  # buffers per pwritev (far below IOV_MAX)
_REASONS = frozenset(FINISH_REASONS)
_REASON_STR = {reason: reason for reason in FINISH_REASONS}  # a str subclass equal to a reason -> the plain str
_LISTS = (list, tuple)
_FROMHEX = bytes.fromhex
_SHA256 = hashlib.sha256
_TEMP_RE = re.compile(r"^\.(?P<name>.+)\.gencache-(?P<host>.+)-(?P<pid>\d+)-(?P<token>[0-9a-f]{8})\Z")


# -- test phase hook ---------------------------------------------------------------------------------------
def _parse_phase_env(value: str | None) -> tuple[int, int | None] | None:
    if not value:
        return None
    write, _, read = value.partition(":")
    return int(write), (int(read) if read else None)


_PHASE_FDS = _parse_phase_env(os.environ.get(PHASE_ENV))


def report_phase(name: str) -> None:
    """Test hook: with ``GENCACHE_TEST_PHASE_FD="W[:R]"`` set, write ``name`` to fd W and wait for a byte on fd R,
    so crash tests can kill a writer (or ``gencache generate``) exactly in a phase. A no-op otherwise."""
    if _PHASE_FDS is None:
        return
    write_fd, read_fd = _PHASE_FDS
    os.write(write_fd, f"{name}\n".encode())
    if read_fd is not None:
        os.read(read_fd, 1)


# -- small file-system helpers ------------------------------------------------------------------------------
def _host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "host"


def _temp_name(output_dir: Path, label: str = "") -> str:
    return f".{output_dir.name}{label}.gencache-{_host_tag()}-{os.getpid()}-{secrets.token_hex(4)}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``: one ``pwrite`` unless it comes back short."""
    written = os.pwrite(fd, data, offset)
    if written != (len(data) if type(data) is bytes else memoryview(data).nbytes):
        _pwrite_rest(fd, data, offset, written)


def _pwrite_rest(fd: int, data: bytes | memoryview, offset: int, written: int) -> None:
    """Continue after a short ``pwrite`` of ``written`` bytes (a file-size limit, a 2 GiB kernel cap, a signal)."""
    view = memoryview(data).cast("B")
    while True:
        if written <= 0:
            raise OSError(errno.EIO, "write made no progress")
        view, offset = view[written:], offset + written
        if not view:
            return
        written = os.pwrite(fd, view[:_CHUNK], offset)


def _pwritev_all(fd: int, buffers: list[bytes | memoryview], total: int, offset: int) -> None:
    """Write ``buffers`` (``total`` bytes, none empty) back to back at ``offset``: one ``pwritev`` unless short."""
    written = 0
    if len(buffers) <= _IOV_BATCH:
        written = os.pwritev(fd, buffers, offset)
        if written == total:
            return
        if written <= 0:
            raise OSError(errno.EIO, "write made no progress")
    pending = [memoryview(b).cast("B") for b in buffers]
    pending.reverse()  # the next buffer to write is last: pop() from the end
    while True:
        offset += written
        while written:
            head = pending[-1]
            if written >= head.nbytes:
                written -= head.nbytes
                pending.pop()
            else:
                pending[-1] = head[written:]
                written = 0
        if not pending:
            return
        written = os.pwritev(fd, pending[: -_IOV_BATCH - 1 : -1], offset)
        if written <= 0:
            raise OSError(errno.EIO, "write made no progress")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _umask() -> int:
    with suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _error_hint(error: OSError) -> str:
    if error.errno == errno.EFBIG:
        return "the file-size limit (ulimit -f) or the filesystem's maximum file size was reached"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return "the disk or quota is full; free space"
    return "check the output filesystem"


def _write_error(what: str, error: OSError) -> WriteError:
    name = errno.errorcode.get(error.errno or 0, "")
    detail = f"{error.strerror or error} ({name})" if name else str(error)
    wrapped = WriteError(f"{what} failed: {detail}; {_error_hint(error)}. Nothing was published.")
    wrapped.errno = error.errno
    return wrapped


# -- output path and rename support -------------------------------------------------------------------------
def check_output_path(output_dir: Path | str) -> None:
    """Refuse an existing output path: a file, a directory (even empty) or a dangling symlink."""
    if os.path.lexists(output_dir):
        raise OutputExistsError(
            f"Output path {output_dir} already exists; choose a new output_dir (gencache never overwrites, appends to "
            "or resumes an artifact)."
        )


_renameat2_func: Any = None


def _renameat2(source: Path, target: Path) -> int:
    """``renameat2(source, target, RENAME_NOREPLACE)`` through libc; 0 or the errno."""
    global _renameat2_func
    if _renameat2_func is None:
        try:
            func = ctypes.CDLL(None, use_errno=True).renameat2
        except (AttributeError, OSError):
            _renameat2_func = False
            return errno.ENOSYS
        func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        func.restype = ctypes.c_int
        _renameat2_func = func
    if _renameat2_func is False:
        return errno.ENOSYS
    ctypes.set_errno(0)
    result = _renameat2_func(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE)
    return 0 if result == 0 else (ctypes.get_errno() or errno.EIO)


def probe_rename(parent: Path | str) -> str:
    """Which publish rename ``parent``'s filesystem supports: ``"renameat2"`` or ``"rename"`` (fallback).

    Creates ``parent`` (and its parents) if needed, then renames a scratch directory to a fresh name with
    ``RENAME_NOREPLACE``; EINVAL or ENOSYS means the filesystem or kernel lacks it. When it works, a second
    no-replace rename onto an empty directory must fail with EEXIST. The scratch directories are removed.
    """
    parent = Path(parent)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _write_error(f"Creating the output parent directory {parent}", error) from error
    base = parent / "probe"
    source, target, occupied = (parent / _temp_name(base, f".rename-probe-{tag}") for tag in "abc")
    try:
        try:
            source.mkdir(mode=0o700)
            occupied.mkdir(mode=0o700)
        except OSError as error:
            raise _write_error(f"Creating a scratch directory in {parent}", error) from error
        code = _renameat2(source, target)
        if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            return "rename"
        if code:
            raise WriteError(f"renameat2 probe in {parent} failed: {os.strerror(code)}; check the output filesystem.")
        code = _renameat2(target, occupied)
        if code != errno.EEXIST:
            raise WriteError(
                f"renameat2(RENAME_NOREPLACE) in {parent} did not refuse an existing directory "
                f"({os.strerror(code) if code else 'it replaced it'}); this filesystem cannot publish safely."
            )
        return "renameat2"
    finally:
        for path in (source, target, occupied):
            with suppress(OSError):
                path.rmdir()


def publish(temp_dir: Path | str, output_dir: Path | str, *, mode: str | None = None) -> str:
    """Rename the finished ``temp_dir`` to ``output_dir`` without replacing anything; return the mode used.

    ``mode`` ``None`` or ``"renameat2"``: ``renameat2(RENAME_NOREPLACE)``, falling back to a plain rename of the
    non-empty directory when the filesystem answers EINVAL/ENOSYS; ``"rename"`` (what :func:`probe_rename`
    found): the plain rename directly. The directory's mode follows the umask; the parent is fsynced.
    """
    temp_dir, output_dir = Path(temp_dir), Path(output_dir)
    if mode not in (None, *RENAME_MODES):
        raise ValueError(f"publish mode must be one of {RENAME_MODES}, got {mode!r}")
    try:
        os.chmod(temp_dir, 0o777 & ~_umask())
        _fsync_dir(temp_dir)
    except OSError as error:
        raise _write_error(f"Preparing {temp_dir} for publishing", error) from error
    used = mode or "renameat2"
    if used == "renameat2":
        code = _renameat2(temp_dir, output_dir)
        if code == errno.EEXIST:
            raise OutputExistsError(
                f"Output path {output_dir} appeared while generating; it was left untouched and nothing was "
                "published. Choose a new output_dir."
            )
        if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            used = "rename"
        elif code:
            raise _write_error(f"Publishing {output_dir}", OSError(code, os.strerror(code)))
    if used == "rename":
        check_output_path(output_dir)
        try:
            os.rename(temp_dir, output_dir)
        except OSError as error:
            if error.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise OutputExistsError(
                    f"Output path {output_dir} appeared while generating; nothing was published. "
                    "Choose a new output_dir."
                ) from error
            raise _write_error(f"Publishing {output_dir}", error) from error
    report_phase("renamed")
    try:
        _fsync_dir(output_dir.parent)
    except OSError as error:  # the rename happened: say so, never "nothing was published"
        raise WriteError(
            f"{output_dir} was published, but syncing {output_dir.parent} failed ({error.strerror or error}); "
            "the rename may not survive a power loss: run `gencache verify` on it after a crash."
        ) from error
    report_phase("published")
    return used


def clean(parent: Path | str) -> list[Path]:
    """Remove ``.<name>.gencache-<host>-<pid>-<random>`` directories in ``parent`` left by dead processes of this
    host; return what was removed. Directories of live processes, other hosts and anything else are kept."""
    parent = Path(parent)
    if not parent.is_dir():
        raise ConfigError(f"{parent} is not a directory; give the directory that holds the output directories.")
    host = _host_tag()
    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError as error:
        raise WriteError(f"Cannot list {parent}: {error.strerror or error}.") from error
    for entry in entries:
        match = _TEMP_RE.match(entry.name)
        if match is None or match["host"] != host or not entry.is_dir(follow_symlinks=False):
            continue
        if _pid_alive(int(match["pid"])):
            continue
        try:
            shutil.rmtree(entry.path)
        except OSError as error:
            raise _write_error(f"Removing {entry.path}", error) from error
        removed.append(Path(entry.path))
    return sorted(removed)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with suppress(OSError), open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
        state = handle.read().rpartition(")")[2].split()
        if state and state[0] in ("Z", "X"):
            return False
    return True


# -- the payload writer ------------------------------------------------------------------------------------
def _as_view(sequence: object, where: str) -> memoryview:
    try:
        view = memoryview(sequence)  # type: ignore[arg-type]
    except TypeError:
        raise FormatError(
            f"{where} must be a bytes-like object of little-endian int64 token ids (for a tensor: "
            "t.to(torch.int64).contiguous().numpy())."
        ) from None
    if not view.c_contiguous:
        raise FormatError(f"{where} must be contiguous.")
    kind = view.format.lstrip("@=<")
    if kind not in ("B", "b", "c") and not (kind in ("q", "l") and view.itemsize == TOKEN_BYTES):
        raise FormatError(
            f"{where} holds elements of format {view.format!r}; give little-endian int64 token ids or their raw bytes."
        )
    view = view.cast("B")
    if view.nbytes == 0 or view.nbytes % TOKEN_BYTES:
        raise FormatError(f"{where} must hold at least one int64 token ({view.nbytes} bytes given).")
    return view


class CacheWriter:
    """Streams entries into ``<directory>/cache.safetensors`` and finalizes the artifact's three files.

    Only entry metadata (offsets, lengths, digests, texts, finish reasons) is kept in memory. A failed append
    rolls the file back to the previous entry and leaves the writer usable; identical re-adds are no-ops and
    conflicting ones raise :class:`FormatError`. Until :meth:`finalize` the header is all spaces, so no
    safetensors loader accepts the file. Leaving a ``with`` block without finalizing removes the files.
    """

    def __init__(self, directory: Path | str, *, provenance: Mapping[str, Any], header_capacity: int) -> None:
        self.directory = Path(directory)
        self.provenance = check_provenance(provenance)
        self.provenance_digest = provenance_digest(self.provenance)
        prefix = length_prefix(header_capacity)
        self.header_capacity = header_capacity
        self.path = self.directory / PAYLOAD_NAME
        self.timings: dict[str, float] = {}
        self._records: dict[str, Record] = {}
        self._data_start = LENGTH_PREFIX_BYTES + header_capacity
        self._data_end = 0
        self._state = "open"
        self._created: list[Path] = []
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise _write_error(f"Creating {self.path}", error) from error
        self._created.append(self.path)
        try:
            _pwrite_all(self._fd, prefix, 0)
            spaces = b" " * min(header_capacity, _CHUNK)
            for offset in range(0, header_capacity, len(spaces)):
                _pwrite_all(self._fd, spaces[: header_capacity - offset], LENGTH_PREFIX_BYTES + offset)
        except BaseException as error:
            self.abort()
            if isinstance(error, OSError):
                raise _write_error(f"Reserving the header of {self.path}", error) from error
            raise

    # -- state --------------------------------------------------------------------------------------------
    @property
    def finalized(self) -> bool:
        return self._state == "finalized"

    def keys(self) -> KeysView[str]:
        """Keys appended so far, in generation order."""
        return self._records.keys()

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key: object) -> bool:
        return key in self._records

    def _require_open(self, action: str) -> None:
        if self._state != "open":
            raise WriteError(f"Cannot {action}: this CacheWriter is {self._state}; start a new artifact.")

    # -- appending ----------------------------------------------------------------------------------------
    def add(self, key: str, sequences: Sequence[Any], texts: Sequence[str], finish_reasons: Sequence[str]) -> bool:
        """Append one entry: its answer sequences (bytes-like, little-endian int64), one text and one finish
        reason per sequence. Returns False for an identical re-add (nothing written).

        The common case (one ``bytes`` sequence, one ``str`` text, one finish reason, in lists or tuples) is
        checked inline; everything else, errors included, goes through :meth:`_add_general` (the same checks).
        What is kept is one flat tuple per entry (:data:`gencache.format.Record`).
        """
        if self._state != "open":
            self._require_open("add entries")
        try:  # 64 lowercase hex digits: the hex round trip rejects upper case, whitespace and other characters
            valid = type(key) is str and len(key) == 64 and _FROMHEX(key).hex() == key
        except ValueError:
            valid = False
        if not valid:
            raise FormatError(f"Entry key {key!r} is not a 64-character lowercase hex semantic key.")
        if (
            type(sequences) in _LISTS
            and len(sequences) == 1
            and type(texts) in _LISTS
            and len(texts) == 1
            and type(finish_reasons) in _LISTS
            and len(finish_reasons) == 1
        ):
            data, text, reason = sequences[0], texts[0], finish_reasons[0]
            size = len(data) if type(data) is bytes else 0
            if (
                size
                and not size % TOKEN_BYTES
                and type(reason) is str
                and reason in _REASONS
                and type(text) is str
                and (text.isascii() or _encodable(text))
            ):
                if key in self._records:
                    return self._re_add(key, [data], (size // TOKEN_BYTES, None, text, reason))
                start = self._data_end
                try:
                    digest = _SHA256(data).digest()
                    written = os.pwrite(self._fd, data, self._data_start + start)
                    if written != size:
                        _pwrite_rest(self._fd, data, self._data_start + start, written)
                except BaseException as error:
                    self._rollback(start)
                    if isinstance(error, OSError):
                        raise _write_error(f"Appending entry {key} to {self.path}", error) from error
                    raise
                self._records[key] = (start, size // TOKEN_BYTES, digest, text, reason)
                self._data_end = start + size
                if _PHASE_FDS is not None:
                    report_phase("appended")
                return True
        return self._add_general(key, sequences, texts, finish_reasons)

    def _add_general(
        self, key: str, sequences: Sequence[Any], texts: Sequence[str], finish_reasons: Sequence[str]
    ) -> bool:
        if isinstance(sequences, (bytes, bytearray, memoryview)):
            raise FormatError(f"Entry {key}: sequences must be a list of sequences, not one bytes object.")
        for name, value in (("texts", texts), ("finish reasons", finish_reasons)):
            if isinstance(value, (str, bytes, bytearray, memoryview)):
                raise FormatError(f"Entry {key}: {name} must be a list of strings, one per sequence, not one string.")
        buffers: list[bytes | memoryview] = []
        for i, sequence in enumerate(sequences):
            if type(sequence) is bytes and sequence and not len(sequence) % TOKEN_BYTES:
                buffers.append(sequence)
            else:
                buffers.append(_as_view(sequence, f"Entry {key} sequence {i}"))
        texts, reasons = tuple(texts), tuple(finish_reasons)
        count = len(buffers)
        if not count:
            raise FormatError(f"Entry {key} has no sequences; every entry needs at least one answer.")
        if len(texts) != count or len(reasons) != count:
            raise FormatError(
                f"Entry {key} has {count} sequences, {len(texts)} texts and {len(reasons)} finish reasons; "
                "give one text and one finish reason per sequence."
            )
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise FormatError(f"Entry {key} text {i} must be a str, got {type(text).__name__}.")
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as error:
                raise FormatError(f"Entry {key} text {i} is not valid Unicode ({error.reason}).") from None
        for reason in reasons:
            if not isinstance(reason, str) or reason not in _REASONS:
                raise FormatError(f"Entry {key} finish reason {reason!r} is not one of {', '.join(FINISH_REASONS)}.")
        sizes = [b.nbytes if isinstance(b, memoryview) else len(b) for b in buffers]
        fields: list[Any] = []  # (n, digest placeholder, text, reason) per sequence; reasons as the plain str
        for size, text, reason in zip(sizes, texts, reasons, strict=True):
            fields += (size // TOKEN_BYTES, None, text, _REASON_STR[reason])
        if key in self._records:
            return self._re_add(key, buffers, tuple(fields))
        start = self._data_end
        total = sum(sizes)
        try:
            fields[1::RECORD_STRIDE] = [_SHA256(b).digest() for b in buffers]
            if count == 1:
                _pwrite_all(self._fd, buffers[0], self._data_start + start)
            else:
                _pwritev_all(self._fd, buffers, total, self._data_start + start)
        except BaseException as error:
            self._rollback(start)
            if isinstance(error, OSError):
                raise _write_error(f"Appending entry {key} to {self.path}", error) from error
            raise
        self._records[key] = (start, *fields)
        self._data_end = start + total
        if _PHASE_FDS is not None:
            report_phase("appended")
        return True

    def _re_add(self, key: str, buffers: Sequence[bytes | memoryview], fields: tuple[Any, ...]) -> bool:
        """An entry whose key was already added: False when its content (``fields``: the record without its
        start, digests left ``None``) is identical, else :class:`FormatError`. Nothing is written."""
        new = list(fields)
        new[1::RECORD_STRIDE] = [_SHA256(b).digest() for b in buffers]
        if self._records[key][1:] == tuple(new):
            return False
        raise FormatError(
            f"Conflicting duplicate key {key}: it was already added with different content; a key must always "
            "map to one generation."
        )

    def _rollback(self, data_end: int) -> None:
        try:
            os.ftruncate(self._fd, LENGTH_PREFIX_BYTES + self.header_capacity + data_end)
        except OSError:
            self._state = "failed"

    # -- finalizing ---------------------------------------------------------------------------------------
    def finalize(self, *, resolved_config: Mapping[str, Any], summary: Mapping[str, Any]) -> None:
        """Write the header in place, ``manifest.json`` and ``resolved_config.json``; fsync files and directory.

        ``summary`` holds the caller's ``duplicates``, ``data_configs`` and ``shard`` (any may be omitted); the
        writer adds ``entries``, ``sequences``, ``tokens`` and ``finish_reasons``. On any failure, including
        :class:`HeaderCapacityError`, the writer's files are removed and the error re-raised.
        ``self.timings`` records ``build_s``, ``write_s`` and ``fsync_s`` of this call.
        """
        self._require_open("finalize")
        if not isinstance(resolved_config, Mapping):
            raise FormatError("resolved_config must be a JSON object (a mapping).")
        try:
            self._finalize(resolved_config, summary)
        except BaseException as error:
            self.abort()
            if isinstance(error, OSError) and not isinstance(error, WriteError):
                raise _write_error(f"Finalizing {self.directory}", error) from error
            raise
        self._state = "finalized"

    def _finalize(self, resolved_config: Mapping[str, Any], summary: Mapping[str, Any]) -> None:
        clock = time.perf_counter
        started = clock()
        keys = sorted_record_keys(self._records)
        header = build_header(self._records, self.provenance_digest, sorted_keys=keys)
        if len(header) > self.header_capacity:
            raise HeaderCapacityError(
                f"The safetensors header needs {len(header):,} bytes but only {self.header_capacity:,} were "
                "reserved; reserve gencache.format.header_capacity(entries, sequences_per_entry, max_new_tokens) "
                "for the run, or split it with --shard. Nothing was published."
            )
        # The manifest is streamed to its file in ~1 MiB pieces (memory stays flat however many entries); its
        # keys, provenance and summary are checked, and its first piece built, before anything is written.
        manifest = iter_manifest_bytes(
            self.provenance, self._records, build_summary(self._records, summary), sorted_keys=keys
        )
        first = next(manifest)
        resolved = json_file_bytes(dict(resolved_config))
        built = clock()
        expected = LENGTH_PREFIX_BYTES + self.header_capacity + self._data_end
        actual = os.fstat(self._fd).st_size
        if actual != expected:
            raise WriteError(f"{self.path} is {actual} bytes, expected {expected}; it was changed behind the writer.")
        _pwrite_all(self._fd, header, LENGTH_PREFIX_BYTES)
        os.fchmod(self._fd, READ_ONLY)
        written = clock()
        os.fsync(self._fd)
        synced = clock()
        fd, self._fd = self._fd, -1
        os.close(fd)
        report_phase("header_written")
        build_s = built - started
        write_s = written - built
        fsync_s = synced - written
        for name, pieces, phase in (
            (MANIFEST_NAME, itertools.chain((first,), manifest), "manifest_written"),
            (RESOLVED_NAME, (resolved,), "resolved_written"),
        ):
            b, w, f = self._write_new(self.directory / name, pieces)
            build_s += b
            write_s += w
            fsync_s += f
            report_phase(phase)
        before = clock()
        _fsync_dir(self.directory)
        fsync_s += clock() - before
        self.timings = {"build_s": build_s, "write_s": write_s, "fsync_s": fsync_s}

    def _write_new(self, path: Path, pieces: Iterable[bytes]) -> tuple[float, float, float]:
        """Write a new read-only file from ``pieces``; seconds spent producing the pieces, writing, fsyncing."""
        clock = time.perf_counter
        started = clock()
        produce_s = 0.0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        self._created.append(path)
        try:
            offset = 0
            iterator = iter(pieces)
            while True:
                before = clock()
                data = next(iterator, None)
                produce_s += clock() - before
                if data is None:
                    break
                _pwrite_all(fd, data, offset)
                offset += len(data)
            os.fchmod(fd, READ_ONLY)
            written = clock()
            os.fsync(fd)
        finally:
            os.close(fd)
        return produce_s, written - started - produce_s, clock() - written

    def abort(self) -> None:
        """Close and remove this writer's files (idempotent; a finalized writer keeps them)."""
        if self._state == "finalized":
            return
        if getattr(self, "_fd", -1) >= 0:
            with suppress(OSError):
                os.close(self._fd)
            self._fd = -1
        for path in self._created:
            with suppress(FileNotFoundError):
                path.unlink()
        self._created.clear()
        self._state = "aborted"

    def __enter__(self) -> CacheWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.finalized:
            self.abort()


# -- the build context -------------------------------------------------------------------------------------
class _SignalGuard:
    """SIGTERM/SIGHUP raise :class:`Terminated` and SIGINT ``KeyboardInterrupt`` (main thread only); critical
    sections defer them; the previous handlers come back on :meth:`restore`."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}
        self.pending: int | None = None
        self.depth = 0

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in self.SIGNALS:
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN or previous is None:
                continue  # an ignored signal stays ignored (nohup)
            self.previous[signum] = previous
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.depth:
            self.pending = signum
            return
        self._raise(signum)

    @staticmethod
    def _raise(signum: int) -> None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(f"Terminated by {signal.Signals(signum).name}; nothing was published.")

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold signals during a critical section; raise a held one at its normal end."""
        self.depth += 1
        try:
            yield
        except BaseException:
            self.depth -= 1
            raise
        self.depth -= 1
        if not self.depth and self.pending is not None:
            signum, self.pending = self.pending, None
            self._raise(signum)

    def restore(self, *, redeliver: bool) -> None:
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)
        self.previous.clear()
        if self.pending is not None:
            signum, self.pending = self.pending, None
            if redeliver:
                signal.raise_signal(signum)


class ArtifactBuild:
    """Context manager for one artifact: temporary directory, writer, signal-safe cleanup, publish.

    ::

        with ArtifactBuild(output_dir, provenance=p, header_capacity=h, rename_mode=probe_rename(parent)) as build:
            for key, seqs, texts, reasons in results:
                build.writer.add(key, seqs, texts, reasons)
            build.writer.finalize(resolved_config=resolved, summary=summary)
            mode = build.publish()

    On entry: :func:`check_output_path`, the parent directory is created, SIGTERM/SIGHUP handlers are installed
    (main thread only) and ``.<name>.gencache-<host>-<pid>-<random>`` (mode 0700) is created beside
    ``output_dir``. Any exception, Ctrl-C or SIGTERM before :meth:`publish` removes it; leaving the block
    without publishing removes it too. The previous signal handlers are restored on exit.
    """

    def __init__(
        self,
        output_dir: Path | str,
        *,
        provenance: Mapping[str, Any],
        header_capacity: int,
        rename_mode: str | None = None,
    ) -> None:
        if rename_mode not in (None, *RENAME_MODES):
            raise ValueError(f"rename_mode must be one of {RENAME_MODES} or None, got {rename_mode!r}")
        self.output_dir = Path(output_dir).expanduser().absolute()
        self.provenance = check_provenance(provenance)
        self.header_capacity = header_capacity
        self.rename_mode = rename_mode
        self.temp_dir: Path | None = None
        self.published_mode: str | None = None
        self._writer: CacheWriter | None = None
        self._signals = _SignalGuard()

    @property
    def writer(self) -> CacheWriter:
        if self._writer is None:
            raise WriteError("ArtifactBuild.writer is only available inside the with block.")
        return self._writer

    def __enter__(self) -> ArtifactBuild:
        check_output_path(self.output_dir)
        try:
            self.output_dir.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise _write_error(f"Creating {self.output_dir.parent}", error) from error
        self._signals.install()
        try:
            with self._signals.deferred():
                temp = self.output_dir.parent / _temp_name(self.output_dir)
                temp.mkdir(mode=0o700)
                self.temp_dir = temp
            report_phase("temp_created")
            self._writer = CacheWriter(self.temp_dir, provenance=self.provenance, header_capacity=self.header_capacity)
        except BaseException as error:
            self._cleanup(in_flight=True)
            if isinstance(error, OSError) and not isinstance(error, WriteError):
                raise _write_error(f"Creating a temporary directory beside {self.output_dir}", error) from error
            raise
        return self

    def publish(self) -> str:
        """Rename the finalized temporary directory to ``output_dir``; return ``"renameat2"`` or ``"rename"``."""
        if self._writer is None or self.temp_dir is None:
            raise WriteError("ArtifactBuild.publish must be called inside the with block.")
        if not self._writer.finalized:
            raise WriteError("Finalize the writer before publishing; nothing was published.")
        if self.published_mode is not None:
            raise WriteError(f"{self.output_dir} was already published.")
        with self._signals.deferred():
            mode = publish(self.temp_dir, self.output_dir, mode=self.rename_mode)
            self.published_mode = mode
        return mode

    def _cleanup(self, *, in_flight: bool) -> None:
        self._signals.depth += 1
        try:
            if self.published_mode is None:
                if self._writer is not None:
                    self._writer.abort()
                if self.temp_dir is not None:
                    shutil.rmtree(self.temp_dir, ignore_errors=True)
        finally:
            self._signals.depth -= 1
            self._signals.restore(redeliver=not in_flight)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._cleanup(in_flight=exc is not None)


__all__ = [
    "PHASE_ENV",
    "RENAME_MODES",
    "ArtifactBuild",
    "CacheWriter",
    "check_output_path",
    "clean",
    "probe_rename",
    "publish",
    "report_phase",
]
