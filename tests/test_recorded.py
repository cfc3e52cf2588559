"""The run an artifact records (gencache.data.recorded): the effective config after --limit and --set, the samples
rebuilt from it with the artifact's keys, a shard base read through its first shard, and every damaged record or
changed source file refused in one line naming the file."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import gencache
from gencache.artifact.reader import CacheReader
from gencache.core.errors import ConfigError, DatasetError, FormatError, SourceChangedError
from gencache.data.recipes import sample_source
from gencache.data.recorded import load_recorded_tokenizer, open_recorded_run, rebuild_samples
from gencache.data.sources import file_sha256
from support.config_factory import musique, write_config
from support.storage_helpers import make_entries, writable_copy, write_artifact


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, tiny_teacher_dir: Path) -> dict[str, Any]:
    """A --limit 3 --set max_new_tokens=5 artifact and a 2-shard run of the same config, over private data."""
    work = tmp_path_factory.mktemp("recorded")
    data = work / "musique-data"
    shutil.copytree(sample_source("musique"), data)
    config = write_config(work, tiny_teacher_dir, data_configs=[musique(num_samples=6, source=str(data))], seed=3)
    limited = gencache.generate(
        config, limit=3, overrides={"model.generation_kwargs.max_new_tokens": 5}, output_dir=work / "limited"
    )
    sharded = gencache.generate(config, shards=2, output_dir=work / "sharded")
    return {"limited": limited, "sharded": sharded, "data": data, "work": work}


def _recorded(path: Any) -> Any:
    return open_recorded_run(path)[1]


def test_the_record_is_the_effective_run(run: dict[str, Any]) -> None:
    recorded = _recorded(run["limited"])
    assert recorded.shards is None and recorded.paths == (run["limited"],)
    assert recorded.config.data_configs[0].num_samples == 3  # --limit applied
    assert recorded.generation["max_new_tokens"] == 5  # --set applied
    assert recorded.config.seed == 3 and recorded.config.output_dir == str(run["limited"])
    samples = rebuild_samples(recorded, load_recorded_tokenizer(recorded))
    assert set(samples.keys()) == set(CacheReader(run["limited"]).keys())
    assert all(sample.input_ids for sample in samples)


def test_a_shard_base_and_one_shard(run: dict[str, Any]) -> None:
    base = _recorded(run["sharded"])
    assert len(base.paths) == 2 and base.shards is None and all(base.owns(key) for key in "0f")
    samples = rebuild_samples(base)
    keys = samples.keys()
    assert set(keys) == {key for path in base.paths for key in CacheReader(path)}
    one = _recorded(base.paths[1])
    assert one.shards == (1,) and one.shard_count == 2
    assert {key for key in keys if one.owns(key)} == set(CacheReader(base.paths[1]))


@pytest.mark.parametrize(
    "damage",
    ["empty", "list", "number", "utf8", "no-generation", "digit", "data-configs-int", "no-digest"],
)
def test_a_damaged_record_is_refused_naming_the_file(run: dict[str, Any], tmp_path: Path, damage: str) -> None:
    artifact = writable_copy(run["limited"], tmp_path / "copy")
    path = artifact / "resolved_config.json"
    resolved = json.loads(path.read_text(encoding="utf-8"))
    if damage == "no-generation":
        del resolved["generation"]
    elif damage == "digit":
        resolved["generation"]["max_new_tokens"] = 6
    elif damage == "data-configs-int":
        resolved["config"]["data_configs"] = 7
    elif damage == "no-digest":
        del resolved["resolved_digest"]
    text = {"empty": "", "list": "[]", "number": "7"}.get(damage, json.dumps(resolved))
    path.write_bytes(b"\xff\xfe{" if damage == "utf8" else text.encode())
    with pytest.raises(FormatError) as caught:
        _recorded(artifact)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.exit_code == 1


def test_changed_and_missing_sources_are_refused(run: dict[str, Any], tmp_path: Path) -> None:
    data = writable_copy(run["data"], tmp_path / run["data"].name)
    recorded = _recorded(run["limited"])
    # the recorded files moved under a data root: checked there and rebuilt identically
    samples = rebuild_samples(recorded, data_root=tmp_path)
    assert set(samples.keys()) == set(CacheReader(run["limited"]).keys())
    victim = data / "train.jsonl"
    victim.write_bytes(victim.read_bytes().replace(b"a", b"b", 1))
    with pytest.raises(SourceChangedError, match=f"{victim}.*changed since generation") as caught:
        rebuild_samples(recorded, data_root=tmp_path)
    assert caught.value.exit_code == 2
    message = str(caught.value)
    recorded_sha = next(iter(recorded.resolved["sources"][0]["files"]))["sha256"]
    assert f"sha256 {recorded_sha[:12]}... recorded, {file_sha256(victim)[:12]}... now" in message
    assert f"now {victim.stat().st_size:,} bytes" in message
    assert 'config=CONFIG, missing="skip"' in message and "--no-prompts" in message and "\n" not in message
    victim.unlink()
    with pytest.raises(DatasetError, match=f"{victim} is gone"):
        rebuild_samples(recorded, data_root=tmp_path)
    # a data config read from another source is not held to the recorded files
    rebuilt = rebuild_samples(recorded, sources={0: str(run["data"])})
    assert rebuilt.keys() == samples.keys()
    with pytest.raises(ConfigError, match=r"data configs 0\.\.0"):
        rebuild_samples(recorded, sources={1: str(run["data"])})


def test_an_artifact_that_records_no_run(tmp_path: Path) -> None:
    artifact = write_artifact(tmp_path / "bare", make_entries(2), resolved_config={"note": "written by hand"})
    with pytest.raises(ConfigError, match="records no run config"):
        _recorded(artifact)
    assert os.path.isdir(artifact)
