"""The reader does not preload: measured in fresh processes from /proc/self/smaps and /proc/self/status."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from storage_helpers import CHILD, PYTHON, child_env, make_entries, write_artifact

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


def test_opening_maps_the_payload_without_reading_it_and_a_read_touches_about_one_entry(
    measured: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    for m in measured:
        assert m["map_open"] == 0, m  # the header is read with pread; the map is untouched
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
