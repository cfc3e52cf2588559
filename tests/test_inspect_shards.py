"""inspect, verify and export of shard sets that are not whole: a damaged shard makes inspect fail as verify does, a
stray directory at the shard base's own name is named, an --out under a file is named, and inspect reports each
shard's own counts per data config and their total."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import gencache
from gencache.artifact.manifest import shard_data_configs
from gencache.artifact.mixture import open_caches
from gencache.artifact.report import inspect_report
from gencache.cli.app import run
from gencache.core.canonical import canonical_bytes
from gencache.core.errors import ShardError
from gencache.data.recipes import sample_source
from support.storage_helpers import make_entries, write_shard

RUN = "a" * 64


def shard_set(base: Path) -> list[Path]:
    entries = make_entries(10)
    shards = [write_shard(base, index, 2, entries, RUN) for index in range(2)]
    for name in os.listdir(shards[1]):
        os.chmod(shards[1] / name, 0o644)
    return shards


def delete_manifest(shard: Path) -> None:
    os.unlink(shard / "manifest.json")


def record_another_index(shard: Path) -> None:
    manifest = json.loads((shard / "manifest.json").read_text(encoding="utf-8"))
    manifest["summary"]["shard"]["index"] = 0  # its keys follow the rule for shard 1
    (shard / "manifest.json").write_bytes(canonical_bytes(manifest) + b"\n")


def truncate_payload(shard: Path) -> None:
    payload = shard / "cache.safetensors"
    os.truncate(payload, payload.stat().st_size - 3)


@pytest.mark.parametrize("damage", [delete_manifest, record_another_index, truncate_payload])
def test_inspect_of_a_shard_base_fails_like_verify_when_one_shard_is_damaged(
    damage: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "out"
    shards = shard_set(base)
    damage(shards[1])  # type: ignore[operator]
    assert run(["verify", str(base)]) == 1
    capsys.readouterr()
    assert run(["inspect", str(base)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert (
        [line for line in err if line.startswith("FAIL ")]
        == [line for line in err if line.startswith(f"FAIL {shards[1]}")]
        != []
    )
    assert run(["inspect", "--json", str(base)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [a["kind"] for a in report["artifacts"][0]["artifacts"]] == ["artifact", "error"]


def test_an_intact_shard_base_inspects_with_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard_set(tmp_path / "out")
    assert run(["inspect", str(tmp_path / "out")]) == 0
    assert "FAIL" not in capsys.readouterr().err


@pytest.mark.parametrize("content", [None, "notes.txt"])
def test_a_stray_directory_at_the_shard_base_is_named_by_inspect_verify_and_export(
    content: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "out"
    shard_set(base)
    base.mkdir()
    if content:
        (base / content).write_text("x", encoding="utf-8")
    fix = f"rmdir {base}" if content is None else "move it away"
    for argv in (
        ["inspect", str(base)],
        ["verify", str(base)],
        ["export", str(base), "--out", str(tmp_path / "x.jsonl"), "--no-prompts"],
    ):
        assert run(argv) == 2, argv
        captured = capsys.readouterr()
        lines = [line for line in (captured.out + captured.err).splitlines() if line.strip()]  # verify: stdout
        assert len(lines) == 1, lines
        assert f"{base} is " in lines[0] and "hides the 2 shard directories out-shard-*-of-00002" in lines[0]
        assert fix in lines[0] and "not an artifact:" not in lines[0]
    with pytest.raises(ShardError, match="hides the 2 shard directories"):
        open_caches(base)
    assert not (tmp_path / "x.jsonl").exists()


def test_export_under_a_file_names_the_parent_that_is_not_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "out"
    shard_set(base)
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    out = tmp_path / "a-file" / "sub" / "x.jsonl"
    assert run(["export", str(base), "--out", str(out), "--no-prompts"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        f"error: Cannot write {out}: {tmp_path / 'a-file'} is not a directory; choose an --out path under a directory."
    ]


def test_shard_data_configs_partition_the_run_counts() -> None:
    samples = [(0, "k1"), (0, "k2"), (0, "k1"), (1, "k2"), (1, "k3")]
    first = shard_data_configs(samples, {"k1", "k3"}, 3)
    second = shard_data_configs(samples, {"k2"}, 3)
    assert first == [
        {"index": 0, "samples": 2, "unique": 1},
        {"index": 1, "samples": 1, "unique": 1},
        {"index": 2, "samples": 0, "unique": 0},
    ]
    assert second == [
        {"index": 0, "samples": 1, "unique": 1},
        {"index": 1, "samples": 1, "unique": 1},
        {"index": 2, "samples": 0, "unique": 0},
    ]


def test_inspect_reports_each_shards_own_counts_per_data_config_and_their_total(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = str(sample_source("musique"))
    data_config = {
        "dataset_name": "musique",
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "default",
        "split": "train",
        "source": source,
    }
    config = {
        "model": {
            "model_path": str(tiny_teacher_dir),
            "dtype": "float32",
            "device": "cpu",
            "generation_kwargs": {"max_new_tokens": 3},
        },
        "data_configs": [{**data_config, "num_samples": 4, "seed": 1}, {**data_config, "num_samples": 3, "seed": 2}],
        "gen_batch_size": 4,
        "seed": 0,
        "output_dir": str(tmp_path / "out"),
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    base = gencache.generate(path, shards=2)
    report = inspect_report([base])
    sharded = report.to_json()["artifacts"][0]
    assert sharded["kind"] == "sharded" and report.exit_code == 0
    shards = sharded["artifacts"]
    run_counts = shards[0]["data_configs"]
    assert [c["samples"] for c in run_counts] == [4, 3]
    for shard in shards:
        own = shard["shard_data_configs"]
        assert own is not None and len(own) == 2
        assert max(c["unique"] for c in own) <= shard["entries"] <= sum(c["unique"] for c in own)
    assert sharded["totals"]["data_configs"] == run_counts  # the shards' own counts add up to the run's
    single = inspect_report([shards[1]["path"]]).to_json()["artifacts"][0]
    assert single["shard_data_configs"] == shards[1]["shard_data_configs"] != run_counts
    assert run(["inspect", shards[1]["path"]]) == 0
    out = capsys.readouterr().out
    own = shards[1]["shard_data_configs"]
    assert f"#0: {own[0]['samples']} samples, {own[0]['unique']} unique" in out
    assert "data configs (shard)" in out and "data configs (run)" in out
