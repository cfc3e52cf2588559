"""Recipe plug-ins through the ``gencache.recipes`` entry point group: the example package installed into a
throw-away directory is found by build_samples, ``generate --dry-run``, ``generate`` and DistillationDataset with
the same keys; a plug-in that fails to import or returns malformed samples is one line naming it."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gencache.cli.app import run as cli_run
from gencache.config.datasets import dataset_names
from gencache.core.errors import ConfigError, DatasetError
from gencache.data.recipes import PluginRecipe, get_recipe
from gencache.data.samples import build_samples
from support.plugin_helpers import EXAMPLE, REPO, install_package, write_project

TERMS = [
    {
        "term": f"term{i}",
        "definition": f"Definition {i}.",
        "notes": [f"Note {i}a.", f"Note {i}b."],
        "domain": ["physics", "biology"][i % 2],
    }
    for i in range(6)
]


def hand_key(row: dict[str, Any]) -> str:
    payload = {
        "documents": row["notes"],
        "query": f"What does {row['term']} mean?",
        "shots": [],
        "task": {"domain": row["domain"]},
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture()
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path that plug-ins are installed into."""
    directory = tmp_path / "site"
    directory.mkdir()
    monkeypatch.syspath_prepend(str(directory))
    yield directory
    for name, module in list(sys.modules.items()):  # every module imported from it (the plug-ins' packages)
        file = getattr(module, "__file__", None)
        if file and Path(file).is_relative_to(directory):
            del sys.modules[name]


@pytest.fixture()
def glossary(tmp_path: Path) -> Path:
    path = tmp_path / "glossary.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in TERMS), encoding="utf-8")
    return path


def data_config(source: Path, num_samples: int = 4, **overrides: Any) -> dict[str, Any]:
    config = {
        "dataset_name": "glossary",
        "num_samples": num_samples,
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "default",
        "split": "train",
        "seed": 3,
        "source": str(source),
    }
    config.update(overrides)
    return config


def write_config(directory: Path, teacher: Path, source: Path, **overrides: Any) -> Path:
    config = {
        "model": {
            "model_path": str(teacher),
            "dtype": "float32",
            "device": "cpu",
            "generation_kwargs": {"max_new_tokens": 4},
        },
        "data_configs": [data_config(source)],
        "output_dir": str(directory / "out"),
        **overrides,
    }
    path = directory / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def test_the_example_plugin_is_found_and_keys_follow_the_rule(site: Path, glossary: Path) -> None:
    assert "glossary" not in dataset_names()
    install_package(EXAMPLE, site)
    assert "glossary" in dataset_names()
    recipe = get_recipe("glossary")
    assert isinstance(recipe, PluginRecipe) and recipe.name == "glossary"
    assert [column.name for column in recipe.columns] == ["term", "definition", "notes", "domain"]
    samples = build_samples([data_config(glossary)])
    order = list(range(len(TERMS)))
    random.Random(3).shuffle(order)
    assert [s.key for s in samples] == [hand_key(TERMS[i]) for i in order[:4]]
    assert samples[0].answer == TERMS[order[0]]["definition"]
    assert samples[0].prompt_text.endswith("Answer in one sentence.")


def test_dry_run_generate_and_distillation_dataset_use_the_plugin(
    site: Path,
    glossary: Path,
    tmp_path: Path,
    tiny_teacher_dir: Path,
    tiny_tokenizer: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gencache.training import DistillationDataset

    install_package(EXAMPLE, site)
    config = write_config(tmp_path, tiny_teacher_dir, glossary)
    assert cli_run(["generate", str(config), "--dry-run"]) == 0
    report = capsys.readouterr().out  # the report goes to stdout
    assert "glossary" in report and "every check passed" in report
    assert cli_run(["generate", str(config)]) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text(encoding="utf-8"))
    built = build_samples([data_config(glossary)])
    assert set(manifest["entries"]) == set(built.keys())
    dataset = DistillationDataset(
        tmp_path / "out",
        tiny_tokenizer,
        config=config,
        model_path=str(tiny_teacher_dir),
        tokenizer_path=str(tiny_teacher_dir),
        dtype="float32",
    )
    assert len(dataset) == 4
    assert [dataset[i]["key"] for i in range(4)] == [hand_key(row) for row in _selected(4)]


def _selected(count: int) -> list[dict[str, Any]]:
    order = list(range(len(TERMS)))
    random.Random(3).shuffle(order)
    return [TERMS[i] for i in order[:count]]


