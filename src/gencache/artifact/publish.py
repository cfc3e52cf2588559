"""Publishing: an artifact directory renamed into place without replacing anything (``renameat2(RENAME_NOREPLACE)``,
or a plain rename of the non-empty directory where the filesystem lacks the flag), ``gencache clean`` of what
killed writers left, and :func:`publish_file`, one small file written whole or not at all."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
import re
import secrets
import shutil
import socket
from collections.abc import Callable, Collection
from contextlib import suppress
from pathlib import Path
from typing import IO, TypeVar

from gencache.artifact.names import TEMP_RE
from gencache.config.paths import check_output_name
from gencache.core.errors import ConfigError, OutputExistsError, WriteError


def host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "host"


def temp_name(output_dir: Path, label: str = "") -> str:
    return f".{output_dir.name}{label}.gencache-{host_tag()}-{os.getpid()}-{secrets.token_hex(4)}"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def umask() -> int:
    """The process's umask, read without setting it where Linux shows it (``os.umask`` would change it for every
    thread meanwhile); kernels before 4.7 and systems without /proc have no ``Umask:`` line."""
    with suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_error(what: str, error: OSError) -> WriteError:
    name = errno.errorcode.get(error.errno or 0, "")
    detail = f"{error.strerror or error} ({name})" if name else str(error)
    hint = "check the output filesystem"
    if error.errno == errno.EFBIG:
        hint = "the file-size limit (ulimit -f) or the filesystem's maximum file size was reached"
    elif error.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "the disk or quota is full; free space"
    wrapped = WriteError(f"{what} failed: {detail}; {hint}. Nothing was published.")
    wrapped.errno = error.errno
    return wrapped


T = TypeVar("T")
_PROBE = ".rename-probe"  # in the name of probe_rename's scratch directory
_PROBE_NAME = "probe" + _PROBE  # how that name starts
NAME_MAX = 255  # the longest file name (bytes) Linux file systems take
PATH_MAX = 4096  # the longest path (bytes) the kernel takes


def check_output_path(output_dir: Path) -> None:
    """Refuse an output path that exists (even as an empty directory or a dangling symlink), whose name a temporary
    directory could have (``gencache clean`` would take it for a leftover), or too long once the temporary names are
    derived from it."""
    check_output_name(os.fspath(output_dir), "output_dir")
    if os.path.lexists(output_dir):
        link = f" as a dangling symlink to {os.readlink(output_dir)}" if not os.path.exists(output_dir) else ""
        raise OutputExistsError(
            f"Output path {output_dir} already exists{link}; choose a new output_dir (gencache never overwrites, "
            "appends to or resumes an artifact)."
        )
    if TEMP_RE.match(output_dir.name):
        raise ConfigError(
            f"output_dir {output_dir} has the form of a gencache temporary directory (.NAME.gencache-HOST-PID-HEX), "
            "which gencache clean removes; choose another name."
        )
    lock = output_dir.parent / (temp_name(output_dir) + LOCK_SUFFIX)  # the longest name and path a build derives
    longest = max(len(os.fsencode(part)) for part in (*output_dir.parts, lock.name))
    if longest > NAME_MAX or len(os.fsencode(os.path.abspath(lock))) > PATH_MAX:
        raise ConfigError(
            f"output_dir {str(output_dir)[:60]}... is too long: a name in it or derived from it would be over "
            f"{NAME_MAX} bytes (or the path over {PATH_MAX}); choose a shorter path."
        )


def _renameat2(source: Path, target: Path) -> int:
    """``renameat2(source, target, RENAME_NOREPLACE)`` through libc; 0 or the errno (ENOSYS where libc lacks it)."""
    func = getattr(_libc(), "renameat2", None)
    if func is None:
        return errno.ENOSYS
    at_fdcwd, noreplace = -100, 1
    if func(at_fdcwd, os.fsencode(source), at_fdcwd, os.fsencode(target), noreplace) == 0:
        return 0
    return ctypes.get_errno()  # a failed call (-1) always sets it


_libc = functools.cache(lambda: ctypes.CDLL(None, use_errno=True))


def probe_rename(parent: Path) -> str:
    """Which publish rename ``parent``'s filesystem supports, ``"renameat2"`` or ``"rename"``, found by renaming a
    directory in a scratch directory (where the flag is taken, the kernel itself refuses an existing target)."""
    scratch = parent / temp_name(parent / "probe", _PROBE)
    try:
        try:
            scratch.mkdir(mode=0o700, parents=True)
            (scratch / "a").mkdir()
        except OSError as error:
            raise write_error(f"Creating a scratch directory in {parent}", error) from error
        code = _renameat2(scratch / "a", scratch / "b")
        if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            return "rename"
        if code:
            raise WriteError(f"renameat2 probe in {parent} failed: {os.strerror(code)}; check the output filesystem.")
        return "renameat2"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def publish(temp_dir: Path, output_dir: Path) -> str:
    """Rename the finished ``temp_dir`` to ``output_dir`` without replacing anything; return the mode used.

    Where ``renameat2(RENAME_NOREPLACE)`` is missing, a plain rename of the non-empty directory, which refuses an
    existing non-empty directory, a file or a symlink, after checking the output is still absent.
    """
    try:
        os.chmod(temp_dir, 0o777 & ~umask())
        fsync_dir(temp_dir)
    except OSError as error:
        raise write_error(f"Preparing {temp_dir} for publishing", error) from error
    code = _renameat2(temp_dir, output_dir)
    used = "renameat2"
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        used = "rename"
        check_output_path(output_dir)
        try:
            os.rename(temp_dir, output_dir)
            code = 0
        except OSError as error:
            code = errno.EEXIST if error.errno == errno.ENOTEMPTY else error.errno or errno.EIO
    if code == errno.EEXIST:
        raise OutputExistsError(
            f"Output path {output_dir} appeared while generating; it was left untouched and nothing was published. "
            "Choose a new output_dir."
        )
    if code:
        raise write_error(f"Publishing {output_dir}", OSError(code, os.strerror(code)))
    try:
        fsync_dir(output_dir.parent)
    except OSError as error:  # the rename happened: say so, never "nothing was published"
        raise WriteError(
            f"{output_dir} was published, but syncing {output_dir.parent} failed ({error.strerror or error}); "
            "the rename may not survive a power loss: run `gencache verify` on it after a crash."
        ) from error
    return used


def publish_file(path: Path | str, write: Callable[[IO[bytes]], T], *, replace: bool = True) -> T:
    """Write the file ``path`` whole or not at all; return what ``write`` returned.

    ``write(handle)`` fills a temporary sibling, which is fsynced and renamed over ``path`` (``replace``) or
    hard-linked to it, raising :class:`FileExistsError` where a file exists. Failing file-system steps raise
    :class:`WriteError`; what ``write`` raises passes through.
    """
    target = Path(os.path.abspath(path))
    temporary = target.with_name(temp_name(target))
    step: str | None = f"Writing {target}"
    try:
        with open(temporary, "xb") as handle:
            step = None  # what write raises passes through
            result = write(handle)
            step = f"Writing {target}"
            handle.flush()
            os.fsync(handle.fileno())
        step = f"Publishing {target}"
        (os.replace if replace else os.link)(temporary, target)
    except OSError as error:
        if step is None or (isinstance(error, FileExistsError) and step.startswith("Publishing")):
            raise
        raise write_error(step, error) from error
    finally:
        temporary.unlink(missing_ok=True)
    with suppress(OSError):  # the file is in place and whole; only its survival of a power loss is less sure
        fsync_dir(target.parent)
    return result


# -- the writer's lock and gencache clean ---------------------------------------------------------------------
LOCK_SUFFIX = ".lock"


def lock_path(temp_dir: Path) -> Path:
    """``<temp_dir>.lock``, beside the directory (an artifact holds exactly its three files)."""
    return temp_dir.with_name(temp_dir.name + LOCK_SUFFIX)


def hold_lock(temp_dir: Path) -> int:
    """Create and ``flock`` the lock file of ``temp_dir`` before the directory exists; return its descriptor.

    The kernel drops the lock when the process ends, however it ends, so ``gencache clean`` tells a live writer
    from a dead one on any host or PID namespace that shares the filesystem's locks.
    """
    path = lock_path(temp_dir)
    for _ in range(3):
        fd = -1
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            # Blocking: a cleaner that found this fresh file before the directory exists holds its lock only while
            # it removes the file. Then the inode check below fails and a new file is created.
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except BaseException as error:  # a stop included: the file this call created goes with it
            if fd >= 0:
                os.close(fd)
                if isinstance(error, FileNotFoundError):
                    continue  # a cleaner removed it: create another
            with suppress(OSError):  # the name is this process's own (host, pid, random)
                path.unlink()
            if isinstance(error, OSError):
                raise write_error(f"Locking {path}", error) from error
            raise
        os.close(fd)
    raise WriteError(f"The lock file {path} kept disappearing (a concurrent gencache clean?); rerun.")


def release_lock(temp_dir: Path, fd: int) -> None:
    """Remove the lock file, then drop the lock (the directory was renamed into place or removed before)."""
    with suppress(OSError):
        lock_path(temp_dir).unlink()
    with suppress(OSError):
        os.close(fd)


def _try_lock(path: str) -> tuple[str, int]:
    """``flock`` an existing lock file without waiting: ``("dead", fd)`` when it was free (this call now holds it),
    ``("live", -1)`` when a writer holds it (or it cannot be opened), ``("absent", -1)`` when there is none."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return "absent", -1
    except OSError as error:
        if error.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            return "live", -1  # unreadable: leave it alone
        try:  # a read-only file system or file: flock works on a read-only descriptor too
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return "live", -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return "live", -1
    return "dead", fd


