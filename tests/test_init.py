"""``gencache init`` writes local example data and a config that runs as is with the tiny teacher."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gencache.cli.app import run as cli_run
from gencache.cli.demo import STARTER, write_starter
from gencache.config import load_config
from gencache.data.samples import build_samples


def test_init_writes_a_config_that_generates_as_is(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = tmp_path / "start"
    assert cli_run(["init", str(start), "--teacher", str(tiny_teacher_dir)]) == 0
    out = capsys.readouterr().out
    config = start / "config.json"
    assert f"wrote {config}" in out and f"gencache generate {config} --dry-run" in out
    for data in ("qa.jsonl", "chat.jsonl"):
        assert (start / "data" / data).read_text() == (STARTER / "data" / data).read_text()
    cfg = load_config(config)
    assert [dc.dataset_name for dc in cfg.data_configs] == ["table", "chat"]
    assert cli_run(["generate", str(config), "--dry-run"]) == 0
    assert cli_run(["generate", str(config)]) == 0
    manifest = json.loads((start / "artifacts" / "first-cache" / "manifest.json").read_text(encoding="utf-8"))
    assert len(manifest["entries"]) == 7
    assert cli_run(["init", str(start), "--teacher", str(tiny_teacher_dir)]) == 2  # never overwrites
    assert "never overwrites" in capsys.readouterr().err


def test_init_reuses_the_tiny_teacher_in_its_directory(
    tmp_path: Path, tiny_teacher_dir: Path, tiny_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(tiny_teacher_dir, tmp_path / "tiny-teacher")
    config = write_starter(tmp_path)
    assert "built" not in capsys.readouterr().out
    assert load_config(config).model.model_path == str(tmp_path / "tiny-teacher")
    samples = build_samples(load_config(config), tiny_tokenizer)
    assert len(samples) == 7 and all(sample.input_ids for sample in samples)


def test_init_refuses_a_file_as_its_directory(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert cli_run(["init", str(tmp_path / "f"), "--teacher", "x"]) == 2


def test_init_builds_a_teacher_every_engine_takes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_starter(tmp_path)
    assert f"built the demo's tiny teacher in {tmp_path / 'tiny-teacher'}" in capsys.readouterr().out
    config = json.loads((tmp_path / "tiny-teacher" / "config.json").read_text(encoding="utf-8"))
    assert config["head_dim"] == 32  # vLLM's CPU attention needs 32 or more
