"""Dataset recipes: the registry (built-ins and plug-ins), and the types a recipe reads and returns.

Each built-in of :data:`gencache.config.datasets.DATASET_KWARGS` is a module here named after it, exposing
``RECIPE``; plug-ins come through the ``gencache.recipes`` entry point group, are imported only when a config names
them, and run behind checks that name the plug-in in every error. See docs/datasets.md.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from gencache.config.datasets import DATASET_KWARGS, dataset_kwargs_model, not_a_recipe, plugin_recipe
from gencache.core.errors import DatasetError, GencacheError, PromptError, first_line, reworded
from gencache.data.keys import semantic_key
from gencache.data.prompts import normalize
from gencache.data.recipes.base import DataConfigLike, DatasetRecipe, RawSample, Selection
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
    target, label = plugin_recipe(name)
    if not isinstance(target, DatasetRecipe):
        raise not_a_recipe(label, target)
    return PluginRecipe(target, label)


def sample_source(name: str) -> Path:
    """The bundled sample directory of a dataset (hub-style layout; usable as a data config's ``source``)."""
    get_recipe(name)
    path = SAMPLES_DIR / name
    if not path.is_dir():
        bundled = ", ".join(sorted(p.name for p in SAMPLES_DIR.iterdir() if p.is_dir()))
        raise DatasetError(f"{name!r} has no bundled sample set (bundled: {bundled}); point source at your own data.")
    return path


class PluginRecipe(DatasetRecipe[Any, Any]):
    """A plug-in recipe behind the checks that keep generation and training safe from a faulty plug-in: every
    error names the plug-in, and every sample it returns is checked."""

    def __init__(self, inner: DatasetRecipe[Any, Any], label: str) -> None:
        self.inner, self.label = inner, label
        vars(self).update(name=inner.name, kwargs_model=inner.kwargs_model)  # the plug-in's class variables
        vars(self).update(hub_id=getattr(inner, "hub_id", ""), columns=tuple(getattr(inner, "columns", ())))

    def _call(self, what: str, call: Any) -> Any:
        try:
            return call()
        except GencacheError as exc:
            raise reworded(exc, f"{self.label}: {exc}") from exc
        except Exception as exc:  # a bug in the plug-in: one line naming it
            raise DatasetError(f"{self.label} failed in {what}: {type(exc).__name__}: {first_line(exc)}.") from exc

    def needs_tokenizer(self, kwargs: Any) -> bool:
        return bool(self._call("needs_tokenizer", lambda: self.inner.needs_tokenizer(kwargs)))

    def select(self, dc: DataConfigLike, kwargs: Any, tokenizer: Any | None) -> Selection[Any]:
        return self._call("select", lambda: self.inner.select(dc, kwargs, tokenizer))  # type: ignore[no-any-return]

    def sample(self, rows: Any, kwargs: Any, index: int) -> Any:
        return self._call("sample", lambda: self.inner.sample(rows, kwargs, index))

    def load(self, dc: DataConfigLike, kwargs: Any, tokenizer: Any | None) -> tuple[list[RawSample], SourceInfo]:
        result = self._call("load", lambda: self.inner.load(dc, kwargs, tokenizer))
        shape = isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], list)
        if not (shape and isinstance(result[1], SourceInfo)):
            raise self._malformed(f"load returned {result!r:.60}, not (a list of samples, SourceInfo)")
        samples, source = result
        if len(samples) != dc.num_samples:
            raise self._malformed(f"load returned {len(samples)} samples but num_samples is {dc.num_samples}")
        for index, sample in enumerate(samples):
            if not isinstance(sample, RawSample):
                raise self._malformed(f"sample {index} is a {type(sample).__name__}, not a RawSample")
            try:
                semantic_key(sample.semantic)
                if tuple(normalize(sample.parts)) != tuple(sample.parts):
                    raise PromptError("its prompt parts are not normalised (use gencache.data.prompts.normalize)")
            except (DatasetError, PromptError, TypeError) as exc:
                raise self._malformed(f"sample {index}: {exc}") from None
            if not (isinstance(sample.query, str) and isinstance(sample.answer, str)):
                raise self._malformed(f"sample {index}: its query and answer must be strings")
        return samples, source

    def _malformed(self, problem: str) -> DatasetError:
        return DatasetError(f"{self.label} returned malformed samples: {problem.rstrip('.')}; fix the plug-in.")