def clean(parent: Path, outputs: Collection[str] | None = None) -> list[Path]:
    """Remove the temporary directories in ``parent`` whose writer is dead (with ``outputs``, only those of these
    output names); return what this call removed.

    A directory whose lock file is free has a dead writer; one without a lock file is not a writer's, except the
    scratch directories of :func:`probe_rename`, removed (whatever ``outputs``) once the process on this host that
    named them is gone: a process killed while it probed, a Ray worker say, leaves one.
    What cannot be removed is named in one :class:`WriteError` after the rest is removed.
    """
    if not parent.is_dir():
        raise ConfigError(f"{parent} is not a directory; give the directory that holds the output directories.")
    removed = []
    try:
        names = os.listdir(parent)
    except OSError as error:
        raise WriteError(f"Cannot list {parent}: {error.strerror or error}.") from error
    failed: list[str] = []
    for name in sorted(names):
        match = TEMP_RE.match(name.removesuffix(LOCK_SUFFIX))
        probe = match is not None and match["name"].startswith(_PROBE_NAME)
        if match is None or (outputs is not None and match["name"] not in outputs and not probe):
            continue
        path = os.path.join(parent, name)
        if name.endswith(LOCK_SUFFIX):
            if not os.path.lexists(path.removesuffix(LOCK_SUFFIX)):  # a lock left without its directory
                state, fd = _try_lock(path)
                if state == "dead":
                    with suppress(OSError):
                        os.unlink(path)
                    os.close(fd)
            continue
        if not os.path.isdir(path) or os.path.islink(path):
            continue
        lock = path + LOCK_SUFFIX
        state, fd = _try_lock(lock)
        if state == "live":
            continue
        if state == "absent" and (
            not probe or match["host"] != host_tag() or pid_alive(int(match["pid"]))
        ):  # no lock file: not a writer's directory, or a rename probe's scratch directory still in use
            continue
        try:
            shutil.rmtree(path)
            removed.append(Path(path))
            with suppress(OSError):  # a rename probe's scratch directory has none
                os.unlink(lock)
        except FileNotFoundError:
            pass  # another cleaner removed it meanwhile
        except OSError as error:
            failed.append(f"{path} ({error.strerror or error})")
        finally:
            if fd >= 0:
                os.close(fd)
    if failed:
        done = f"removed {len(removed)}; " if removed else ""
        raise WriteError(
            f"{done}could not remove {len(failed)} temporary director{'y' if len(failed) == 1 else 'ies'}: "
            f"{'; '.join(failed)}; remove them by hand or rerun where the file system is writable."
        )
    return removed


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie does not)."""
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
