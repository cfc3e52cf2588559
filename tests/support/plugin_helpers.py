"""Installing a recipe plug-in into a throw-away directory, offline: the package's modules plus the
``<name>-<version>.dist-info`` an installer writes (``METADATA`` and ``entry_points.txt`` from its pyproject.toml),
so ``importlib.metadata`` finds its entry points once the directory is on ``sys.path`` (or ``PYTHONPATH``)."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gencache-recipe-example"


def install_package(project: Path, site: Path) -> Path:
    """Install the project at ``project`` (a pyproject.toml with ``src/<package>``) into ``site``; return ``site``."""
    meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    site.mkdir(parents=True, exist_ok=True)
    for package in (project / "src").iterdir():
        if package.is_dir() and (package / "__init__.py").is_file():
            shutil.copytree(package, site / package.name, dirs_exist_ok=True)
    dist = site / f"{meta['name'].replace('-', '_')}-{meta['version']}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n", encoding="utf-8"
    )
    lines = []
    for group, points in meta.get("entry-points", {}).items():
        lines.append(f"[{group}]")
        lines.extend(f"{name} = {target}" for name, target in points.items())
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return site


def write_project(root: Path, name: str, module_source: str, entry_point: str) -> Path:
    """A one-module plug-in project at ``root`` registering ``entry_point`` (``name = module:attr``)."""
    package = name.replace("-", "_")
    (root / "src" / package).mkdir(parents=True)
    (root / "src" / package / "__init__.py").write_text(module_source, encoding="utf-8")
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "0.0.1"\n\n[project.entry-points."gencache.recipes"]\n{entry_point}\n',
        encoding="utf-8",
    )
    return root
