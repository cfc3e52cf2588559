"""Library calls leave the process as they found it: offline mode (switched on when the hub cannot be reached)
lasts for one call, and the host memory the KV budgets use is Linux's MemAvailable."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gencache
from gencache.core import hub
from gencache.core.errors import GencacheError
from gencache.generation.engines.memory import GIB, available_host_memory
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
def test_offline_mode_lasts_for_the_scope_and_the_probe_is_forgotten() -> None:
    before_env, before = dict(os.environ), _constants()
    assert not hub.hub_state().online  # outside a scope: a probe that changes nothing
    assert dict(os.environ) == before_env and _constants() == before
    with hub.offline_scope():
        state = hub.hub_state()
        assert not state.online and "cannot be reached" in state.reason
        assert os.environ["HF_HUB_OFFLINE"] == os.environ["HF_DATASETS_OFFLINE"] == "1"
        assert set(_constants().values()) == {True}
        with hub.offline_scope():  # an inner scope shares the outer one's probe and switch
            assert hub.hub_state() is state
        assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert dict(os.environ) == before_env and _constants() == before
    with hub.offline_scope():
        assert hub.hub_state() is not state  # probed again: the hub may be back


@pytest.mark.usefixtures("unreachable_hub")
def test_a_library_first_imported_inside_the_scope_is_left_as_its_import_would_have_set_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "datasets.config")
    with hub.offline_scope():
        assert not hub.hub_state().online
        imported = types.ModuleType("datasets.config")  # what importing datasets reads from the switched environment
        imported.HF_HUB_OFFLINE = imported.HF_DATASETS_OFFLINE = os.environ["HF_DATASETS_OFFLINE"] == "1"
        monkeypatch.setitem(sys.modules, "datasets.config", imported)
        assert hub.hub_state() and imported.HF_HUB_OFFLINE is True
    assert imported.HF_HUB_OFFLINE is False and imported.HF_DATASETS_OFFLINE is False


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
