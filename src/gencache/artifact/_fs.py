"""Small file-system helpers shared by the writer and publishing: names, positional writes, fsync, errors."""

from __future__ import annotations

import errno
import os
import re
from contextlib import suppress
from pathlib import Path

from gencache.core.errors import WriteError

MAX_WRITE_BYTES = 8 * 1024 * 1024  # largest single write
_IOV_BATCH = 64  # buffers per pwritev (far below IOV_MAX)


TEMP_RE = re.compile(r"^\.(?P<name>.+)\.gencache-(?P<host>.+)-(?P<pid>\d+)-(?P<token>[0-9a-f]{8})\Z")


def host_tag() -> str:
    import socket  # here, not at import: reading an artifact needs only TEMP_RE of this module

    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "host"


def temp_name(output_dir: Path, label: str = "") -> str:
    import secrets

    return f".{output_dir.name}{label}.gencache-{host_tag()}-{os.getpid()}-{secrets.token_hex(4)}"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``: one ``pwrite`` unless it comes back short."""
    written = os.pwrite(fd, data, offset)
    if written != (len(data) if type(data) is bytes else memoryview(data).nbytes):
        pwrite_rest(fd, data, offset, written)


def pwrite_rest(fd: int, data: bytes | memoryview, offset: int, written: int) -> None:
    """Continue after a short ``pwrite`` of ``written`` bytes (a file-size limit, a 2 GiB kernel cap, a signal)."""
    view = memoryview(data).cast("B")
    while True:
        if written <= 0:
            raise OSError(errno.EIO, "write made no progress")
        view, offset = view[written:], offset + written
        if not view:
            return
        written = os.pwrite(fd, view[:MAX_WRITE_BYTES], offset)


def pwritev_all(fd: int, buffers: list[bytes | memoryview], total: int, offset: int) -> None:
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


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def umask() -> int:
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


def write_error(what: str, error: OSError) -> WriteError:
    name = errno.errorcode.get(error.errno or 0, "")
    detail = f"{error.strerror or error} ({name})" if name else str(error)
    wrapped = WriteError(f"{what} failed: {detail}; {_error_hint(error)}. Nothing was published.")
    wrapped.errno = error.errno
    return wrapped
