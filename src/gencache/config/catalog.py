"""Which datasets a config may name, and the ``data_kwargs`` model each one validates with.

Other packages add datasets through the ``gencache.recipes`` entry point group: the entry point's name is the
``dataset_name``, its object a recipe (an instance, a class, or a callable returning one) whose ``kwargs_model`` is a
:class:`KwargsModel`. Listing names imports no plug-in; looking one up imports it.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from gencache.config.datasets import DATASET_KWARGS
from gencache.config.kwargs import KwargsModel
from gencache.config.messages import unknown_name
from gencache.core.errors import ConfigError, DatasetError, first_line

GROUP = "gencache.recipes"


def entry_point(name: str) -> metadata.EntryPoint | None:
    """The entry point registering ``name`` (the first one found on ``sys.path``), or None."""
    return next(iter(metadata.entry_points(group=GROUP, name=name)), None)


def describe(ep: metadata.EntryPoint) -> str:
    """``recipe plug-in 'name' (entry point name = module:attr of dist version)``."""
    dist = getattr(ep, "dist", None)
    owner = f" of {dist.name} {dist.version}" if dist is not None else ""
    return f"recipe plug-in {ep.name!r} (entry point {ep.name} = {ep.value}{owner})"


def not_a_recipe(label: str, target: Any) -> DatasetError:
    """The error for an entry point whose object is no recipe."""
    return DatasetError(
        f"{label} is a {type(target).__name__}, not a gencache DatasetRecipe (an instance, a subclass or a "
        "callable returning one); point the entry point at the recipe."
    )


def load_entry_point(ep: metadata.EntryPoint) -> Any:
    """Import the object behind ``ep`` and make it a recipe instance (calling a class or factory); one
    :class:`DatasetError` naming the plug-in when that fails, when it has no ``kwargs_model`` or when its name is
    not the entry point's."""
    label = describe(ep)
    try:
        target = ep.load()
    except Exception as exc:  # whatever the plug-in's import raises: one line naming it
        raise DatasetError(
            f"{label} failed to import: {type(exc).__name__}: {first_line(exc)}; fix or uninstall the plug-in."
        ) from None
    if isinstance(target, type) or (callable(target) and not hasattr(target, "kwargs_model")):
        try:
            target = target()
        except Exception as exc:
            raise DatasetError(
                f"{label} failed to build its recipe: {type(exc).__name__}: {first_line(exc)}."
            ) from None
    model = getattr(target, "kwargs_model", None)
    if model is None:
        raise not_a_recipe(label, target)
    if not (isinstance(model, type) and issubclass(model, KwargsModel)):
        raise DatasetError(
            f"{label}: its kwargs_model is {model!r}, not a subclass of gencache.config.KwargsModel; derive the "
            "recipe's data_kwargs model from it."
        )
    if getattr(target, "name", None) != ep.name:
        raise DatasetError(
            f"{label}: its recipe is named {getattr(target, 'name', None)!r}; the recipe's name and the entry "
            "point's name must be the same."
        )
    return target


def dataset_names() -> list[str]:
    """Every dataset a config may name: the built-ins, then the installed plug-ins (sorted)."""
    plugins = sorted(metadata.entry_points(group=GROUP).names)  # nothing imported; one installed meanwhile is found
    return [*DATASET_KWARGS, *(name for name in plugins if name not in DATASET_KWARGS)]


def dataset_kwargs_model(name: str) -> type[KwargsModel]:
    """The ``data_kwargs`` model of dataset ``name``: a built-in's, or a plug-in's (imported now).

    A :class:`ConfigError` naming the known datasets when there is none; a :class:`DatasetError` naming the
    plug-in when it cannot be loaded or when it reuses a built-in's name."""
    ep = entry_point(name)
    if name in DATASET_KWARGS:
        if ep is not None:
            raise DatasetError(
                f"{describe(ep)} uses the name of the built-in dataset {name!r}; a plug-in cannot replace a "
                "built-in, rename its entry point."
            )
        return DATASET_KWARGS[name]
    if ep is None:
        raise ConfigError(unknown_name("dataset", name, dataset_names()))
    model: type[KwargsModel] = load_entry_point(ep).kwargs_model
    return model
