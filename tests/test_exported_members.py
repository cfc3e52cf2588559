"""The public surface: every gencache module declares ``__all__`` and every name it lists exists (in the style of
httpx's ``test_exported_members``), so ``from gencache.x import *`` and the docs never name something missing."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import gencache


def _modules() -> list[str]:
    names = ["gencache"]
    for info in pkgutil.walk_packages(gencache.__path__, prefix="gencache."):
        if ".sample_data" not in info.name:
            names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_every_module_declares_all_and_exports_what_it_lists(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert isinstance(exported, list), f"{name} has no __all__ list"
    assert len(set(exported)) == len(exported), f"{name}.__all__ lists a name twice"
    missing = [member for member in exported if not hasattr(module, member)]
    assert missing == [], f"{name}.__all__ lists names it does not define: {missing}"
