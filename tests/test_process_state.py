"""Library calls leave the process as they found it: an unreachable hub is probed once per call and hub ids then
come from the local cache without any process-wide switch (a hub dataset's load aside, for that load alone), and
the host memory the KV budgets use is Linux's MemAvailable."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gencache
from gencache.core import hub
from gencache.core.errors import GencacheError
from gencache.generation.engines import GIB, available_host_memory
from support.config_factory import musique, write_config

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def _constants() -> dict[str, Any]:
    import datasets.config
    import huggingface_hub.constants

    return {
        "huggingface_hub": huggingface_hub.constants.HF_HUB_OFFLINE,
        "datasets": datasets.config.HF_HUB_OFFLINE,
        "datasets_own": datasets.config.HF_DATASETS_OFFLINE,
    }


@pytest.fixture()
def unreachable_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A notebook-like process: the libraries online (not told to be offline), the hub endpoint a closed port."""
    import datasets.config
    import huggingface_hub.constants

    for name in (*OFFLINE_VARIABLES, *PROXIES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False)
    yield


@pytest.mark.usefixtures("unreachable_hub")
def test_an_unreachable_hub_is_probed_once_per_scope_and_nothing_is_switched() -> None:
    before_env, before = dict(os.environ), _constants()
    assert not hub.hub_state().online  # outside a scope: a probe
    with hub.probe_scope():
        state = hub.hub_state()
        assert not state.online and "cannot be reached" in state.reason
        with hub.probe_scope():  # an inner scope shares the outer one's probe
            assert hub.hub_state() is state
        assert hub.pretrained_kwargs("some-org/some-model", "abc") == {"revision": "abc", "local_files_only": True}
        assert dict(os.environ) == before_env and _constants() == before  # the process is left alone
    with hub.probe_scope():
        assert hub.hub_state() is not state  # probed again: the hub may be back


@pytest.mark.usefixtures("unreachable_hub")
def test_a_hub_dataset_load_is_offline_for_that_load_alone(tmp_path: Path) -> None:
    before = _constants()
    with hub.probe_scope():
        with hub.datasets_offline(hub.hub_state()):
            assert set(_constants().values()) == {True}
        assert _constants() == before
        with hub.datasets_offline(hub.HubState(True, hub.endpoint(), "")):  # a reachable hub: nothing changes
            assert _constants() == before
    assert hub.pretrained_kwargs(str(tmp_path), None) == {}  # a local directory never needs the hub


@pytest.mark.usefixtures("unreachable_hub")
def test_overlapping_offline_loads_in_two_threads_leave_the_hub_online() -> None:
    """Thread A enters, thread B enters, A leaves, B leaves: B's load stays offline after A left, and the
    constants are back as they were once both have left."""
    offline = hub.HubState(False, "http://127.0.0.1:9", "the hub cannot be reached")
    before = _constants()
    a_entered, b_entered, a_left = threading.Event(), threading.Event(), threading.Event()
    seen: list[dict[str, Any]] = []

    def load_a() -> None:
        with hub.datasets_offline(offline):
            a_entered.set()
            b_entered.wait(10)
        a_left.set()

    def load_b() -> None:
        a_entered.wait(10)
        with hub.datasets_offline(offline):
            b_entered.set()
            a_left.wait(10)
            seen.append(_constants())

    threads = [threading.Thread(target=load_a), threading.Thread(target=load_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen and set(seen[0].values()) == {True}  # B is still offline after A left
    assert _constants() == before


@pytest.mark.usefixtures("unreachable_hub")
def test_an_offline_generate_leaves_the_environment_and_the_libraries_as_it_found_them(
    tmp_path: Path, tiny_teacher_dir: Path
) -> None:
    before_env, before = dict(os.environ), _constants()
    hub_model = write_config(tmp_path, "some-org/some-model")
    report = gencache.generate(hub_model, dry_run=True)
    assert report.exit_code == 2
    assert any("some-org/some-model" in str(problem) for problem in report.preflight.errors)
    assert dict(os.environ) == before_env and _constants() == before
    hub_data = write_config(tmp_path, tiny_teacher_dir, data_configs=[musique(source=None)])
    with pytest.raises(GencacheError, match="hub dataset"):
        gencache.generate(hub_data)
    assert dict(os.environ) == before_env and _constants() == before


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
