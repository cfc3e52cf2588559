"""``gencache audit``: stored answers regenerated one prompt at a time on the tiny teacher (float32, CPU) and compared
token for token; greedy and sampled runs of both transformers engines audit equal, a cache made by a perturbed
teacher is caught with its divergence positions, and bad input is refused before any weights load."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import gencache
from gencache.cli.app import run as cli_run
from gencache.core.errors import ConfigError
from gencache.data.recipes import sample_source
from gencache.run.audit import select_keys
from support.config_factory import musique, write_config

SAMPLED = {
    "max_new_tokens": 6,
    "do_sample": True,
    "temperature": 1.2,
    "top_p": 0.9,
    "top_k": 30,
    "num_return_sequences": 3,
}


def _model(teacher: Path, **generation: Any) -> dict[str, Any]:
    return {
        "model_path": str(teacher),
        "dtype": "float32",
        "device": "cpu",
        "generation_kwargs": {"max_new_tokens": 6, **generation},
    }


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audit")


@pytest.fixture(scope="module")
def greedy_artifact(work: Path, tiny_teacher_dir: Path) -> Path:
    config = write_config(
        work, tiny_teacher_dir, model=_model(tiny_teacher_dir), gen_batch_size=4, output_dir=str(work / "greedy")
    )
    return gencache.generate(config)


def test_a_greedy_cache_audits_equal_and_nothing_is_written_into_it(
    greedy_artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _snapshot(greedy_artifact)
    report_file = tmp_path / "audit.json"
    assert cli_run(["audit", str(greedy_artifact), "--all", "--report", str(report_file)]) == 0
    out = capsys.readouterr().out
    assert "4 equal, 0 differing" in out and out.count("equal    ") == 4
    document = json.loads(report_file.read_text(encoding="utf-8"))
    assert document["ok"] is True and document["audited"] == document["equal"] == 4
    assert document["engine"] == "transformers" and document["dtype"] == "float32" and not document["sampled"]
    assert all(key["first_difference"] is None for key in document["keys"])
    assert _snapshot(greedy_artifact) == before
    assert cli_run(["audit", str(greedy_artifact), "--report", str(greedy_artifact / "audit.json")]) == 2
    assert "immutable" in capsys.readouterr().err
    assert cli_run(["audit", str(greedy_artifact), "--report", "/"]) == 2
    assert "error: --report '/' has no name of its own" in capsys.readouterr().err
    assert _snapshot(greedy_artifact) == before


def test_the_python_api_returns_the_report_and_chooses_keys_by_seed(greedy_artifact: Path) -> None:
    report = gencache.audit(greedy_artifact, samples=2, seed=3)
    assert report.exit_code == 0 and len(report.keys) == 2 and report.total_keys == 4
    again = gencache.audit(greedy_artifact, samples=2, seed=3)
    assert [k.key for k in again.keys] == [k.key for k in report.keys]
    keys, how = select_keys(["c", "a", "b", "d"], samples=2, seed=3)
    assert keys == select_keys(["d", "b", "a", "c"], samples=2, seed=3)[0] and how == "2 keys drawn with seed 3"
    with pytest.raises(ConfigError, match="not in the artifact"):
        select_keys(["a"], keys=["zz"])
    with pytest.raises(ConfigError, match="not both"):
        select_keys(["a"], keys=["a"], all_keys=True)


@pytest.mark.parametrize("engine", ["transformers", "transformers-continuous"])
def test_sampled_caches_of_each_engine_audit_equal(
    work: Path, tiny_teacher_dir: Path, engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        work,
        tiny_teacher_dir,
        model=_model(tiny_teacher_dir, **SAMPLED),
        engine=engine,
        gen_batch_size=4,
        seed=13,
        output_dir=str(work / f"sampled-{engine}"),
    )
    artifact = gencache.generate(config)
    assert cli_run(["audit", str(artifact), "--all", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["sampled"] and document["equal"] == 4
    assert all(len(key["sequences"]) == 3 for key in document["keys"])
    assert cli_run(["audit", str(artifact), "--all", "--engine", "transformers-continuous"]) == 0


def _perturbed_teacher(teacher: Path, target: Path) -> Path:
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(teacher, target)
    weights = target / "model.safetensors"
    tensors = load_file(str(weights))
    generator = torch.Generator().manual_seed(0)
    for name in sorted(tensors):
        if name.endswith("mlp.down_proj.weight"):
            tensors[name] = tensors[name] + 0.5 * torch.randn(tensors[name].shape, generator=generator)
    save_file(tensors, str(weights), metadata={"format": "pt"})
    return target


def test_a_cache_from_a_perturbed_teacher_is_caught_with_its_divergence_positions(
    work: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    perturbed = _perturbed_teacher(tiny_teacher_dir, work / "perturbed-teacher")
    config = write_config(
        work,
        perturbed,
        model=_model(perturbed, max_new_tokens=8),
        data_configs=[musique(num_samples=6)],
        output_dir=str(work / "perturbed"),
    )
    artifact = gencache.generate(config)
    assert cli_run(["audit", str(artifact), "--all", "--model", str(tiny_teacher_dir), "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["differing"] > 0 and document["equal"] + document["differing"] == 6
    differing = [key for key in document["keys"] if not key["equal"]]
    assert all(isinstance(key["first_difference"], int) for key in differing)
    assert sum(document["first_divergence"].values()) == len(differing)
    assert cli_run(["audit", str(artifact), "--all", "--model", str(tiny_teacher_dir)]) == 1
    assert "DIFFERS  " in capsys.readouterr().out
    assert cli_run(["audit", str(artifact), "--all"]) == 0  # against the teacher that made it


def test_an_edited_source_file_is_refused_in_one_line_naming_it(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "musique"
    shutil.copytree(sample_source("musique"), data)
    config = write_config(
        tmp_path, tiny_teacher_dir, model=_model(tiny_teacher_dir), data_configs=[musique(source=str(data))]
    )
    artifact = gencache.generate(config)
    source = next(path for path in sorted(data.rglob("*")) if path.is_file())
    with source.open("ab") as handle:
        handle.write(b"\n")
    assert cli_run(["audit", str(artifact)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(source) in err
    os.remove(source)
    assert cli_run(["audit", str(artifact)]) == 2
    assert str(source) in capsys.readouterr().err


def test_bad_audit_options_are_one_line_exit_2(greedy_artifact: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, words in [
        (["--keys", "f" * 64], "not in the artifact"),
        (["--engine", "vlm"], "--engine: unknown engine 'vlm' (did you mean 'vllm'?"),
        (["--dtype", "int8"], "--dtype"),
        (["--samples", "0"], "positive integer"),
    ]:
        assert cli_run(["audit", str(greedy_artifact), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err
    assert cli_run(["audit", str(greedy_artifact.parent / "missing")]) == 2


def test_inspect_shows_what_decides_determinism_in_one_block(
    greedy_artifact: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_run(["inspect", str(greedy_artifact), "--json"]) == 0
    (artifact,) = json.loads(capsys.readouterr().out)["artifacts"]
    facts = artifact["determinism"]
    assert artifact["engine"] == "transformers" and facts["sampling"] == "greedy (no random draws)"
    assert facts["batch_invariant"] is False and facts["prefix_caching"] is False
    assert facts["attention_backend"] and facts["gpu_name"] is None and facts["tensor_parallel_size"] == 1
    assert cli_run(["inspect", str(greedy_artifact)]) == 0
    out = capsys.readouterr().out
    assert "determinism" in out and "batch-invariant kernels off" in out and "prefix caching off" in out


def test_a_shard_base_and_one_shard_audit_equal(work: Path, tiny_teacher_dir: Path) -> None:
    config = write_config(
        work,
        tiny_teacher_dir,
        model=_model(tiny_teacher_dir, **SAMPLED),
        data_configs=[musique(num_samples=6)],
        output_dir=str(work / "sharded"),
    )
    base = gencache.generate(config, shards=2)
    whole = gencache.audit(base, all_keys=True)
    assert whole.exit_code == 0 and len(whole.keys) == whole.total_keys == 6
    shard = next(base.parent.glob("sharded-shard-00001-of-00002"))
    one = gencache.audit(shard, all_keys=True)
    assert one.exit_code == 0 and 0 < len(one.keys) < 6
    assert {k.key for k in one.keys} <= {k.key for k in whole.keys}


def test_a_run_with_relative_paths_audits_from_another_directory(
    tmp_path: Path, tiny_teacher_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(tiny_teacher_dir, tmp_path / "teacher")
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path, Path("teacher"), model=_model(Path("teacher")), output_dir="out")
    artifact = gencache.generate(config)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    report = gencache.audit(tmp_path / artifact, all_keys=True)
    assert report.exit_code == 0 and len(report.keys) == 4


def _as_if_vllm_sampled(artifact: Path, target: Path) -> Path:
    """A copy of ``artifact`` whose ``resolved_config.json`` records the vllm engine (with its digest): what a run
    sampled by vLLM leaves, for an environment without vLLM."""
    from gencache.artifact.resolved import with_resolved_digest

    shutil.copytree(artifact, target)
    resolved_path = target / "resolved_config.json"
    resolved = json.loads(resolved_path.read_text(encoding="utf-8"))
    resolved["engine"]["name"] = "vllm"
    resolved_path.chmod(0o644)
    resolved_path.write_text(json.dumps(with_resolved_digest(resolved)), encoding="utf-8")
    return target


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is not None, reason="the refusal is for an environment without vLLM"
)
def test_a_vllm_sampled_cache_is_audited_with_vllm_by_default_and_refused_at_once_without_it(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    teacher = shutil.copytree(tiny_teacher_dir, tmp_path / "teacher")
    config = write_config(
        tmp_path, teacher, model=_model(teacher, **SAMPLED), seed=13, output_dir=str(tmp_path / "sampled")
    )
    artifact = _as_if_vllm_sampled(gencache.generate(config), tmp_path / "vllm-sampled")
    shutil.rmtree(teacher)  # anything that loads (the tokenizer first) would fail on this instead
    assert cli_run(["audit", str(artifact)]) == 2
    error = capsys.readouterr().err
    assert 'engine "vllm" (the run sampled with vLLM' in error and "not installed" in error, error
    assert cli_run(["audit", str(artifact), "--engine", "transformers"]) == 2  # the other sampler: refused
    assert "Audit with --engine vllm" in capsys.readouterr().err
    with pytest.raises(ConfigError, match='engine "vllm" needs the vllm package'):
        gencache.audit(artifact, engine="vllm")


def test_a_moved_or_relatively_named_teacher_is_the_same_teacher(
    tmp_path: Path,
    tiny_teacher_dir: Path,
    tiny_tokenizer: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_teacher_dir, tmp_path / "my-run" / "tiny-teacher")
    artifact = gencache.generate(
        write_config(tmp_path, "my-run/tiny-teacher", model=_model(Path("my-run/tiny-teacher")))
    )
    recorded = json.loads((artifact / "resolved_config.json").read_text(encoding="utf-8"))["model"]["identity"]
    assert recorded["model_path"] == recorded["tokenizer_path"] is not None
    reader = gencache.open_caches(artifact)

    def check(model_path: str) -> None:
        reader.check_compatible(
            model_path=model_path, tokenizer_path=model_path, dtype="float32", tokenizer=tiny_tokenizer
        )

    check("my-run/tiny-teacher")  # the very directory, as the config named it
    check(str(tmp_path / "my-run" / "tiny-teacher"))  # and absolutely
    (tmp_path / "my-run" / "tiny-teacher").rename(tmp_path / "moved-teacher")
    check("moved-teacher")  # after the move
    changed = tmp_path / "changed-teacher"
    shutil.copytree(tmp_path / "moved-teacher", changed)
    config = json.loads((changed / "config.json").read_text(encoding="utf-8"))
    (changed / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-5}), encoding="utf-8")
    with pytest.raises(gencache.CompatibilityError, match="model_path"):
        check(str(changed))  # another teacher is not recognised as this one

    assert cli_run(["audit", str(artifact), "--all"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--model NEWDIR" in err and "Repo id" not in err
    assert cli_run(["audit", str(artifact), "--all", "--model", "moved-teacher"]) == 0
    assert "4 equal, 0 differing" in capsys.readouterr().out

    assert cli_run(["export", str(artifact), "--out", "answers.jsonl"]) == 0
    err = capsys.readouterr().err
    assert "tokenizer" in err and "--tokenizer" in err and "--data-root" not in err and "Repo id" not in err
    assert cli_run(["export", str(artifact), "--out", "with-prompts.jsonl", "--tokenizer", "moved-teacher"]) == 0
    records = [json.loads(line) for line in Path("with-prompts.jsonl").read_text(encoding="utf-8").splitlines()]
    assert records and all(record["prompt"] for record in records)
