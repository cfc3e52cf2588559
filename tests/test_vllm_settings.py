"""``vllm_settings``, the block around vLLM's import and engine build, leaves the environment exactly as it found
it: the variables gencache sets for vLLM and those vLLM's import sets of its own (runs without vLLM: the body
here stands in for the import)."""

from __future__ import annotations

import os
import random

import pytest

from gencache.generation.engines.vllm import vllm_settings


def test_the_environment_is_back_exactly_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GENCACHE_TEST_KEPT", "kept")
    monkeypatch.setenv("GENCACHE_TEST_CHANGED", "before")
    monkeypatch.setenv("GENCACHE_TEST_REMOVED", "there")
    monkeypatch.delenv("GENCACHE_TEST_GIVEN", raising=False)
    monkeypatch.delenv("GENCACHE_TEST_ADDED", raising=False)
    before, generator = dict(os.environ), random.getstate()
    with vllm_settings({"GENCACHE_TEST_GIVEN": "1"}):
        assert os.environ["GENCACHE_TEST_GIVEN"] == "1"
        # what `import vllm` does to the environment of its own
        os.environ["GENCACHE_TEST_ADDED"] = "1"
        os.environ["GENCACHE_TEST_CHANGED"] = "after"
        del os.environ["GENCACHE_TEST_REMOVED"]
        random.seed(5)  # vLLM seeds the global generators as it builds its engine
    assert dict(os.environ) == before
    assert random.getstate() == generator


def test_the_environment_is_back_after_an_error_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GENCACHE_TEST_ADDED", raising=False)
    before = dict(os.environ)
    with pytest.raises(RuntimeError, match="engine build failed"), vllm_settings({}):
        os.environ["GENCACHE_TEST_ADDED"] = "1"
        raise RuntimeError("engine build failed")
    assert dict(os.environ) == before
