"""Every Python and shell block of README.md, docs/format.md and docs/training.md runs, as written, on the tiny
teacher on CPU.

Each page runs in a fresh working directory laid out like the repository: ``configs/qwen_3_8b_teacher/`` holds
configs of the names the pages use over the bundled sample data for the tiny teacher (float32, CPU), so the
commands and scripts run unchanged; in Python blocks the teacher and student hub ids, and the ``"bfloat16"`` the
pages' teacher is generated in, stand for the tiny teacher's path and float32. Shell blocks run under ``bash -e``
with ``uv run`` running the command in this environment. The blocks of one page share one namespace, in order.
A shell line the test does not run is listed in :data:`NOT_RUN` with the reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import gencache
from gencache.data.recipes import sample_source

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```(python|bash)\n(.*?)^```", re.DOTALL | re.MULTILINE)
#: Shell commands (by their start) that no test runs here, and why.
NOT_RUN = {
    "uv run pytest": "the test suite this test is part of",
    "uv run nox": "CI sessions (lint, typecheck, the suite, benchmarks, the vLLM environments)",
}
CONFIGS = "configs/qwen_3_8b_teacher"


def blocks(page: str) -> list[tuple[str, str]]:
    """The ``(language, code)`` of every python and bash block of ``page``, in order."""
    return [(match.group(1), match.group(2)) for match in BLOCK.finditer((ROOT / page).read_text(encoding="utf-8"))]


def commands(code: str) -> list[str]:
    """The logical lines of a shell block (continuations joined), comments and blank lines left out."""
    joined = re.sub(r"\\\n", " ", code)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def biography(seed: int, strs: int) -> dict[str, Any]:
    return {
        "dataset_name": "biography",
        "num_samples": 7,
        "num_data_strs": strs,
        "num_shots": 0,
        "subset": "1k",
        "split": "train",
        "seed": seed,
        "source": str(sample_source("biography")),
        "data_kwargs": {"question_type": "QA"},
        "template": "tokenizer_chat",
    }


def workspace(directory: Path, teacher: Path) -> Path:
    """The pages' configs, for the tiny teacher, under ``directory/configs``; returns ``directory``."""
    configs = directory / CONFIGS
    configs.mkdir(parents=True)
    default = {
        "model": {
            "model_path": str(teacher),
            "tokenizer_path": str(teacher),
            "dtype": "float32",
            "device": "cpu",
            "generation_kwargs": {"max_new_tokens": 8, "do_sample": False},
        },
        "gen_batch_size": 8,
        "seed": 42,
    }
    hotpot = {
        "dataset_name": "hotpot_qa",
        "num_samples": 4,
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "fullwiki",
        "split": "train",
        "seed": 0,
        "source": str(sample_source("hotpot_qa")),
        "data_kwargs": {"difficulty": ["easy", "medium", "hard"]},
        "template": "tokenizer_chat",
    }
    files = {
        "_default.json": default,
        "biography_greedy_kl.json": {
            "output_dir": "./generation_cache/artifacts/qwen_3_8b_teacher/biography_greedy_kl",
            "data_configs": [biography(0, 2), biography(1, 3), biography(2, 2)],
        },
        "hotpot_qa_greedy512_kl.json": {
            "output_dir": "./generation_cache/artifacts/qwen_3_8b_teacher/hotpot_qa_greedy512_kl",
            "data_configs": [hotpot],
        },
    }
    for name, body in files.items():
        (configs / name).write_text(json.dumps(body), encoding="utf-8")
    return directory


def run_page(page: str, directory: Path, teacher: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Run every block of ``page`` in ``directory``; returns the shell lines left out."""
    shim = directory / ".bin"
    shim.mkdir()
    (shim / "uv").write_text('#!/bin/sh\n[ "$1" = run ] && shift\nexec "$@"\n', encoding="utf-8")
    (shim / "uv").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    monkeypatch.chdir(directory)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    substitutions = {"Qwen/Qwen3-8B": str(teacher), "Qwen/Qwen3-0.6B": str(teacher), '"bfloat16"': '"float32"'}
    left_out: list[str] = []
    for number, (language, code) in enumerate(blocks(page)):
        where = f"{page} block {number} ({language})"
        if language == "bash":
            lines = [line for line in commands(code) if not line.startswith(tuple(NOT_RUN))]
            left_out += [line for line in commands(code) if line.startswith(tuple(NOT_RUN))]
            for line in lines:
                done = subprocess.run(
                    ["bash", "-e", "-c", line], cwd=directory, env=env, capture_output=True, text=True, timeout=900
                )
                assert done.returncode == 0, f"{where}: {line}\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
            continue
        for name, value in substitutions.items():
            code = code.replace(name, value)
        exec(compile(code, where, "exec"), namespace)
    return left_out


def not_ignored(entries: set[str]) -> list[str]:
    """Those of ``entries`` (top-level names in a checkout's root, a directory's with a trailing ``/``) that the
    repository's ``.gitignore`` does not cover."""
    patterns = {line.strip() for line in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()}
    return sorted(name for name in entries if f"/{name}" not in patterns)


def new_entries(directory: Path, before: set[str]) -> set[str]:
    """What a page's commands left at the top of ``directory`` (directories with a trailing ``/``)."""
    after = {entry.name + ("/" if entry.is_dir() else "") for entry in directory.iterdir()}
    return after - before


@pytest.mark.slow
def test_the_readme_runs(tmp_path: Path, tiny_teacher_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = workspace(tmp_path / "readme", tiny_teacher_dir)
    monkeypatch.chdir(work)
    before = {entry.name + ("/" if entry.is_dir() else "") for entry in work.iterdir()} | {".bin/"}
    left_out = run_page("README.md", work, tiny_teacher_dir, monkeypatch)
    assert all(line.startswith(tuple(NOT_RUN)) for line in left_out)
    assert (work / "answers.parquet").is_file()
    assert not not_ignored(new_entries(work, before))  # run in a checkout, git shows none of it


@pytest.mark.slow
def test_the_format_page_runs(tmp_path: Path, tiny_teacher_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = workspace(tmp_path / "format", tiny_teacher_dir)
    monkeypatch.chdir(work)
    for name in ("biography_greedy_kl.json", "hotpot_qa_greedy512_kl.json"):  # the artifacts the page reads
        gencache.generate(Path(CONFIGS) / name)
    assert not run_page("docs/format.md", work, tiny_teacher_dir, monkeypatch)


@pytest.mark.slow
def test_the_training_page_runs(tmp_path: Path, tiny_teacher_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = workspace(tmp_path / "training", tiny_teacher_dir)
    monkeypatch.chdir(work)
    gencache.generate(Path(CONFIGS) / "biography_greedy_kl.json")  # the artifact the page trains on
    before = {entry.name + ("/" if entry.is_dir() else "") for entry in work.iterdir()} | {".bin/"}
    assert not run_page("docs/training.md", work, tiny_teacher_dir, monkeypatch)
    assert (work / "answers.parquet").is_file() and (work / "sft").is_dir()
    assert not not_ignored(new_entries(work, before))
