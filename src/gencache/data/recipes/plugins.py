"""Recipe plug-ins: recipes other packages register through the ``gencache.recipes`` entry point group.

A plug-in is imported only when a config names it; one that fails to import or returns malformed samples is one
:class:`DatasetError` naming it, its entry point and its distribution.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from gencache.config.datasets import describe, load_entry_point, not_a_recipe
from gencache.core.errors import DatasetError, GencacheError, PromptError, first_line, reworded
from gencache.data.keys import semantic_key
from gencache.data.prompts import normalize
from gencache.data.recipes.base import DataConfigLike, DatasetRecipe, RawSample, Selection
from gencache.data.sources import SourceInfo


def load_plugin(ep: metadata.EntryPoint) -> PluginRecipe:
    """Import the plug-in behind ``ep`` (:func:`gencache.config.datasets.load_entry_point`) and wrap it; a
    :class:`DatasetError` naming it when it is no :class:`DatasetRecipe`."""
    target = load_entry_point(ep)
    if not isinstance(target, DatasetRecipe):
        raise not_a_recipe(describe(ep), target)
    return PluginRecipe.wrap(target, describe(ep))


class PluginRecipe(DatasetRecipe[Any, Any]):
    """A plug-in recipe behind the checks that keep generation and training safe from a faulty plug-in: every
    error names the plug-in, and every sample it returns is checked."""

    label: str
    inner: DatasetRecipe[Any, Any]

    @classmethod
    def wrap(cls, inner: DatasetRecipe[Any, Any], label: str) -> PluginRecipe:
        """A wrapper of ``inner`` whose class carries ``inner``'s name, hub id, kwargs model and columns."""
        kind = type(
            f"Plugin[{inner.name}]",
            (cls,),
            {
                "name": inner.name,
                "hub_id": getattr(inner, "hub_id", ""),
                "kwargs_model": inner.kwargs_model,
                "columns": tuple(getattr(inner, "columns", ())),
                "__doc__": type(inner).__doc__,
            },
        )
        recipe: PluginRecipe = kind()
        recipe.inner = inner
        recipe.label = label
        return recipe

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
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], list)):
            raise self._malformed(f"load returned {type(result).__name__}, not (a list of samples, SourceInfo)")
        samples, source = result
        if not isinstance(source, SourceInfo):
            raise self._malformed(f"load returned {type(source).__name__} as its source, not a SourceInfo")
        if len(samples) != dc.num_samples:
            raise self._malformed(f"load returned {len(samples)} samples but num_samples is {dc.num_samples}")
        for index, sample in enumerate(samples):
            self._check_sample(index, sample)
        return samples, source

    def _malformed(self, problem: str) -> DatasetError:
        return DatasetError(f"{self.label} returned malformed samples: {problem.rstrip('.')}; fix the plug-in.")

    def _check_sample(self, index: int, sample: Any) -> None:
        if not isinstance(sample, RawSample):
            raise self._malformed(f"sample {index} is a {type(sample).__name__}, not a RawSample")
        try:
            semantic_key(sample.semantic)
            if tuple(normalize(sample.parts)) != tuple(sample.parts):
                raise PromptError("its prompt parts are not normalised (use gencache.data.prompts.normalize)")
        except (DatasetError, PromptError, TypeError) as exc:
            raise self._malformed(f"sample {index}: {exc}") from None
        for field in ("query", "answer"):
            if not isinstance(getattr(sample, field), str):
                raise self._malformed(f"sample {index}: {field} is not a string")
