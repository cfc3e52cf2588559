"""Shared test data: the golden reference outputs and a minimal data config satisfying ``DataConfigLike``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
FIX = GOLDEN / "fixtures"


@dataclass(frozen=True)
class DataConfig:
    """The fields a dataset recipe reads (gencache.data.recipes.DataConfigLike), without the config model's checks."""

    dataset_name: str
    num_samples: int
    num_data_strs: int = 0
    num_shots: int = 0
    subset: str = "default"
    split: str = "train"
    seed: int = 42
    source: str | None = None
