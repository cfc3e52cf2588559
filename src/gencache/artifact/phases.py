"""The crash tests' phase hook.

When the environment variable ``GENCACHE_TEST_PHASE_FD`` holds ``"W"`` or ``"W:R"`` (file descriptor numbers
inherited from a test process), each phase writes its name and a newline to ``W`` and, with ``R``, then blocks
reading one byte from ``R``, so the test can kill the process at exactly that phase. Phases: ``temp_created``,
``appended`` (after each entry), ``header_written``, ``manifest_written``, ``resolved_written``, ``renamed``
(before the parent fsync) and ``published``. The variable is read once at import; without it the hook costs one
``None`` check.
"""

from __future__ import annotations

import os

PHASE_ENV = "GENCACHE_TEST_PHASE_FD"


def _parse_phase_env(value: str | None) -> tuple[int, int | None] | None:
    if not value:
        return None
    write, _, read = value.partition(":")
    return int(write), (int(read) if read else None)


_PHASE_FDS = _parse_phase_env(os.environ.get(PHASE_ENV))
#: Whether the hook is on (hot loops test this instead of calling :func:`report_phase`).
PHASE_HOOK_ACTIVE = _PHASE_FDS is not None


def report_phase(name: str) -> None:
    """Test hook: with ``GENCACHE_TEST_PHASE_FD="W[:R]"`` set, write ``name`` to fd W and wait for a byte on fd R,
    so crash tests can kill a writer (or ``gencache generate``) exactly in a phase. A no-op otherwise."""
    if _PHASE_FDS is None:
        return
    write_fd, read_fd = _PHASE_FDS
    os.write(write_fd, f"{name}\n".encode())
    if read_fd is not None:
        os.read(read_fd, 1)
