"""What each model-free command imports, in a fresh process per command: `inspect`, `verify`, `clean`, `export`
(JSON Lines and parquet, without prompts), every command's `--help` and the reader's byte checks load none of torch,
transformers, datasets, ray, vllm and matplotlib; a reader imports torch only when it builds its first tensor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.storage_helpers import make_entries, write_artifact, write_shard
from support.terminal_env import FORCED_COLOUR_ENV, without_terminal

HEAVY = ("torch", "transformers", "datasets", "ray", "vllm", "matplotlib")
COMMANDS = ("generate", "inspect", "verify", "export", "clean", "demo", "init", "audit", "score", "report")


def loaded_by(code: str, modules: tuple[str, ...] = HEAVY) -> tuple[list[str], str]:
    """Which of ``modules`` are loaded once ``code`` ran in a fresh interpreter, and what it printed before (without
    forced colours in its environment: they make the console script print through rich even to a pipe)."""
    found = f"sorted(m for m in {modules!r} if m in sys.modules)"
    probe = f"{code}\nimport sys, json\nprint('\\nLOADED ' + json.dumps({found}))"
    env = without_terminal(FORCED_COLOUR_ENV)
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    before, _, loaded = result.stdout.rpartition("\nLOADED ")
    return list(json.loads(loaded)), before


def command(argv: list[str], expected_code: int = 0) -> list[str]:
    loaded, _ = loaded_by(
        f"from gencache.cli.app import run\ncode = run({argv!r})\nassert code == {expected_code}, code"
    )
    return loaded


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("imports")
    entries = make_entries(6, sequences=2)
    for index in range(2):
        write_shard(root / "sharded", index, 2, entries, "e" * 64)
    return write_artifact(root / "one", entries), root / "sharded"


def test_the_pinned_commands_are_every_command() -> None:
    import typer

    from gencache.cli.app import app

    assert sorted(typer.main.get_command(app).commands) == sorted(COMMANDS)  # type: ignore[attr-defined]


def test_help_of_every_command_imports_nothing_heavy() -> None:
    helps = [["--help"], *([name, "--help"] for name in COMMANDS)]  # one process: what one imports stays loaded
    code = "from gencache.cli.app import run\n" + "".join(f"assert run({argv!r}) == 0, {argv!r}\n" for argv in helps)
    assert loaded_by(code)[0] == []


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_without_prompts_imports_nothing_heavy(fmt: str, artifacts: tuple[Path, Path], tmp_path: Path) -> None:
    for source in artifacts:
        out = tmp_path / f"{source.name}.{fmt}"
        assert command(["export", str(source), "--out", str(out), "--format", fmt, "--no-prompts"]) == []
        assert out.stat().st_size > 0


def test_clean_imports_nothing_heavy(tmp_path: Path) -> None:
    assert command(["clean", str(tmp_path)]) == []


def test_the_reader_checks_bytes_without_torch_and_imports_it_with_the_first_tensor(
    artifacts: tuple[Path, Path],
) -> None:
    one, sharded = artifacts
    code = f"""
import sys
from gencache import CacheReader, open_caches
from gencache.artifact.reader import verify
reader = CacheReader({str(one)!r})
assert verify({str(one)!r}) == []
key = next(iter(reader))
assert reader.metadata(key) is not None and key in reader and len(reader) == 6
assert [list(a) for a in reader.get_arrays(key).sequences]
mixture = open_caches({str(sharded)!r})
assert len(mixture) == 6 and mixture.get_arrays(key).texts
print("before the first tensor:", "torch" in sys.modules)
assert reader[key].sequences[0].numel() > 0
"""
    loaded, printed = loaded_by(code)
    assert "before the first tensor: False" in printed
    assert loaded == ["torch"]


@pytest.mark.parametrize("argv", [["inspect"], ["inspect", "--json"], ["verify"], ["verify", "--json"]])
def test_the_console_script_reads_without_the_heavy_libraries(argv: list[str], artifacts: tuple[Path, Path]) -> None:
    """The entry point the ``gencache`` script, ``python -m gencache`` and ``run_generation_cache.py`` call."""
    one, sharded = artifacts
    code = f"""
import sys
sys.argv = ["gencache", *{[*argv, str(one), str(sharded)]!r}]
from gencache.cli.app import main
try:
    main()
except SystemExit as exit:
    assert exit.code == 0, exit.code
"""
    loaded, printed = loaded_by(code)
    assert loaded == [] and str(one) in printed


def test_generate_without_ray_never_imports_ray(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    from support.config_factory import write_config

    config = write_config(tmp_path, tiny_teacher_dir)
    run_it = f"from gencache.cli.app import run\ncode = run(['generate', {str(config)!r}])\nassert code == 0, code"
    loaded, _ = loaded_by(run_it, ("ray",))
    assert loaded == [] and (tmp_path / "out").is_dir()
