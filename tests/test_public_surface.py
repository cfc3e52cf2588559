"""The public surface: the names users import. The top level, ``gencache.training`` and ``gencache.config`` offer
exactly the names written here, and the README, docs/ and examples/ import exactly the names written here, each of
which exists (adding or removing a user-facing name is a change to these lists). Internal modules have no ``__all__``
of their own; a package that re-exports names for users lists them, and they exist."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import gencache

ROOT = Path(__file__).resolve().parent.parent

#: What ``import gencache`` offers: the run, reading, the data side and the errors a user catches.
TOP_LEVEL = [
    "CacheReader",
    "CompatibilityError",
    "ConfigError",
    "DatasetError",
    "FormatError",
    "GencacheError",
    "Generation",
    "InputProblems",
    "IntegrityError",
    "MissingEntriesError",
    "MissingEntryError",
    "RayOptions",
    "__version__",
    "audit",
    "build_samples",
    "dry_run",
    "generate",
    "load_config",
    "open_caches",
    "prepare_tokenizer",
    "score",
    "semantic_key",
]

#: What ``gencache.config`` and ``gencache.training`` offer: the config models and their loaders; the training side.
SURFACES = {
    "gencache.config": [
        "ALL_ENGINES",
        "DEFAULTS_FILENAME",
        "DTYPES",
        "ENGINE_OPTIONS",
        "MAX_JSON_DEPTH",
        "MAX_SEED",
        "CacheConfig",
        "DataConfig",
        "EngineOptions",
        "KwargsModel",
        "ModelConfig",
        "config_to_json",
        "format_validation_error",
        "load_config",
        "looks_like_path",
        "merge_defaults",
        "parse_config",
        "parse_data_configs",
        "parse_json_text",
        "parse_set_value",
        "read_config_document",
        "read_merged_config",
    ],
    "gencache.training": [
        "METADATA_COLUMNS",
        "METADATA_FIELDS",
        "MISSING_POLICIES",
        "MODEL_INPUTS",
        "SEQUENCE_CHOICES",
        "TRUNCATION_POLICIES",
        "DistillationBatch",
        "DistillationCollator",
        "DistillationDataset",
        "DistillationLoss",
        "DistillationTrainer",
        "LeftOut",
        "answer_positions",
        "check_vocabularies",
        "distillation_loss",
        "pad_batch",
        "to_hf_dataset",
    ],
}

#: Every ``from gencache... import ...`` in the README, docs/ and examples/: what users are shown to import.
DOCUMENTED_IMPORTS = {
    "gencache": ["CacheReader", "ConfigError", "build_samples", "load_config", "open_caches", "prepare_tokenizer"],
    "gencache.cli.demo": ["demo_config"],
    "gencache.generation.teacher": ["load_tokenizer"],
    "gencache.generation.tiny": ["build_tiny_teacher"],
    "gencache.training": [
        "DistillationCollator",
        "DistillationDataset",
        "DistillationTrainer",
        "distillation_loss",
    ],
}

#: ``gencache.X`` in the docs that names no Python object: the entry-point group of recipe plug-ins.
NOT_PYTHON = {"gencache.recipes"}


def _modules() -> list[str]:
    names = ["gencache"]
    for info in pkgutil.walk_packages(gencache.__path__, prefix="gencache."):
        if ".sample_data" not in info.name:
            names.append(info.name)
    return sorted(names)


def test_the_top_level_exports_exactly_the_written_names() -> None:
    assert sorted(gencache.__all__) == sorted(TOP_LEVEL)
    assert all(getattr(gencache, name) is not None for name in TOP_LEVEL)


def test_every_error_the_readme_and_the_format_page_name_is_exported_at_the_top() -> None:
    import builtins

    from gencache.core import errors

    pages = "".join((ROOT / page).read_text(encoding="utf-8") for page in ("README.md", "docs/format.md"))
    named = set(re.findall(r"\b([A-Z]\w*Error)\b", pages))
    ours = {name for name in named if not hasattr(builtins, name)}
    assert {"IntegrityError", "MissingEntriesError"} <= ours
    for name in sorted(ours):
        assert name in gencache.__all__, f"the docs name {name}: export it from gencache"
        assert getattr(gencache, name) is getattr(errors, name)


@pytest.mark.parametrize("package", sorted(SURFACES))
def test_config_and_training_export_exactly_the_written_names(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(SURFACES[package])
    assert all(hasattr(module, name) for name in SURFACES[package])


def _imports_shown() -> dict[str, list[str]]:
    """``{module: names}`` of every ``from gencache... import ...`` in the README, docs/ and examples/."""
    shown: dict[str, set[str]] = {}
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*.py"))]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for module, imported in re.findall(r"^\s*from (gencache[\w.]*) import ([\w, ()]+)", text, re.M):
            names = {name.strip() for name in imported.strip("()").split(",") if name.strip()}
            shown.setdefault(module, set()).update(names)
    return {module: sorted(names) for module, names in sorted(shown.items())}


def test_what_the_docs_and_examples_import_is_the_written_list_and_exists() -> None:
    shown = _imports_shown()
    assert shown == {module: sorted(names) for module, names in sorted(DOCUMENTED_IMPORTS.items())}
    for module, names in shown.items():
        imported = importlib.import_module(module)
        assert [name for name in names if not hasattr(imported, name)] == [], module


@pytest.mark.parametrize("name", _modules())
def test_a_module_that_lists_names_defines_them(name: str) -> None:
    """Only the public packages list names (``__all__``); whatever one lists exists, once."""
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", [])
    assert len(set(exported)) == len(exported), f"{name}.__all__ lists a name twice"
    assert [member for member in exported if not hasattr(module, member)] == [], name


def _resolve(dotted: str) -> object:
    """The object ``dotted`` names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            value = getattr(value, attribute)
        return value
    raise ModuleNotFoundError(dotted)


def _documented_names() -> set[str]:
    names: set[str] = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for module, imported in re.findall(r"from (gencache[\w.]*) import ([\w, ()]+)", text):
            names.update(f"{module}.{name.strip()}" for name in imported.strip("()").split(",") if name.strip())
        names.update(re.findall(r"`(gencache(?:\.\w+)+)", text))
    return names - NOT_PYTHON


def test_every_gencache_name_the_docs_use_resolves() -> None:
    names = _documented_names()
    unresolved = []
    for dotted in sorted(names):
        try:
            _resolve(dotted)
        except (AttributeError, ModuleNotFoundError):
            unresolved.append(dotted)
    assert unresolved == []