def test_a_fresh_process_finds_the_installed_plugin(site: Path, glossary: Path, tmp_path: Path) -> None:
    install_package(EXAMPLE, site)
    config = write_config(tmp_path, tmp_path / "no-teacher", glossary)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO / "src")])}
    result = subprocess.run(
        [sys.executable, "-m", "gencache", "generate", str(config), "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 2  # no teacher: the dry run says so after counting the plug-in's rows
    assert "glossary" in result.stdout and "does not exist" in result.stderr


BROKEN_IMPORT = "import gencache_no_such_module_anywhere\n"
MALFORMED = """
from gencache_recipe_example import GlossaryRecipe


class Malformed(GlossaryRecipe):
    name = "malformed"

    def load(self, dc, kwargs, tokenizer):
        samples, info = super().load(dc, kwargs, tokenizer)
        return [type(s)(dict(s.semantic, extra=1), s.parts, s.query, s.answer) for s in samples], info


RECIPE = Malformed()
"""
RAISING = """
from gencache_recipe_example import GlossaryRecipe


class Raising(GlossaryRecipe):
    name = "raising"

    def select(self, dc, kwargs, tokenizer):
        raise ZeroDivisionError("division by zero in my dataset code")


RECIPE = Raising()
"""

REFUSING = """
from gencache.core.errors import DatasetError
from gencache_recipe_example import GlossaryRecipe


class Refusing(GlossaryRecipe):
    name = "refusing"

    def select(self, dc, kwargs, tokenizer):
        raise DatasetError("the glossary has no rows for this subset")


RECIPE = Refusing()
"""


@pytest.mark.parametrize(
    ("name", "source", "expected"),
    [
        (
            "broken",
            BROKEN_IMPORT,
            "recipe plug-in 'broken' (entry point broken = broken_recipe:RECIPE of broken-recipe "
            "0.0.1) failed to import: ModuleNotFoundError: No module named 'gencache_no_such_module_anywhere'",
        ),
        (
            "malformed",
            MALFORMED,
            "recipe plug-in 'malformed' (entry point malformed = malformed_recipe:RECIPE of "
            "malformed-recipe 0.0.1) returned malformed samples: sample 0: Semantic payload must contain exactly",
        ),
        (
            "raising",
            RAISING,
            "recipe plug-in 'raising' (entry point raising = raising_recipe:RECIPE of raising-recipe "
            "0.0.1) failed in load: ZeroDivisionError: division by zero in my dataset code",
        ),
        (
            "refusing",
            REFUSING,
            "recipe plug-in 'refusing' (entry point refusing = refusing_recipe:RECIPE of "
            "refusing-recipe 0.0.1): the glossary has no rows for this subset",
        ),
    ],
)
def test_a_faulty_plugin_is_one_line_naming_it(
    name: str,
    source: str,
    expected: str,
    site: Path,
    glossary: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    install_package(EXAMPLE, site)
    project = write_project(tmp_path / name, f"{name}-recipe", source, f'{name} = "{name}_recipe:RECIPE"')
    install_package(project, site)
    # an import failure shows when the config is validated (data_kwargs need the recipe), the others when it loads
    with pytest.raises((ConfigError, DatasetError), match=re.escape(expected)) as raised:
        build_samples([data_config(glossary, dataset_name=name)])
    assert str(raised.value).count("recipe plug-in") == 1  # named once
    config = write_config(
        tmp_path, tmp_path / "no-teacher", glossary, data_configs=[data_config(glossary, dataset_name=name)]
    )
    assert cli_run(["generate", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:") and "recipe plug-in" in line]
    assert len(errors) == 1 and expected in errors[0], err  # (the missing teacher is its own line)
    # a template that needs the tokenizer: the dry run reads the keys through the recipe's load, still named once
    chat = data_config(glossary, dataset_name=name, template="tokenizer_chat")
    config = write_config(tmp_path, tmp_path / "no-teacher", glossary, data_configs=[chat])
    assert cli_run(["generate", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:") and "recipe plug-in" in line]
    assert len(errors) == 1 and expected in errors[0] and errors[0].count("recipe plug-in") == 1, err


def test_a_plugin_cannot_replace_a_builtin(site: Path, tmp_path: Path) -> None:
    project = write_project(tmp_path / "p", "shadow-recipe", "RECIPE = None\n", 'musique = "shadow_recipe:RECIPE"')
    install_package(project, site)
    with pytest.raises(DatasetError, match=r"recipe plug-in 'musique' .* uses the name of the built-in dataset"):
        get_recipe("musique")


def test_the_helper_installs_what_an_installer_does(tmp_path: Path) -> None:
    """The example is a real installable package: where uv can build it offline, its entry points and modules are
    exactly what the tests' helper installs."""
    import shutil

    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    target = tmp_path / "real"
    built = subprocess.run(
        [uv, "pip", "install", "--offline", "--no-deps", "--quiet", "--target", str(target), str(EXAMPLE)],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        pytest.skip(f"the example cannot be built offline here: {built.stderr.strip().splitlines()[-1:]}")
    helper = install_package(EXAMPLE, tmp_path / "helper")
    (real_dist,) = target.glob("*.dist-info")
    (helper_dist,) = helper.glob("*.dist-info")
    assert real_dist.name == helper_dist.name
    assert _entry_lines(real_dist) == _entry_lines(helper_dist)
    package = "gencache_recipe_example"
    assert (target / package / "__init__.py").read_bytes() == (helper / package / "__init__.py").read_bytes()


def _entry_lines(dist: Path) -> list[str]:
    text = (dist / "entry_points.txt").read_text(encoding="utf-8")
    return sorted(line.replace(" ", "") for line in text.splitlines() if line.strip())


def test_an_unknown_dataset_names_the_installed_plugins_and_suggests_one(site: Path, glossary: Path) -> None:
    from gencache.config import parse_data_configs

    install_package(EXAMPLE, site)
    known = "known: biography, chat, glossary, hotpot_qa, musique, niah, table"
    message = f"unknown dataset 'glosary' (did you mean 'glossary'? {known})"
    with pytest.raises(ConfigError, match=re.escape(message)):
        get_recipe("glosary")
    with pytest.raises(ConfigError, match=re.escape(f"data_configs[0].dataset_name: {message}")):
        parse_data_configs([data_config(glossary, dataset_name="glosary")])
