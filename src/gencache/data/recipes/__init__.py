"""Dataset recipes: the registry (built-ins and plug-ins), and the types a recipe reads and returns.

Each built-in of :data:`gencache.config.datasets.DATASET_KWARGS` is a module here named after it, exposing
``RECIPE``; plug-ins come through the ``gencache.recipes`` entry point group. See docs/datasets.md.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from gencache.config.datasets import DATASET_KWARGS, dataset_kwargs_model, dataset_names, entry_point
from gencache.config.messages import unknown_name
from gencache.core.errors import ConfigError, DatasetError
from gencache.data.recipes.base import DataConfigLike, DatasetRecipe, RawSample
from gencache.data.recipes.plugins import load_plugin
from gencache.data.sources import SourceInfo

#: The recipe of every built-in dataset, by name, in the order of :data:`gencache.config.datasets.DATASET_KWARGS`.
BUILTIN_DATASETS: dict[str, DatasetRecipe[Any, Any]] = {
    name: importlib.import_module(f"{__name__}.{name}").RECIPE for name in DATASET_KWARGS
}

SAMPLES_DIR = Path(__file__).parent.parent / "sample_data"


def get_recipe(name: str) -> DatasetRecipe[Any, Any]:
    """The recipe called ``name`` (a built-in, or a plug-in imported now); a :class:`ConfigError` naming the known
    datasets when there is none, a :class:`DatasetError` naming the plug-in when it cannot be loaded."""
    if name in BUILTIN_DATASETS:
        dataset_kwargs_model(name)  # refuses a plug-in that reuses a built-in's name
        return BUILTIN_DATASETS[name]
    ep = entry_point(name)
    if ep is None:
        raise ConfigError(unknown_name("dataset", name, dataset_names()))
    return load_plugin(ep)


def sample_source(name: str) -> Path:
    """The bundled sample directory of a dataset (hub-style layout; usable as a data config's ``source``)."""
    get_recipe(name)
    path = SAMPLES_DIR / name
    if not path.is_dir():
        bundled = ", ".join(sorted(p.name for p in SAMPLES_DIR.iterdir() if p.is_dir()))
        raise DatasetError(f"{name!r} has no bundled sample set (bundled: {bundled}); point source at your own data.")
    return path


__all__ = [
    "BUILTIN_DATASETS",
    "SAMPLES_DIR",
    "DataConfigLike",
    "DatasetRecipe",
    "RawSample",
    "SourceInfo",
    "get_recipe",
    "sample_source",
]
