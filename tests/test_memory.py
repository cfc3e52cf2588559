"""The reader does not preload: measured in fresh processes from /proc/self/smaps and /proc/self/status."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support.storage_helpers import CHILD, PYTHON, child_env, make_entries, write_artifact

ENTRIES = 100
FAULT_AROUND = 64 * 1024  # the kernel maps up to 16 cached pages around a faulting one
PAGE = 4096


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("memory")
    small = write_artifact(root / "small", make_entries(ENTRIES, length=4_000))
    large = write_artifact(root / "large", make_entries(ENTRIES, length=40_000))  # same keys, 10x the payload
    return small, large


@pytest.fixture(scope="module")
def measured(artifacts: tuple[Path, Path]) -> tuple[dict[str, Any], dict[str, Any]]:
    small, large = (measure(path) for path in artifacts)
    return small, large


def measure(path: Path) -> dict[str, Any]:
    result = subprocess.run(
        [PYTHON, str(CHILD), "memory", str(path)],
        env=child_env(),
        cwd=CHILD.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    measured: dict[str, Any] = json.loads(result.stdout)
    return measured


def test_opening_maps_nothing_and_the_first_read_maps_the_payload_and_touches_about_one_entry(
    measured: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    for m in measured:
        assert m["map_open"] is None, m  # the header is read with pread; the map is made by the first read
        assert m["entry_bytes"] <= m["map_read"] <= m["entry_bytes"] + 2 * FAULT_AROUND + 2 * PAGE, m
        assert m["map_read"] * 8 < m["payload_bytes"], m


def test_anonymous_memory_on_open_does_not_grow_with_the_payload(
    measured: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    small, large = measured
    assert large["payload_bytes"] > 9 * small["payload_bytes"]
    payload_difference = large["payload_bytes"] - small["payload_bytes"]
    assert abs(large["anon_open"] - small["anon_open"]) < payload_difference / 10, (small, large)
    assert abs(large["anon_open"] - small["anon_open"]) < 2 * 1024 * 1024, (small, large)
    assert large["anon_read"] < 1024 * 1024 and small["anon_read"] < 1024 * 1024, (small, large)


def _private_dirty() -> int:
    with open("/proc/self/smaps_rollup", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("Private_Dirty:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Private_Dirty in smaps_rollup")


def test_a_forked_worker_shares_the_index_instead_of_copying_it(tmp_path: Path) -> None:
    import gc
    import os

    import torch  # noqa: F401  (a trainer imports it before forking; the worker's first read would otherwise)

    from gencache.artifact.reader import CacheReader

    count = 5_000
    reader = CacheReader(write_artifact(tmp_path / "many", make_entries(count, length=20)))
    reader[next(iter(reader))]  # the first read maps the payload (and sets torch up), as a trainer's would
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: read every entry once, report how much memory it stopped sharing
        try:
            gc.disable()  # a collection would touch every object the parent owns
            before = _private_dirty()
            for key in reader:
                reader[key]
            os.write(write_end, str(_private_dirty() - before).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as handle:
        grown = int(handle.read())
    os.waitpid(pid, 0)
    # a dict-of-dicts manifest costs kilobytes per entry once reference counts are touched; the flat index only
    # the per-entry "verified" flags and a few reused temporaries
    assert grown < 4 * 1024 * 1024, grown
