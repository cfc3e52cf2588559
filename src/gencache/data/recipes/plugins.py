"""Recipe plug-ins: dataset recipes other packages register through the ``gencache.recipes`` entry point group.

A training code base with its own dataset logic declares, in its ``pyproject.toml``::

    [project.entry-points."gencache.recipes"]
    my_dataset = "my_package.recipes:RECIPE"

The entry point's name is the ``dataset_name`` configs use; its object is a :class:`DatasetRecipe` instance, a
subclass of it (instantiated without arguments) or a callable returning an instance, whose ``name`` equals the
entry point's. Generation, ``--dry-run``, export and training all look recipes up through
:func:`gencache.data.recipes.get_recipe`, so they share the plug-in's code and keys.

A plug-in is imported only when a config names it. A plug-in that fails to import, or whose samples are malformed
(not :class:`RawSample`, a payload the key rule refuses, a prompt that is not a normalised prompt, the wrong
count), is one :class:`DatasetError` naming the plug-in, its entry point and its distribution.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from gencache.data.origins import SourceInfo
from gencache.data.recipes.base import DataConfigLike, DatasetRecipe, RawSample, Selection
from gencache.errors import DatasetError, GencacheError, PromptError, first_line

GROUP = "gencache.recipes"

__all__ = ["GROUP", "PluginRecipe", "entry_point", "load_plugin", "plugin_names"]


@functools.lru_cache(maxsize=8)
def _entry_points(state: tuple[tuple[str, int], ...]) -> tuple[metadata.EntryPoint, ...]:
    """The group's entry points for one state of ``sys.path`` (see :func:`_current`)."""
    return tuple(metadata.entry_points(group=GROUP))


def _mtime(entry: str) -> int:
    try:
        return os.stat(entry or ".").st_mtime_ns
    except OSError:
        return -1


def _current() -> tuple[metadata.EntryPoint, ...]:
    """The group's entry points, scanned again whenever ``sys.path`` or one of its directories changed (an
    installation adds a ``.dist-info`` directory, which changes its parent's modification time)."""
    return _entry_points(tuple((entry, _mtime(entry)) for entry in sys.path))


def plugin_names() -> list[str]:
    """Names of the installed recipe plug-ins, sorted (nothing is imported)."""
    return sorted({ep.name for ep in _current()})


def entry_point(name: str) -> metadata.EntryPoint | None:
    """The entry point registering ``name`` (the first one found on ``sys.path``), or None."""
    for ep in _current():
        if ep.name == name:
            return ep
    return None


def describe(ep: metadata.EntryPoint) -> str:
    """``recipe plug-in 'name' (entry point name = module:attr of dist version)``."""
    dist = getattr(ep, "dist", None)
    owner = f" of {dist.name} {dist.version}" if dist is not None else ""
    return f"recipe plug-in {ep.name!r} (entry point {ep.name} = {ep.value}{owner})"


def load_plugin(ep: metadata.EntryPoint) -> PluginRecipe:
    """Import the plug-in behind ``ep`` and wrap it; a :class:`DatasetError` naming it when that fails."""
    label = describe(ep)
    try:
        target = ep.load()
    except Exception as exc:  # whatever the plug-in's import raises: one line naming it
        raise DatasetError(
            f"{label} failed to import: {type(exc).__name__}: {first_line(exc)}; fix or uninstall the plug-in."
        ) from None
    try:
        if callable(target) and not isinstance(target, DatasetRecipe):  # a recipe class or a factory
            target = target()
    except Exception as exc:
        raise DatasetError(f"{label} failed to build its recipe: {type(exc).__name__}: {first_line(exc)}.") from None
    if not isinstance(target, DatasetRecipe):
        raise DatasetError(
            f"{label} is a {type(target).__name__}, not a gencache DatasetRecipe (an instance, a subclass or a "
            "callable returning one); point the entry point at the recipe."
        )
    if getattr(target, "name", None) != ep.name:
        raise DatasetError(
            f"{label}: its recipe is named {getattr(target, 'name', None)!r}; the recipe's name and the entry "
            "point's name must be the same."
        )
    return PluginRecipe.wrap(target, label)


class PluginRecipe(DatasetRecipe[Any, Any]):
    """A plug-in recipe behind the checks that keep generation and training safe from a faulty plug-in.

    Its name, hub id, ``data_kwargs`` model and columns are the plug-in's; :meth:`load` runs the plug-in's and
    checks every sample it returns.
    """

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
            text = str(exc)
            raise type(exc)(text if text.startswith(self.label) else f"{self.label}: {text}") from exc
        except Exception as exc:  # a bug in the plug-in: one line naming it
            raise DatasetError(f"{self.label} failed in {what}: {type(exc).__name__}: {first_line(exc)}.") from exc

    def needs_tokenizer(self, kwargs: Any) -> bool:
        return bool(self._call("needs_tokenizer", lambda: self.inner.needs_tokenizer(kwargs)))

    def select(self, dc: DataConfigLike, kwargs: Any, tokenizer: Any | None) -> Selection[Any]:
        return self._call("select", lambda: self.inner.select(dc, kwargs, tokenizer))  # type: ignore[no-any-return]

    def sample(self, rows: Any, kwargs: Any, index: int) -> Any:
        return self._call("sample", lambda: self.inner.sample(rows, kwargs, index))

    def load(
        self, dc: DataConfigLike, kwargs: Any | Mapping[str, Any], tokenizer: Any | None
    ) -> tuple[list[RawSample], SourceInfo]:
        result = self._call("load", lambda: self.inner.load(dc, kwargs, tokenizer))
        if not (isinstance(result, tuple) and len(result) == 2):
            raise self._malformed(f"load returned {type(result).__name__}, not (samples, SourceInfo)")
        samples, source = result
        if not isinstance(samples, list):
            raise self._malformed(f"load returned samples as {type(samples).__name__}, not a list")
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
        from gencache.data.keys import semantic_key
        from gencache.data.prompts import normalize

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
