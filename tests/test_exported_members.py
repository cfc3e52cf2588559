"""The public surface, in the style of httpx's ``test_exported_members``: the top level and each package export
exactly the names written here (adding or removing a public name is a change to this list), every module declares
``__all__`` and every name it lists exists, and every ``gencache`` name the README and the docs use resolves."""

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
    "__version__",
    "audit",
    "build_samples",
    "generate",
    "load_config",
    "open_caches",
    "prepare_tokenizer",
    "semantic_key",
]

#: Each package's ``__all__`` (a package without one of its own is a namespace for its modules: an empty list).
PACKAGES = {
    "gencache.artifact": [],
    "gencache.cli": [],
    "gencache.core": [],
    "gencache.docgen": [],
    "gencache.run": [],
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
    "gencache.data": [],
    "gencache.data.recipes": [
        "BUILTIN_DATASETS",
        "DATASETS",
        "SAMPLES_DIR",
        "DataConfigLike",
        "DatasetRecipe",
        "RawSample",
        "Registry",
        "SourceInfo",
        "builtin_recipe",
        "get_recipe",
        "sample_source",
    ],
    "gencache.core.errors": [
        "CompatibilityError",
        "ConfigError",
        "DatasetError",
        "FormatError",
        "GencacheError",
        "GenerationError",
        "HeaderCapacityError",
        "InputPathError",
        "InputProblems",
        "IntegrityError",
        "MissingEntriesError",
        "MissingEntryError",
        "OutputExistsError",
        "Problem",
        "PromptError",
        "ShardError",
        "SourceChangedError",
        "Stopped",
        "StoppedRun",
        "WriteError",
        "first_line",
        "raise_problems",
        "reworded",
        "stop_message",
    ],
    "gencache.generation": [],
    "gencache.generation.engines": [
        "ENGINES",
        "Engine",
        "EngineContext",
        "EngineStats",
        "GeneratedEntry",
        "KeyedPrompt",
        "checked_prompts",
        "create_engine",
        "options_of",
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


def test_every_error_the_readme_names_is_exported_at_the_top() -> None:
    import builtins

    from gencache.core import errors

    named = set(re.findall(r"\b([A-Z]\w*Error)\b", (ROOT / "README.md").read_text(encoding="utf-8")))
    ours = {name for name in named if not hasattr(builtins, name)}
    assert {"IntegrityError", "MissingEntriesError"} <= ours
    for name in sorted(ours):
        assert name in gencache.__all__, f"the README names {name}: export it from gencache"
        assert getattr(gencache, name) is getattr(errors, name)


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_each_package_exports_exactly_the_written_names(package: str) -> None:
    assert sorted(importlib.import_module(package).__all__) == sorted(PACKAGES[package])


def test_every_package_is_pinned() -> None:
    packages = {
        info.name
        for info in pkgutil.walk_packages(gencache.__path__, prefix="gencache.")
        if info.ispkg and ".sample_data" not in info.name and info.name.count(".") <= 2
    }
    assert packages <= set(PACKAGES), f"pin the __all__ of {sorted(packages - set(PACKAGES))} here"


@pytest.mark.parametrize("name", _modules())
def test_every_module_declares_all_and_exports_what_it_lists(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert isinstance(exported, list), f"{name} has no __all__ list"
    assert len(set(exported)) == len(exported), f"{name}.__all__ lists a name twice"
    missing = [member for member in exported if not hasattr(module, member)]
    assert missing == [], f"{name}.__all__ lists names it does not define: {missing}"


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
