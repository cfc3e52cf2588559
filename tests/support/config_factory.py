"""One config factory for the tests: a small musique run over the bundled sample data on the tiny teacher."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gencache.data.recipes import sample_source


def musique(**change: Any) -> dict[str, Any]:
    """A MuSiQue data config over the bundled sample file (4 samples, no shots)."""
    return {
        "dataset_name": "musique",
        "num_samples": 4,
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "default",
        "split": "train",
        "seed": 2,
        "source": str(sample_source("musique")),
    } | change


def hotpot_qa(**change: Any) -> dict[str, Any]:
    """A HotpotQA data config over the bundled sample file (6 samples of every difficulty, no shots)."""
    return {
        "dataset_name": "hotpot_qa",
        "num_samples": 6,
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "fullwiki",
        "split": "train",
        "seed": 1,
        "data_kwargs": {"difficulty": ["easy", "medium", "hard"]},
        "template": "default",
        "source": str(sample_source("hotpot_qa")),
    } | change


def config_dict(directory: Path, teacher: Path | str, **change: Any) -> dict[str, Any]:
    """The config as a dict: float32 on CPU, 6 new tokens, output under ``directory / "out"``."""
    config: dict[str, Any] = {
        "model": {
            "model_path": str(teacher),
            "dtype": "float32",
            "device": "cpu",
            "generation_kwargs": {"max_new_tokens": 6},
        },
        "data_configs": [musique()],
        "gen_batch_size": 2,
        "output_dir": str(directory / "out"),
    }
    config.update(change)
    return config


def write_config(directory: Path, teacher: Path | str, *, name: str | None = None, **change: Any) -> Path:
    """Write :func:`config_dict` to ``directory / name`` (default: a fresh ``config-N.json``); return its path."""
    path = directory / (name or f"config-{len(list(directory.glob('config-*.json')))}.json")
    path.write_text(json.dumps(config_dict(directory, teacher, **change)), encoding="utf-8")
    return path
