"""Session-wide test setup: offline Hugging Face libraries, one torch thread, a bytecode cache shared with the
tests' children (and kept for the next sessions), one tiny teacher and one demo run per session.

The offline variables and the thread count are set at import time, before any test module imports torch,
transformers or datasets (they read them when they are imported); the offline ones are re-asserted by an autouse
session fixture.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The object-storage fixtures `s3_server` and `s3_env` (a local S3 server, a fresh bucket per test).
pytest_plugins = ["support.s3"]

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
os.environ.update(OFFLINE_ENV)
# One torch thread unless the environment asks for more: the tiny teacher's matrices are too small to gain from a
# second thread, and on a shared machine spin-waiting threads made generation two to three times slower. The
# children the tests start (`python -m gencache`, the documentation's commands) inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def share_bytecode() -> None:
    """Where Python is told not to write bytecode (``PYTHONDONTWRITEBYTECODE``) and no cache prefix is set, the
    session and the child processes its tests start (``python -m gencache``, the documentation's commands, the
    signal tests' children) keep compiled modules in one cache per user under the temporary directory, reused by
    the next sessions and never removed (Python checks each compiled module against its source's modification time,
    and a killed session leaves no directory of its own behind): without it every child recompiles torch's and
    transformers' sources, about half of its start-up. Nothing is written in the tree. A directory of that name that
    is not this user's own is not used."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    cache = Path(tempfile.gettempdir()) / f"gencache-tests-bytecode-{os.getuid()}"
    try:
        cache.mkdir(mode=0o700, exist_ok=True)
        if cache.is_symlink() or cache.stat().st_uid != os.getuid():
            return
    except OSError:
        return
    prefix = str(cache)
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    sys.dont_write_bytecode = False
    sys.pycache_prefix = prefix


share_bytecode()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Ray tests first: pytest-xdist hands out whole files in this order (``--dist=loadfile``), so the longest
    file starts at once on one worker, its one local cluster never beside a second, while the others share the rest."""
    items.sort(key=lambda item: item.path.name != "test_ray.py")


@pytest.fixture(scope="session", autouse=True)
def offline_env() -> Iterator[dict[str, str]]:
    """Every test runs with the Hugging Face libraries offline (nothing is ever downloaded)."""
    os.environ.update(OFFLINE_ENV)
    yield dict(OFFLINE_ENV)


@pytest.fixture(scope="session")
def tiny_teacher_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Qwen3 teacher directory (seed 0), built once per session."""
    from gencache.generation.tiny import build_tiny_teacher

    directory: Path = build_tiny_teacher(tmp_path_factory.mktemp("tiny-teacher"), seed=0)
    return directory


@pytest.fixture(scope="session")
def cpu_attention_teacher_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny teacher with a head size vLLM's CPU attention supports (32), built once per session."""
    from support.generation_helpers import build_cpu_attention_teacher

    return build_cpu_attention_teacher(tmp_path_factory.mktemp("tiny-teacher-hd32"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_teacher_dir: Path) -> Any:
    """The tiny teacher's tokenizer in gencache's state (left padding)."""
    from gencache.generation.teacher import load_tokenizer

    return load_tokenizer(str(tiny_teacher_dir))


@pytest.fixture(scope="session")
def tiny_model(tiny_teacher_dir: Path) -> Any:
    """The tiny teacher loaded in float32 on CPU, in eval mode."""
    from gencache.generation.teacher import load_teacher

    return load_teacher(str(tiny_teacher_dir), dtype="float32", device="cpu")


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``gencache demo`` run once per session in a fresh work directory (its own teacher built there): the published
    artifact, the demo's config, its teacher and what it printed. Tests only read it (the artifact is read-only)."""
    import io

    from rich.console import Console

    from gencache.cli.demo import run_demo

    workdir = tmp_path_factory.mktemp("demo")
    printed = io.StringIO()
    published = run_demo(workdir, console=Console(file=printed, width=100))
    return {
        "workdir": workdir,
        "artifact": published,
        "config_path": workdir / "demo-config.json",
        "teacher": str(workdir / "tiny-teacher"),
        "printed": printed.getvalue(),
    }


@pytest.fixture(autouse=True)
def offline_datasets_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The `datasets` library reads and writes its cache under the session's temporary directory, offline (a
    machine without it, such as a lent GPU machine running only tests/test_gpu.py, has no cache to redirect)."""
    try:
        import datasets.config
    except ImportError:
        return

    cache = tmp_path_factory.getbasetemp() / "hf-datasets-cache"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="session")
def golden_tokenizer() -> Any:
    """The small tokenizer (with a chat template) the reference's tokenizer_chat golden cases were rendered with."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(Path(__file__).parent / "data" / "golden" / "tokenizer"))


@pytest.fixture()
def tokenizer(golden_tokenizer: Any) -> Any:
    """Alias of :func:`golden_tokenizer` for the dataset, prompt and sample tests."""
    return golden_tokenizer


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """One local Ray cluster (2 CPUs) for every Ray test of the session, this process connected to it; its
    address for the drivers the tests start (see tests/support/ray_helpers.py for how it starts reliably)."""
    import ray

    from support.ray_helpers import start_cluster

    environment = dict(os.environ)
    address = start_cluster()
    try:
        yield address
    finally:
        ray.shutdown()
        for name in set(os.environ) - set(environment):  # what ray.init set (RAY_AUTH_MODE, PYTHONBREAKPOINT, ...)
            del os.environ[name]
