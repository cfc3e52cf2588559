"""Reading an artifact's files: regular files only (never through a symlink), whole reads, maps and exact preads.

Used by :mod:`gencache.artifact.reader`; no torch.
"""

from __future__ import annotations

import mmap
import os
import stat
from pathlib import Path

from gencache.artifact.names import ARTIFACT_FILES, PAYLOAD_NAME, TEMP_RE
from gencache.artifact.shards import find_shards
from gencache.core.errors import FormatError


def open_regular(path: Path, what: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise FormatError(f"{what} {path} cannot be opened ({error.strerror}).") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FormatError(f"{what} {path} is not a regular file.")
    return fd


def read_regular(path: Path, what: str) -> bytes:
    fd = open_regular(path, what)
    try:
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read()
    finally:
        os.close(fd)


def map_regular(path: Path, what: str) -> tuple[mmap.mmap | bytes, os.stat_result]:
    """A read-only shared map of a regular file (file-backed pages, shared by forked processes) and its stat."""
    fd = open_regular(path, what)
    try:
        info = os.fstat(fd)
        return (b"" if info.st_size == 0 else mmap.mmap(fd, 0, prot=mmap.PROT_READ)), info
    finally:
        os.close(fd)


def pread_exact(fd: int, length: int, offset: int) -> bytes:
    chunks = []
    while length:
        chunk = os.pread(fd, min(length, 64 * 1024 * 1024), offset)
        if not chunk:
            raise FormatError(f"{PAYLOAD_NAME} ended early (truncated).")
        chunks.append(chunk)
        length -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _missing(path: Path) -> str:
    """Why an artifact directory that does not exist cannot be opened: a shard base (its shards beside it) is
    opened with ``open_caches``, anything else is a wrong path."""
    shards = find_shards(path)
    if shards is None:
        return f"Cache directory {path} does not exist; check the path (or generate it)."
    return (
        f"{path} is the base of {len(shards.present)} shard directories ({path.name}-shard-*-of-{shards.count:05d}), "
        f"not one artifact: open the shards together with gencache.open_caches({str(path)!r}) (CacheReader opens "
        "one artifact or one shard directory)."
    )


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
        names = set(os.listdir(path))
    except FileNotFoundError:
        raise FormatError(_missing(path)) from None
    except NotADirectoryError:
        raise FormatError(f"Cache path {path} is not a directory.") from None
    except OSError as error:
        raise FormatError(f"Cache directory {path} cannot be listed ({error.strerror}).") from None
    if names != ARTIFACT_FILES:
        extra, missing = sorted(names - ARTIFACT_FILES), sorted(ARTIFACT_FILES - names)
        raise FormatError(
            f"{path}: an artifact directory holds exactly cache.safetensors, manifest.json and resolved_config.json "
            f"(missing: {', '.join(missing) or 'none'}; extra: {', '.join(extra) or 'none'}); move other files "
            "elsewhere or regenerate."
        )
    for name in sorted(ARTIFACT_FILES):
        try:
            mode = os.lstat(path / name).st_mode
        except OSError as error:
            raise FormatError(f"{path}: {name} cannot be read ({error.strerror}).") from None
        if not stat.S_ISREG(mode):
            kind = "a symlink" if stat.S_ISLNK(mode) else "not a regular file"
            raise FormatError(f"{path}: {name} is {kind}; artifact files must be regular files (copy, do not link).")
