"""Dataset recipes: the registry, and the types a recipe reads and returns.

Adding a dataset is one module exposing ``RECIPE`` (an instance of a :class:`DatasetRecipe` subclass that fills
in its steps) plus one line in :data:`DATASETS` below; see docs/datasets.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gencache.data.recipes import biography, hotpot_qa, musique, niah
from gencache.data.recipes.base import DataConfigLike, DatasetRecipe, RawSample, SourceInfo
from gencache.errors import ConfigError

DATASETS: dict[str, DatasetRecipe[Any, Any]] = {
    "biography": biography.RECIPE,
    "hotpot_qa": hotpot_qa.RECIPE,
    "musique": musique.RECIPE,
    "niah": niah.RECIPE,
}

SAMPLES_DIR = Path(__file__).parent.parent / "sample_data"


def get_recipe(name: str) -> DatasetRecipe[Any, Any]:
    """The recipe called ``name``; a :class:`ConfigError` naming the known datasets otherwise."""
    recipe = DATASETS.get(name) if isinstance(name, str) else None
    if recipe is None:
        raise ConfigError(f"Unknown dataset {name!r}; known datasets: {', '.join(sorted(DATASETS))}.")
    return recipe


def sample_source(name: str) -> Path:
    """The bundled sample directory of a dataset (hub-style layout; usable as a data config's ``source``)."""
    get_recipe(name)
    return SAMPLES_DIR / name


__all__ = [
    "DATASETS",
    "SAMPLES_DIR",
    "DataConfigLike",
    "DatasetRecipe",
    "RawSample",
    "SourceInfo",
    "get_recipe",
    "sample_source",
]
