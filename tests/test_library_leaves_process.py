"""A library call leaves the process as it found it: ``gencache.generate``, ``gencache.audit`` and an artifact
build (``ArtifactBuild`` and its ``CacheWriter``) change no signal handler, no environment variable, no global
random generator, no warnings setting, no logging level and no other library's module, and they work the same
from a thread that is not the main one (where a notebook's worker, a web service or a Ray actor calls them)."""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy
import pytest
import torch

import gencache
from gencache.artifact.reader import verify
from support.config_factory import config_dict, musique, write_config
from support.storage_helpers import make_entries, write_artifact

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LOGGERS = ("transformers", "huggingface_hub", "datasets", "torch", "vllm")


def process_state() -> dict[str, Any]:
    """What a library must not change, in comparable form."""
    import datasets.config
    import huggingface_hub.constants
    import huggingface_hub.utils
    import tqdm
    import tqdm.std
    import transformers.utils.logging as transformers_logging

    numpy_state = numpy.random.get_state()
    return {
        "signals": {signum: signal.getsignal(signum) for signum in STOP_SIGNALS},
        "unraisablehook": sys.unraisablehook,
        "environ": dict(os.environ),
        "random": random.getstate(),
        "numpy": (numpy_state[0], numpy_state[1].tolist(), *numpy_state[2:]),  # type: ignore[index,union-attr]
        "torch": torch.random.get_rng_state().tolist(),
        "showwarning": warnings.showwarning,
        "filters": list(warnings.filters),
        "tqdm": (tqdm.tqdm, tqdm.std.tqdm.__dict__["__init__"]),
        "levels": {name: logging.getLogger(name).level for name in LOGGERS},
        "logging_disabled": logging.root.manager.disable,
        "transformers_verbosity": transformers_logging.get_verbosity(),
        "transformers_bars": transformers_logging.is_progress_bar_enabled(),
        "hub_bars_disabled": huggingface_hub.utils.are_progress_bars_disabled(),
        "hub_offline": huggingface_hub.constants.HF_HUB_OFFLINE,
        "datasets_offline": (datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE),
    }


def library_calls(root: Path, teacher: Path) -> list[str]:
    """Generate with the tiny teacher, audit the result and build a second artifact; what each returned."""
    model = config_dict(root, teacher)["model"] | {"generation_kwargs": {"max_new_tokens": 6, "do_sample": True}}
    config = write_config(root, teacher, model=model, data_configs=[musique(num_samples=3)])
    published = gencache.generate(config)
    report = gencache.audit(published, all_keys=True)
    built = write_artifact(root / "built", make_entries(3))
    return [published.name, str(report.exit_code), *verify(built), built.name]


def in_a_thread(call: Callable[[], list[str]]) -> list[str]:
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            results.append(call())
        except BaseException as error:  # handed to the test's thread
            errors.append(error)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=300)
    if errors:
        raise errors[0]
    assert results, "the call did not finish"
    return results[0]


@pytest.mark.parametrize("where", ["main thread", "another thread"])
def test_generate_audit_and_a_build_leave_the_process_as_they_found_it(
    where: str, tmp_path: Path, tiny_teacher_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    random.seed(11)
    numpy.random.seed(11)
    torch.manual_seed(11)
    before = process_state()
    call = lambda: library_calls(tmp_path, tiny_teacher_dir)  # noqa: E731
    returned = call() if where == "main thread" else in_a_thread(call)
    assert returned == ["out", "0", "built"]
    after = process_state()
    assert {name: value for name, value in after.items() if before[name] != value} == {}
    assert capfd.readouterr() == ("", "")  # and nothing printed (no bar, no log line)
