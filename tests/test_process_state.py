"""The host memory the KV budgets use is Linux's MemAvailable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gencache.generation.engines import GIB, available_host_memory


def test_host_memory_is_meminfo_s_memavailable(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemFree:          100000 kB\nMemAvailable:   20000000 kB\n")
    assert available_host_memory(str(meminfo)) == 20_000_000 * 1024  # the page cache counts, free pages alone do not


def test_host_memory_falls_back_to_the_free_pages_without_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\n")  # no MemAvailable line (a kernel before 3.14)
    free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in (meminfo, tmp_path / "missing"):
        assert abs(available_host_memory(str(path)) - free) < GIB


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="Linux only")
def test_host_memory_on_linux_reads_proc_meminfo() -> None:
    line = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemAvailable:"))
    expected = int(line.split()[1]) * 1024
    assert abs(available_host_memory() - expected) < GIB
