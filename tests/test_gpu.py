"""GPU checks (skipped without CUDA): the whole path on a CUDA device, bf16 and float32."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from gencache.artifact.reader import CacheReader, verify
from gencache.data.recipes import sample_source
from gencache.run.api import generate

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def config(tmp_path: Path, teacher: Path, dtype: str, batch_size: int, name: str, **extra: Any) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(
        json.dumps(
            {
                "model": {
                    "model_path": str(teacher),
                    "dtype": dtype,
                    "device": "cuda",
                    "generation_kwargs": {"max_new_tokens": 12},
                },
                "data_configs": [
                    {
                        "dataset_name": "musique",
                        "num_samples": 8,
                        "num_data_strs": 0,
                        "num_shots": 0,
                        "subset": "default",
                        "source": str(sample_source("musique")),
                    }
                ],
                "gen_batch_size": batch_size,
                "output_dir": str(tmp_path / name),
                **extra,
            }
        ),
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_generate_on_cuda_publishes_a_verified_artifact(tmp_path: Path, tiny_teacher_dir: Path, dtype: str) -> None:
    out = generate(config(tmp_path, tiny_teacher_dir, dtype, 4, f"gpu-{dtype}"))
    assert out is not None and verify(out) == []
    resolved = json.loads((out / "resolved_config.json").read_text(encoding="utf-8"))
    assert resolved["runtime"]["device"].startswith("cuda")
    assert resolved["runtime"]["device_name"] == torch.cuda.get_device_name(0)
    reader = CacheReader(out)
    assert len(reader) == 8
    assert all(reader[key].sequences[0].device.type == "cpu" for key in reader.keys())  # noqa: SIM118


def test_float32_batching_on_cuda_matches_one_by_one(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    batched = generate(config(tmp_path, tiny_teacher_dir, "float32", 8, "b8"))
    single = generate(config(tmp_path, tiny_teacher_dir, "float32", 1, "b1"))
    assert batched is not None and single is not None
    a = json.loads((batched / "manifest.json").read_text())["entries"]
    b = json.loads((single / "manifest.json").read_text())["entries"]
    assert a == b


def _digests(path: Path) -> dict[str, str]:
    entries = json.loads((path / "manifest.json").read_text())["entries"]
    return {key: entry["content_digest"] for key, entry in entries.items()}


def test_float32_continuous_engine_on_cuda_matches_the_static_engine(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    static = generate(config(tmp_path, tiny_teacher_dir, "float32", 4, "static"))
    continuous = generate(
        config(
            tmp_path,
            tiny_teacher_dir,
            "float32",
            4,
            "continuous",
            engine="transformers-continuous",
            engine_options={"max_concurrent_sequences": 4},
        )
    )
    assert static is not None and continuous is not None and verify(continuous) == []
    assert _digests(static) == _digests(continuous)
    resolved = json.loads((continuous / "resolved_config.json").read_text(encoding="utf-8"))
    assert resolved["engine"]["paged_cache"]["budget_source"] == "90% of free CUDA memory"
