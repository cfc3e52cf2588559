"""`gencache generate` end to end on the real tiny teacher (CPU, float32): the published artifact, batching
invariance, duplicates, refusals before the model loads, shards, export, skip-published and the demo."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

from gencache.artifact.mixture import open_caches
from gencache.artifact.reader import CacheReader, verify
from gencache.cli.app import run as cli_run
from gencache.config.engines import GEN_BATCH_SIZE_USE
from gencache.core.errors import GencacheError, InputProblems, OutputExistsError
from gencache.data.recipes import sample_source
from gencache.data.samples import build_samples
from gencache.run.api import generate
from support.config_factory import hotpot_qa


def data_configs() -> list[dict[str, Any]]:
    return [
        hotpot_qa(template="tokenizer_chat"),
        {
            "dataset_name": "musique",
            "num_samples": 5,
            "num_data_strs": 0,
            "num_shots": 0,
            "subset": "default",
            "split": "train",
            "seed": 2,
            "source": str(sample_source("musique")),
        },
    ]


def write_config(directory: Path, teacher: Path, output_dir: Path, **overrides: Any) -> Path:
    config: dict[str, Any] = {
        "model": {
            "model_path": str(teacher),
            "dtype": "float32",
            "device": "cpu",
            "generation_kwargs": {"max_new_tokens": 12},
        },
        "data_configs": data_configs(),
        "gen_batch_size": 4,
        "seed": 0,
        "output_dir": str(output_dir),
    }
    config.update(overrides)
    path = directory / f"config-{len(list(directory.glob('config-*.json')))}.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def entries(path: Path) -> dict[str, Any]:
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    return dict(manifest["entries"])


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory, tiny_teacher_dir: Path) -> Path:
    work = tmp_path_factory.mktemp("e2e")
    output = generate(write_config(work, tiny_teacher_dir, work / "out"))
    assert output is not None
    return output


def test_publishes_exactly_three_files_that_safetensors_reads(published: Path) -> None:
    assert sorted(os.listdir(published)) == ["cache.safetensors", "manifest.json", "resolved_config.json"]
    assert not [p for p in os.listdir(published.parent) if p.startswith(".")]  # no temporary leftovers
    reader = CacheReader(published)
    assert len(reader) == 11
    with safe_open(str(published / "cache.safetensors"), framework="pt") as handle:
        names = set(handle.keys())
        assert handle.metadata() == {"format_version": "3", "provenance_digest": reader.provenance_digest}
        for key in reader.keys():  # noqa: SIM118
            generation = reader[key]
            for index, sequence in enumerate(generation.sequences):
                assert torch.equal(handle.get_tensor(f"{key}.{index}"), sequence)
                assert sequence.dtype == torch.int64 and sequence.dim() == 1 and sequence.numel() >= 1
    assert names == {f"{key}.0" for key in reader.keys()}  # noqa: SIM118


def test_resolved_config_records_the_run(published: Path, tiny_teacher_dir: Path) -> None:
    resolved = json.loads((published / "resolved_config.json").read_text(encoding="utf-8"))
    assert resolved["output_dir"] == str(published)
    assert resolved["config"]["data_configs"][0]["data_kwargs"]["add_cot"] is True  # defaults made explicit
    assert resolved["generation"]["max_new_tokens"] == 12
    assert resolved["generation"]["do_sample"] is False
    assert resolved["batching"]["batch_size"] == 4
    use = GEN_BATCH_SIZE_USE["transformers"]
    assert resolved["batching"]["gen_batch_size"] == {"value": 4, "use": use}  # what the engine did with it
    assert resolved["tokenizer"] == {"padding_side": "left", "pad_token_id": 0, "eos_token_id": 2}
    assert resolved["chat_template_sha256"]
    assert resolved["publish"]["rename"] in ("renameat2", "rename")
    assert {"torch", "transformers", "python"} <= set(resolved["runtime"])
    assert resolved["sources"][0]["files"][0]["sha256"]
    reader = CacheReader(published)
    assert reader.provenance["model_path"] == str(tiny_teacher_dir)
    reader.check_compatible(
        model_path=str(tiny_teacher_dir),
        tokenizer_path=str(tiny_teacher_dir),
        dtype="float32",
        tokenizer=resolved["tokenizer"],
    )


def test_stored_tokens_equal_plain_generate_of_each_prompt_alone(
    published: Path, tiny_model: Any, tiny_tokenizer: Any
) -> None:
    from gencache.config import load_config

    config = load_config(next(published.parent.glob("config-0.json")))
    samples = build_samples(config, tokenizer=tiny_tokenizer)
    reader = CacheReader(published)
    eos = set(tiny_model.generation_config.eos_token_id)
    for sample in samples.unique:
        assert sample.input_ids is not None
        ids = torch.tensor([sample.input_ids])
        with torch.inference_mode():
            out = tiny_model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=12,
                do_sample=False,
                pad_token_id=tiny_tokenizer.pad_token_id,
            )[0, ids.shape[1] :].tolist()
        cut = next((i + 1 for i, token in enumerate(out) if token in eos), len(out))
        stored = reader[sample.key]
        assert stored.sequences[0].tolist() == out[:cut]
        assert stored.finish_reasons[0] == ("eos" if cut < len(out) or out[-1] in eos else "length")


def test_batch_size_one_and_four_give_identical_entries(
    published: Path, tmp_path: Path, tiny_teacher_dir: Path
) -> None:
    single = generate(write_config(tmp_path, tiny_teacher_dir, tmp_path / "bs1", gen_batch_size=1))
    assert single is not None
    assert entries(single) == entries(published)


def test_duplicate_samples_are_generated_once(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    # the same samples twice, the second time through another template: same keys, different prompts
    twice = [data_configs()[0], dict(data_configs()[0], template="default")]
    notices: list[tuple[str, str]] = []
    config = write_config(tmp_path, tiny_teacher_dir, tmp_path / "dup", data_configs=twice)
    output = generate(config, notify=lambda level, text: notices.append((level, text)))
    assert output is not None
    warned = [text for level, text in notices if level == "warning"]
    assert len(warned) == 1 and "6 duplicated keys rendered different prompts" in warned[0]
    from gencache.artifact.report import inspect_report

    assert inspect_report([output]).to_json()["artifacts"][0]["conflicting_prompts"] == 6
    manifest = json.loads((output / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["summary"]["entries"] == 6
    assert manifest["summary"]["duplicates"] == 6
    assert manifest["summary"]["data_configs"] == [
        {"index": 0, "samples": 6, "unique": 6},
        {"index": 1, "samples": 6, "unique": 6},
    ]


@pytest.mark.parametrize("kind", ["directory", "file", "dangling-symlink"])
def test_existing_output_path_is_refused_before_the_model_loads(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "out"
    if kind == "directory":
        target.mkdir()
    elif kind == "file":
        target.write_text("x")
    else:
        target.symlink_to(tmp_path / "missing")
    # The teacher does not exist either: both are reported, before anything loads.
    config = write_config(tmp_path, tmp_path / "no-such-teacher", target)
    with pytest.raises(InputProblems) as found:
        generate(config)
    errors = [problem.error for problem in found.value.problems]
    assert isinstance(errors[0], OutputExistsError) and "already exists" in str(errors[0])
    assert ("dangling symlink" in str(errors[0])) == (kind == "dangling-symlink")
    assert "no-such-teacher does not exist" in str(errors[1]) and len(errors) == 2
    assert cli_run(["generate", str(config)]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out", config.name])


def test_three_shards_partition_the_unsharded_run(published: Path, tmp_path: Path, tiny_teacher_dir: Path) -> None:
    config = write_config(tmp_path, tiny_teacher_dir, tmp_path / "sharded")
    shard_dirs = []
    for index in range(3):
        if index < 2:
            out = generate(config, shard=f"{index}/3")
        else:  # the last one as a torchrun rank
            out = generate(config, env={"WORLD_SIZE": "3", "RANK": "2", "LOCAL_RANK": "2"})
        assert out is not None
        assert out.name == f"sharded-shard-{index:05d}-of-00003"
        shard_dirs.append(out)
    parts = [entries(d) for d in shard_dirs]
    keys = [set(p) for p in parts]
    assert all(keys) and not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2])
    union = {k: v for part in parts for k, v in part.items()}
    assert union == entries(published)
    for index, part in enumerate(keys):
        assert all(int(key, 16) % 3 == index for key in part)
    digests = {json.loads((d / "manifest.json").read_text())["summary"]["shard"]["run_digest"] for d in shard_dirs}
    assert len(digests) == 1
    mixed = open_caches(tmp_path / "sharded")
    assert set(mixed.keys()) == set(union)
    from gencache.artifact.report import inspect_report

    shards = inspect_report([tmp_path / "sharded"]).to_json()["artifacts"][0]["shards"]
    assert (shards["present"], shards["missing"], shards["other_run"]) == (["00000", "00001", "00002"], [], [])
    assert cli_run(["inspect", str(tmp_path / "sharded")]) == 0
    # a deleted shard is flagged by inspect and open_caches
    import shutil

    shutil.rmtree(shard_dirs[1])
    shards = inspect_report([tmp_path / "sharded"]).to_json()["artifacts"][0]["shards"]
    assert (shards["present"], shards["missing"]) == (["00000", "00002"], ["00001"])
    assert cli_run(["inspect", str(tmp_path / "sharded"), "--json"]) == 1
    with pytest.raises(GencacheError, match="00001"):
        open_caches(tmp_path / "sharded")
    # --skip-published: existing verified shards exit at once, the missing one is regenerated
    notices: list[tuple[str, str]] = []
    kept = generate(config, shard="0/3", skip_published=True, notify=lambda level, text: notices.append((level, text)))
    assert kept == shard_dirs[0]
    assert [text for level, text in notices if level != "status"] == [
        f"already published and verified: {shard_dirs[0]}"
    ]
    regenerated = generate(config, shard="1/3", skip_published=True)
    assert regenerated == shard_dirs[1]
    assert entries(regenerated) == parts[1]


def test_skip_published_refuses_a_shard_of_another_run(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    first = write_config(tmp_path, tiny_teacher_dir, tmp_path / "s")
    assert generate(first, shard="0/2") is not None
    other = write_config(tmp_path, tiny_teacher_dir, tmp_path / "s", seed=7)
    with pytest.raises(OutputExistsError, match="another run"):
        generate(other, shard="0/2", skip_published=True)


def test_export_writes_one_line_per_sequence(published: Path, tmp_path: Path) -> None:
    out = tmp_path / "answers.jsonl"
    assert cli_run(["export", str(published), "--out", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    reader = CacheReader(published)
    assert len(lines) == len(reader)
    assert {line["key"] for line in lines} == set(reader.keys())
    for line in lines:
        generation = reader[line["key"]]
        assert line["completion"] == generation.texts[line["sequence_index"]]
        assert line["token_length"] == generation.sequences[line["sequence_index"]].numel()
        assert line["reached_max_length"] == (line["finish_reason"] == "length")
        assert line["prompt"] and line["prompt_token_length"] > 0
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]
    assert cli_run(["export", str(published), "--out", str(out)]) == 2  # never overwrites


def test_dry_run_builds_samples_without_the_model(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    musique_only = [dict(data_configs()[1], template="default")]
    config = write_config(tmp_path, tiny_teacher_dir, tmp_path / "out", data_configs=musique_only)
    assert cli_run(["generate", str(config), "--dry-run"]) == 0
    err = "".join(capsys.readouterr())  # the report (stdout) and the errors (stderr)
    assert "musique" in err and "every check passed" in err
    assert "samples: 5   unique keys: 5   duplicates: 0" in err
    assert "header budget: " in err and "bytes (largest artifact)" in err
    assert not (tmp_path / "out").exists()


def test_dry_run_without_the_model_still_counts_the_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # model_path points nowhere: the dry run says so (exit 2, like generate) and still loads and counts the data
    musique_only = [dict(data_configs()[1], template="default")]
    config = write_config(tmp_path, tmp_path / "no-such-teacher", tmp_path / "out", data_configs=musique_only)
    assert cli_run(["generate", str(config), "--dry-run"]) == 2
    err = "".join(capsys.readouterr())  # the report (stdout) and the errors (stderr)
    assert f"error: model.model_path {tmp_path / 'no-such-teacher'} does not exist" in err
    assert "musique: 5 samples, 5 unique keys" in err
    assert "not computed" in err
    assert not (tmp_path / "out").exists()


def test_invalid_config_is_one_line_and_exit_code_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, tmp_path / "teacher", tmp_path / "out", gen_batch_size=True)
    assert cli_run(["generate", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gen_batch_size" in err
    assert not (tmp_path / "out").exists()


def test_demo_runs_offline_on_cpu(demo_run: dict[str, Any]) -> None:
    published = demo_run["artifact"]  # the session's demo run (conftest), in a fresh work directory
    reader = CacheReader(published)
    assert len(reader) > 0
    assert cli_run(["verify", str(published)]) == 0
    teacher = json.loads((demo_run["workdir"] / "tiny-teacher" / "config.json").read_text(encoding="utf-8"))
    assert teacher["head_dim"] == 32  # vLLM's CPU attention takes it (docs/engines.md runs the demo with vLLM)


def test_export_works_from_another_directory_with_relative_paths(
    tmp_path: Path, tiny_teacher_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    work = tmp_path / "work"
    shutil.copytree(sample_source("musique"), work / "data")
    shutil.copytree(tiny_teacher_dir, work / "teacher")
    monkeypatch.chdir(work)
    relative = [dict(data_configs()[1], source="data")]
    config = write_config(work, Path("teacher"), Path("out"), data_configs=relative)
    assert cli_run(["generate", str(config)]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert cli_run(["export", str(work / "out"), "--out", "answers.jsonl"]) == 0
    assert len((elsewhere / "answers.jsonl").read_text(encoding="utf-8").splitlines()) == 5


def test_unwritable_export_target_is_one_line(published: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_run(["export", str(published), "--out", "/proc/gencache-test/answers.jsonl"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: Cannot write")


def test_dry_run_reads_max_new_tokens_from_the_teacher(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = {"model_path": str(tiny_teacher_dir), "device": "cpu", "generation_kwargs": {"num_return_sequences": None}}
    config = write_config(tmp_path, tiny_teacher_dir, tmp_path / "out", model=model)
    assert cli_run(["generate", str(config), "--dry-run"]) == 0
    err = "".join(capsys.readouterr())  # the report (stdout) and the errors (stderr)
    assert "max_new_tokens 16" in err  # the tiny teacher's generation_config.json


def test_a_shard_without_keys_publishes_an_empty_artifact(
    published: Path, tmp_path: Path, tiny_teacher_dir: Path
) -> None:
    count = 64
    owned = {int(key, 16) % count for key in entries(published)}
    empty = next(i for i in range(count) if i not in owned)
    out = generate(write_config(tmp_path, tiny_teacher_dir, tmp_path / "many"), shard=f"{empty}/{count}")
    assert out is not None
    assert len(CacheReader(out)) == 0
    assert cli_run(["verify", str(out)]) == 0


def test_python_m_and_the_seed_script_are_aliases_of_the_cli(tmp_path: Path) -> None:
    import subprocess
    import sys
    import tomllib

    root = Path(__file__).resolve().parent.parent
    scripts = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts == {"gencache": "gencache.cli:main"}  # the one entry point: signal handlers, then the typer app
    module = subprocess.run([sys.executable, "-m", "gencache", "--help"], capture_output=True, text=True, check=False)
    assert module.returncode == 0 and "generate" in module.stdout
    missing = tmp_path / "missing.json"
    for command in (
        [sys.executable, "-m", "gencache", "generate"],
        [sys.executable, str(root / "run_generation_cache.py")],
    ):
        result = subprocess.run([*command, str(missing)], capture_output=True, text=True, check=False)
        assert result.returncode == 2
        assert result.stderr.strip() == f"error: config file not found: {missing}"


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            {"model": {"generation_kwargs": {"max_new_tokens": 12, "do_sample": True, "num_return_sequences": 10**6}}},
            "HeaderCapacityError",
        ),
        ({"data_configs": [dict(data_configs()[1], num_samples=500)]}, "DatasetError"),
        ({"model": {"generation_kwargs": {"max_new_tokens": 0}}}, "ConfigError"),
        ({"model": {"generation_kwargs": {"max_new_tokens": 12, "num_return_sequences": 2}}}, "ConfigError"),
    ],
    ids=["header-budget", "dataset-shortfall", "max-new-tokens", "greedy-with-several-sequences"],
)
def test_model_free_checks_fail_before_the_teacher_loads(
    tmp_path: Path, tiny_teacher_dir: Path, monkeypatch: pytest.MonkeyPatch, change: dict[str, Any], error: str
) -> None:
    import gencache.generation.teacher

    def load_teacher(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the teacher was loaded before a model-free check failed")

    monkeypatch.setattr(gencache.generation.teacher, "load_teacher", load_teacher)
    if "model" in change:
        change = {
            "model": {"model_path": str(tiny_teacher_dir), "dtype": "float32", "device": "cpu", **change["model"]}
        }
    config = write_config(tmp_path, tiny_teacher_dir, tmp_path / "out", **change)
    with pytest.raises(GencacheError) as caught:
        generate(config)
    assert type(caught.value).__name__ == error
    assert sorted(p.name for p in tmp_path.iterdir()) == [config.name]


def test_sampled_runs_are_reproducible_from_the_seed(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    sampling = {"max_new_tokens": 12, "do_sample": True, "temperature": 1.5, "num_return_sequences": 2}
    model = {"model_path": str(tiny_teacher_dir), "dtype": "float32", "device": "cpu", "generation_kwargs": sampling}
    runs = [
        generate(write_config(tmp_path, tiny_teacher_dir, tmp_path / name, model=model, seed=seed))
        for name, seed in (("a", 5), ("b", 5), ("c", 6))
    ]
    assert all(run is not None for run in runs)
    a, b, c = (entries(run) for run in runs if run is not None)
    assert a == b
    assert a != c
    assert all(len(entry["sequences"]) == 2 for entry in a.values())


@pytest.mark.parametrize(
    "edit",
    [
        lambda r: r["config"].update(seed=r["config"]["seed"] + 1),
        lambda r: r["generation"].update(max_new_tokens=r["generation"]["max_new_tokens"] + 1),
        lambda r: r["config"]["data_configs"][0].update(seed=7),
    ],
)
def test_verify_fails_when_the_resolved_config_is_edited(published: Path, tmp_path: Path, edit: Any) -> None:
    from gencache.artifact.manifest import json_file_bytes

    copy = tmp_path / "copy"
    shutil.copytree(published, copy)
    for name in os.listdir(copy):
        os.chmod(copy / name, 0o644)
    resolved = json.loads((copy / "resolved_config.json").read_text(encoding="utf-8"))
    assert verify(copy) == []
    edit(resolved)
    (copy / "resolved_config.json").write_bytes(json_file_bytes(resolved))  # still canonical JSON
    assert any("does not match its resolved_digest" in problem for problem in verify(copy))
