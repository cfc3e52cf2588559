"""gencache.generate, the Python API of `gencache generate`: the same run as the command (same artifact, same run
digest), values instead of output, gencache's errors raised, and the dry run's report returned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gencache
from gencache.artifact.reader import CacheReader, read_resolved_config, verify
from gencache.cli.app import run as cli_run
from gencache.core.errors import ConfigError
from gencache.data.recipes import sample_source
from gencache.run.preflight import Preflight


@pytest.fixture()
def config(tmp_path: Path, tiny_teacher_dir: Path) -> Path:
    config = {
        "model": {
            "model_path": str(tiny_teacher_dir),
            "dtype": "float32",
            "device": "cpu",
            "generation_kwargs": {"max_new_tokens": 6},
        },
        "data_configs": [
            {
                "dataset_name": "musique",
                "num_samples": 4,
                "num_data_strs": 0,
                "num_shots": 0,
                "subset": "default",
                "split": "train",
                "seed": 1,
                "source": str(sample_source("musique")),
            }
        ],
        "gen_batch_size": 2,
        "seed": 0,
        "output_dir": str(tmp_path / "from-config"),
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def test_generate_publishes_what_the_cli_publishes(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    by_cli = tmp_path / "cli"
    assert cli_run(["generate", str(config), "--output-dir", str(by_cli), "--set", "gen_batch_size=3"]) == 0
    assert capsys.readouterr().out.strip() == str(by_cli)
    by_api = gencache.generate(config, output_dir=tmp_path / "api", overrides={"gen_batch_size": 3})
    assert by_api == tmp_path / "api" and verify(by_api) == []
    assert capsys.readouterr().out == ""  # values, not output
    cli_reader, api_reader = CacheReader(by_cli), CacheReader(by_api)
    assert set(cli_reader) == set(api_reader) and len(api_reader) == 4
    for key in cli_reader:
        assert (cli_reader.metadata(key) or {})["content_digest"] == (api_reader.metadata(key) or {})["content_digest"]
    assert read_resolved_config(by_api)["overrides"]["set"] == ["gen_batch_size=3"]
    # the same run: the API accepts the CLI's artifact as already published by it, and returns its path
    again = gencache.generate(config, output_dir=by_cli, overrides=["gen_batch_size=3"], skip_published=True)
    assert again == by_cli


def test_dry_runs_and_errors_are_values_and_exceptions(config: Path, tmp_path: Path) -> None:
    report = gencache.dry_run(config, show_prompt=0, limit=2)
    assert isinstance(report, Preflight) and report.exit_code == 0 and not report.errors
    assert report.prompt is not None and report.prompt.prompt_text
    assert not (tmp_path / "from-config").exists()
    with pytest.raises(ConfigError, match="gen_batch_size"):
        gencache.generate(config, overrides={"gen_batch_size": 0})
    sharded = gencache.generate(config, output_dir=tmp_path / "sharded", shards=2)
    assert sharded == tmp_path / "sharded"
    assert len(gencache.open_caches(sharded)) == 4  # the unsuffixed output reads as the whole set
