"""Which part of gencache may import which: the layers that docs/architecture.md draws, pinned.

Bottom to top: the foundation (``gencache.core``: errors, canonical JSON, tokenizer state, hub access, the
progress protocol, the version, the lazy package names, printable text), then the config package (every
input rule), the artifact package, the generation package, the data package, the training package, the run
(``gencache.run``), the generated reference (``gencache.docgen``) and the command line (``gencache.cli``) on top.
A module may import its own layer and the layers below it, never one above; no package module imports the package
root. Imports inside functions and under ``TYPE_CHECKING`` count too (they are still arrows).
"""

from __future__ import annotations

import ast
from pathlib import Path

import gencache

ROOT = Path(gencache.__file__).parent
LAYERS = ["core", "config", "artifact", "generation", "data", "training", "run", "docgen", "cli"]


def layer_of(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts:
        return "root"
    if parts[0] in LAYERS:
        return parts[0]
    return "top"


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "gencache":
                found.update(f"gencache.{alias.name}" for alias in node.names if alias.name != "__version__")
                if any(alias.name == "__version__" for alias in node.names):
                    found.add("gencache")
            elif node.module.startswith("gencache."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("gencache"))
    return found


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def test_the_top_level_holds_only_the_package_root_and_its_main() -> None:
    loose = sorted(path.name for path in ROOT.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"]
    packages = sorted(path.parent.name for path in ROOT.glob("*/__init__.py"))
    assert packages == sorted(LAYERS)


def test_no_module_imports_a_layer_above_its_own() -> None:
    violations = []
    for path in sorted(ROOT.rglob("*.py")):
        name = module_name(path)
        if name == "gencache" or name == "gencache.__main__":
            continue
        own = layer_of(name)
        assert own != "top", name
        for target in imports_of(path):
            other = layer_of(target)
            if other == "root":
                violations.append(f"{name} imports the package root")
            elif LAYERS.index(other) > LAYERS.index(own):
                violations.append(f"{name} ({own}) imports {target} ({other})")
    assert violations == []


def module_imports(path: Path) -> set[str]:
    """The gencache modules and names ``path`` imports, at module level, inside functions and under
    ``if TYPE_CHECKING:`` alike (a typing-only import is still an arrow between two modules)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("gencache"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("gencache"))
    return found


def test_no_import_circle() -> None:
    modules = {module_name(path): path for path in ROOT.rglob("*.py")}
    graph = {
        name: sorted(target for target in module_imports(path) if target in modules and target != name)
        for name, path in modules.items()
    }
    for name in graph:  # a package imports its submodules' names: only arrows out of the package count
        if modules[name].name == "__init__.py":
            graph[name] = [t for t in graph[name] if not t.startswith(name + ".")]
    assert cycles_of(graph) == []


def cycles_of(graph: dict[str, list[str]]) -> list[str]:
    """Every import circle of ``graph`` (module -> the modules it imports), as ``a -> b -> a``."""
    cycles: list[str] = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for target in graph.get(node, []):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*stack[stack.index(target) :], target]))
            elif target not in state:
                visit(target, [*stack, target])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def test_the_circle_check_sees_a_circle_through_a_function_level_import() -> None:
    assert cycles_of({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == ["a -> b -> c -> a"]
