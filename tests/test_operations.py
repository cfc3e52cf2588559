"""Operating gencache: fast plain failures (hub unreachable, missing directories, bad files and paths, context
length), a dry run that makes the same checks as generate, command-line overrides and bad-input exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gencache.artifact.reader import CacheReader, read_resolved_config
from gencache.cli.app import run as cli_run
from gencache.config import load_config
from gencache.core.errors import FormatError, GencacheError, InputProblems
from gencache.data.recipes import sample_source
from gencache.data.samples import build_samples
from gencache.run import preflight
from gencache.run.plan import Overrides
from gencache.run.preflight import plan_run
from support.config_factory import hotpot_qa, musique, write_config
from support.storage_helpers import make_entries, writable_copy, write_artifact


def online_env(tmp_path: Path) -> dict[str, str]:
    """A child environment where the libraries are not told to be offline and the hub endpoint refuses
    connections (a closed local port), with an empty hub cache: the hub is really unreachable."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
    }
    return env | {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf-home")}


#: ``python -m gencache`` with huggingface_hub's retries of an unreachable hub made without their waits (1, 2, 4, 8
#: and 8 s, 23 s a lookup); the retries, their log lines and the error they end in are still the library's own.
WITHOUT_BACKOFF_WAITS = (
    "import runpy, types, huggingface_hub.utils._http as http\n"
    "http.time = types.SimpleNamespace(sleep=lambda seconds: None)\n"
    "runpy.run_module('gencache', run_name='__main__', alter_sys=True)\n"
)


def gencache(
    args: list[str], env: dict[str, str] | None = None, start: tuple[str, ...] = ("-m", "gencache")
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *start, *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


# -- fail fast and plainly -------------------------------------------------------------------------------------
def test_an_unreachable_hub_is_one_line_naming_the_id(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    env = online_env(tmp_path)
    config = write_config(tmp_path, "some-org/some-model")
    result = gencache(["generate", str(config)], env, ("-c", WITHOUT_BACKOFF_WAITS))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr  # one line: no retry or library log lines
    assert "model.model_path 'some-org/some-model' is a hub id" in result.stderr
    assert "HF_HUB_OFFLINE=1" in result.stderr and "local path" in result.stderr
    # a hub dataset (no source) with a local teacher: the dataset id is named
    hub_data = write_config(tmp_path, tiny_teacher_dir, data_configs=[musique(source=None)])
    result = gencache(["generate", str(hub_data), "--dry-run"], env, ("-c", WITHOUT_BACKOFF_WAITS))
    assert result.returncode == 2
    assert "Retrying" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "hub dataset" in errors[0] and "set source to a local copy" in errors[0]
    assert not (tmp_path / "out").exists()


def test_a_missing_local_model_or_tokenizer_directory_is_named(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no" / "such-teacher"
    assert cli_run(["generate", str(write_config(tmp_path, missing))]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"error: model.model_path {missing} does not exist; fix the path or give a hub id."
    )
    model = {"model_path": str(tiny_teacher_dir), "tokenizer_path": str(missing), "device": "cpu"}
    assert cli_run(["generate", str(write_config(tmp_path, tiny_teacher_dir, model=model))]) == 2
    err = capsys.readouterr().err
    assert f"model.tokenizer_path {missing} does not exist" in err and "Repo id" not in err


def test_dataset_files_that_are_not_utf8_or_empty_are_refused(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    shutil.copytree(sample_source("musique"), data)
    train = data / "train.jsonl"
    train.write_bytes(train.read_bytes() + b'{"id": "bad \xff row"}\n')  # the last row: never sampled
    config = write_config(tmp_path, tiny_teacher_dir, data_configs=[musique(source=str(data))])
    assert cli_run(["generate", str(config)]) == 2
    err = capsys.readouterr().err
    assert "is not valid UTF-8" in err and str(train) in err and "internal error" not in err
    train.write_bytes(b"")
    assert cli_run(["generate", str(config), "--dry-run"]) == 2
    assert f"{train} is empty" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_paths_that_are_not_utf8_are_refused_before_the_model_loads(
    tmp_path: Path, tiny_teacher_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    bad = os.fsdecode(str(tmp_path).encode() + b"/out-\xff")
    assert cli_run(["generate", str(config), "--output-dir", bad]) == 2
    assert "is not valid UTF-8" in capsys.readouterr().err
    weird = os.fsdecode(str(tmp_path).encode() + b"/cwd-\xfe")
    os.mkdir(weird)
    monkeypatch.chdir(weird)
    assert cli_run(["generate", str(config)]) == 2
    assert "working directory" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == sorted([config.name, os.path.basename(weird)])


def test_max_new_tokens_beyond_the_context_is_refused_by_generate_and_the_dry_run(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    too_long = ["--set", "model.generation_kwargs.max_new_tokens=100000"]
    assert cli_run(["generate", str(config), *too_long]) == 2
    err = capsys.readouterr().err
    assert "beyond the teacher's 4096 positions" in err and "lower max_new_tokens to at most" in err
    assert cli_run(["generate", str(config), *too_long, "--dry-run"]) == 2
    assert "beyond the teacher's 4096 positions" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# -- the dry run -------------------------------------------------------------------------------------------
def test_the_dry_run_fails_where_generate_fails(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unwritable = write_config(tmp_path, tiny_teacher_dir, output_dir="/proc/gencache-test/out")
    cases = [(unwritable, "/proc")]
    import torch

    if not torch.cuda.is_available():
        gpu = {"model_path": str(tiny_teacher_dir), "dtype": "float32", "device": "cuda:0"}
        cases.append((write_config(tmp_path, tiny_teacher_dir, model=gpu), "model.device 'cuda:0'"))
    for config, message in cases:
        assert cli_run(["generate", str(config), "--dry-run"]) == 2
        assert message in capsys.readouterr().err
        assert cli_run(["generate", str(config)]) == 2
        assert message in capsys.readouterr().err


def test_without_a_tokenizer_the_dry_run_checks_the_rest_and_says_what_it_could_not_compute(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_tokenizer = tmp_path / "no-tokenizer-files"
    no_tokenizer.mkdir()
    model = {"model_path": str(tiny_teacher_dir), "tokenizer_path": str(no_tokenizer), "device": "cpu"}
    config = write_config(tmp_path, tiny_teacher_dir, model=model, data_configs=[musique(template="tokenizer_chat")])
    assert cli_run(["generate", str(config), "--dry-run"]) == 2
    captured = capsys.readouterr()
    err = captured.err + captured.out  # the report on stdout, the errors on stderr; never wrapped
    assert "model.tokenizer_path" in err
    assert "musique: 4 samples, 4 unique keys" in err  # the data was still loaded and counted
    assert "not computed:" in err and "prompt token counts" in err and "the header budget" in err


def test_show_prompt_prints_the_rendered_parts_and_token_count(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    assert cli_run(["generate", str(config), "--show-prompt", "1"]) == 0
    err = " ".join(capsys.readouterr().out.split())  # on stdout: `> file` keeps it
    samples = build_samples(load_config(config), tokenizer=None)
    assert "prompt 1: data_configs[0] sample 1" in err and f"key {samples[1].key}" in err
    assert "-- part 0" in err and " tokens" in err
    assert " ".join(samples[1].query.split()) in err
    assert cli_run(["generate", str(config), "--show-prompt", "99"]) == 2
    assert not (tmp_path / "out").exists()


def test_show_prompt_shows_the_prompt_after_the_cache_exists_and_the_dry_run_still_reports_the_output(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    assert cli_run(["generate", str(config)]) == 0
    published = sorted(os.listdir(tmp_path / "out"))
    capsys.readouterr()
    assert cli_run(["generate", str(config), "--show-prompt", "1"]) == 0
    captured = capsys.readouterr()
    assert "prompt 1: data_configs[0] sample 1" in " ".join(captured.out.split()) and "error" not in captured.err
    assert cli_run(["generate", str(config), "--show-prompt", "1", "--raw"]) == 0
    assert json.loads(capsys.readouterr().out)["index"] == 1
    assert sorted(os.listdir(tmp_path / "out")) == published and sorted(os.listdir(tmp_path)) == [config.name, "out"]
    assert cli_run(["generate", str(config), "--dry-run", "--show-prompt", "1"]) == 2
    assert "already exists" in capsys.readouterr().err


def test_dry_run_shows_as_a_flag_in_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gencache", "generate", "--help"],
        capture_output=True,
        text=True,
        env=os.environ | {"COLUMNS": "200"},
        check=True,
    )
    line = next(line for line in result.stdout.splitlines() if "--dry-run" in line)
    assert "<bool>" not in line


# -- overrides -----------------------------------------------------------------------------------------------
def test_set_output_dir_and_limit_are_applied_validated_and_recorded(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    config = write_config(tmp_path, tiny_teacher_dir, data_configs=[musique(num_samples=5)])
    out = tmp_path / "elsewhere"
    args = ["--set", "model.generation_kwargs.max_new_tokens=4", "--set", "gen_batch_size=3", "--output-dir", str(out)]
    assert cli_run(["generate", str(config), *args, "--limit", "3"]) == 0
    resolved = read_resolved_config(out)
    assert resolved["config"]["gen_batch_size"] == 3 and resolved["generation"]["max_new_tokens"] == 4
    assert resolved["config"]["data_configs"][0]["num_samples"] == 3
    assert resolved["overrides"] == {
        "set": ["model.generation_kwargs.max_new_tokens=4", "gen_batch_size=3"],
        "output_dir": str(out),
        "limit": 3,
    }
    assert not (tmp_path / "out").exists()


def test_limit_keeps_a_prefix_of_the_full_selection(tmp_path: Path) -> None:
    hotpot = hotpot_qa()
    config = write_config(tmp_path, tmp_path / "teacher", data_configs=[musique(num_samples=6), hotpot])
    full, limited = build_samples(load_config(config)), build_samples(plan_run(config, Overrides(limit=2)).config)
    for index in (0, 1):
        keys = [s.key for s in full if s.data_config_index == index]
        assert [s.key for s in limited if s.data_config_index == index] == keys[:2]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("gen_batch_size=0", "error: --set gen_batch_size=0: "),
        ("model.no_such_field=1", "error: --set model.no_such_field=1: "),
        ("data_configs.5.num_samples=1", "error: --set data_configs.5.num_samples=1: data_configs.5 does not exist"),
        ("novalue", "error: --set 'novalue' must look like PATH=VALUE"),
    ],
)
def test_a_bad_set_is_named(tmp_path: Path, override: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, tmp_path / "teacher")
    assert cli_run(["generate", str(config), "--set", override, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and len(err.splitlines()) == 1


def test_a_nested_set_typo_is_named_after_the_set_in_the_dry_runs_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, tmp_path / "teacher")
    override = "model.generation_kwrgs.max_new_tokens=8"
    assert cli_run(["generate", str(config), "--set", override, "--dry-run", "--json"]) == 2
    (problem,) = json.loads(capsys.readouterr().out)["problems"]
    assert problem["origin"] == f"--set {override}" and problem["location"] == "model.generation_kwrgs"
    assert problem["message"].startswith(f"--set {override}: model.generation_kwrgs: unknown field")


def test_a_set_whose_value_a_later_check_refuses_is_named_in_that_problem(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Problems found once the config validated (the data files', the teacher's) at a location a --set wrote are
    named after it too, in the message and as the problem's origin."""
    config = write_config(tmp_path, tiny_teacher_dir)
    for override, location in (
        ("data_configs.0.num_samples=99", "data_configs[0].num_samples"),
        ("model.generation_kwargs.max_new_tokenz=3", "model.generation_kwargs.max_new_tokenz"),
        ("model.generation_kwargs.max_new_tokens=100000", "model.generation_kwargs.max_new_tokens"),
    ):
        assert cli_run(["generate", str(config), "--set", override, "--dry-run", "--json"]) == 2
        (problem,) = json.loads(capsys.readouterr().out)["problems"]
        assert problem["location"] == location and problem["origin"] == f"--set {override}", problem
        assert problem["message"].startswith(f"--set {override}: "), problem
    assert cli_run(["generate", str(config), "--set", "model.generation_kwargs.max_new_tokens=100000"]) == 2
    assert capsys.readouterr().err.startswith("error: --set model.generation_kwargs.max_new_tokens=100000: ")


def test_two_bad_sets_are_two_problems_each_named_after_its_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, tmp_path / "teacher")
    args = ["--set", "gen_batch_size=0", "--set", "model.dtype=float8", "--set", "seed=7"]
    assert cli_run(["generate", str(config), *args, "--dry-run"]) == 2
    lines = sorted(line for line in capsys.readouterr().err.splitlines() if line.startswith("error:"))
    assert len(lines) == 2  # seed=7 is fine: no problem names it
    assert lines[0].startswith(
        "error: --set gen_batch_size=0: gen_batch_size: input should be greater than or equal to 1"
    )
    assert lines[1].startswith("error: --set model.dtype=float8: model.dtype: input should be")


_MODEL = '{"model_path": "t", "dtype": "f9"}'


@pytest.mark.parametrize(
    ("change", "overrides", "expected", "alone"),
    [
        pytest.param(
            {"gen_batch_size": 0},
            Overrides(sets=("model.dtype=float32",)),
            [("gen_batch_size", "{config}: gen_batch_size: input should be greater than or equal to 1")],
            [0],
            id="the file's own",
        ),
        pytest.param(
            {},
            Overrides(sets=("model.dtype=float8", f"model={_MODEL}")),
            [("model.dtype", f"--set model={_MODEL}: model.dtype: input should be")],
            [0],
            id="a replaced object",
        ),
        pytest.param(
            {},
            Overrides(sets=('data_configs.0={"dataset_name": "musique"}',)),
            [
                (
                    f"data_configs[0].{name}",
                    f'--set data_configs.0={{"dataset_name": "musique"}}: data_configs[0].{name}: is',
                )
                for name in ("num_samples", "num_data_strs", "num_shots", "subset")
            ],
            [],
            id="a replaced list item",
        ),
        pytest.param(
            {},
            Overrides(sets=("data_configs.0.seed=x",)),
            [
                (
                    "data_configs[0].seed",
                    "--set data_configs.0.seed=x: data_configs[0].seed: input should be a valid integer",
                )
            ],
            [],
            id="a list item's field",
        ),
        pytest.param(
            {"engine": "vllm", "engine_options": {"max_num_seqs": 4}},
            Overrides(sets=("engine=transformers",)),
            [
                (
                    "engine_options.max_num_seqs",
                    "--set engine=transformers: engine_options.max_num_seqs: unknown field (allowed: none)",
                )
            ],
            [0],
            id="a field checked against the set one",
        ),
        pytest.param(
            {},
            Overrides(sets=("model.generation_kwrgs.max_new_tokens=8", "data_configs.0.data_kwrgs.query=q")),
            [
                (
                    "model.generation_kwrgs",
                    "--set model.generation_kwrgs.max_new_tokens=8: model.generation_kwrgs: unknown field",
                ),
                (
                    "data_configs[0].data_kwrgs",
                    "--set data_configs.0.data_kwrgs.query=q: data_configs[0].data_kwrgs: unknown field",
                ),
            ],
            [],
            id="an object a set created on its way",
        ),
        pytest.param(
            {},
            Overrides(output_dir="", limit=0),
            [
                ("--limit", "--limit must be a positive number of samples, got 0."),
                ("output_dir", "--output-dir : output_dir: string should have at least 1 character"),
            ],
            [0],
            id="output-dir and limit",
        ),
    ],
)
def test_each_problem_is_named_after_the_override_whose_path_holds_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    change: dict[str, Any],
    overrides: Overrides,
    expected: list[tuple[str, str]],
    alone: list[int],
) -> None:
    config = write_config(tmp_path, tmp_path / "teacher", **change)
    read, checked = preflight._data_config, []
    monkeypatch.setattr(preflight, "_data_config", lambda index, dc: (checked.append(index), read(index, dc))[1])
    with pytest.raises(GencacheError) as info:
        plan_run(config, overrides)
    problems = info.value.problems if isinstance(info.value, InputProblems) else [info.value.problem]
    found = [(problem.location, str(problem.error)) for problem in problems]
    assert len(found) == len(expected)
    for problem in problems:  # the origin as data: what the message starts with
        assert problem.origin is not None and str(problem.error).startswith(problem.origin)
    for (location, message), (want_location, want) in zip(found, expected, strict=True):
        assert location == want_location and message.startswith(want.replace("{config}", str(config))), message
    assert checked == alone  # what validates on its own is checked anyway


def test_a_later_set_fixes_an_earlier_one(tmp_path: Path) -> None:
    config = write_config(tmp_path, tmp_path / "teacher")
    assert plan_run(config, Overrides(sets=("gen_batch_size=0", "gen_batch_size=3"))).config.gen_batch_size == 3


# -- exit codes and what inspect / verify say about things that are not artifacts ------------------------------
def test_paths_that_are_not_artifacts_are_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parent = tmp_path / "artifacts"
    for name in ("a", "b"):
        write_artifact(parent / name, make_entries(2))
    for command in (["inspect"], ["verify"], ["verify", "--json"], ["inspect", "--json"]):
        assert cli_run([*command, str(tmp_path / "missing")]) == 2
        captured = capsys.readouterr()
        assert "does not exist" in captured.out + captured.err
        assert cli_run([*command, str(parent)]) == 2
        captured = capsys.readouterr()
        assert "parent directory of 2 artifact(s): a, b" in captured.out + captured.err
    temp = parent / ".c.gencache-host-123-0123abcd"
    temp.mkdir()
    assert cli_run(["inspect", str(temp)]) == 2
    assert f"gencache clean {parent}" in capsys.readouterr().err
    assert cli_run(["verify", "--json", str(parent / "a")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {"ok": True, "results": [{"path": str(parent / "a"), "status": "ok", "problems": []}]}
    (tmp_path / "file").write_text("x")
    assert cli_run(["demo", "--workdir", str(tmp_path / "file")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_messages_are_one_line_on_stderr_whatever_the_width(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "30")  # a narrow terminal guess must not wrap or cut anything
    missing = tmp_path / ("a-rather-long-directory-name-" * 4) / "missing"
    assert cli_run(["inspect", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(missing) in lines[0]
    assert "does not exist" in lines[0]


@pytest.mark.parametrize("where", ["provenance", "tensor name"])
def test_a_surrogate_escape_in_a_manifest_is_a_printable_fail(tmp_path: Path, where: str) -> None:
    good = write_artifact(tmp_path / "good", make_entries(2))
    bad = writable_copy(good, tmp_path / "bad")
    manifest = (bad / "manifest.json").read_text(encoding="utf-8")
    if where == "provenance":
        manifest = manifest.replace('"tiny/teacher"', '"tiny/\\ud800teacher"', 1)
    else:
        key = make_entries(1)[0].key
        manifest = manifest.replace(f'"{key}.0"', f'"{key}.\\ud800"', 1)
    (bad / "manifest.json").write_text(manifest, encoding="utf-8")
    with pytest.raises(FormatError):  # the provenance at open, an entry on its first read
        CacheReader(bad)[make_entries(1)[0].key]
    result = gencache(["verify", str(bad)])
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("FAIL ") and "internal error" not in result.stdout + result.stderr
    inspected = gencache(["inspect", str(bad)])  # reads no entry: only a damaged provenance fails it
    assert inspected.returncode == (1 if where == "provenance" else 0), inspected.stderr
    assert "internal error" not in inspected.stdout + inspected.stderr


def test_the_progress_of_a_sharded_run_counts_the_whole_run_and_names_the_shard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    from gencache.cli.render import RunProgress
    from gencache.core.progress import StagedProgress

    stream = io.StringIO()
    now = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    bar = StagedProgress(RunProgress(0, stream=stream), 10)
    bar.stage("shard 1/2")
    bar.start(4)  # the engine starts each shard with that shard's prompt count
    for _ in range(4):
        now[0] += 1
        bar.advance(1, 3)
    bar.stage("shard 2/2")
    bar.start(6)
    bar.advance(1, 3)
    bar.close()
    bar.close()  # once: a second close does nothing
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("gencache: generate [shard 1/2]: 0/10 samples")
    assert lines[-1].startswith("gencache: generate [shard 2/2]: 5/10 samples (50.0%), 15 tokens")


@pytest.mark.parametrize("what", ["file", "empty directory", "/dev/null"])
def test_inspect_verify_and_export_of_what_is_not_an_artifact_are_bad_input(
    what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if what == "file":
        path = tmp_path / "file"
        path.write_text("x")
    elif what == "empty directory":
        path = tmp_path / "empty"
        path.mkdir()
    else:
        path = Path("/dev/null")
    for command in (["inspect"], ["verify"], ["export", "--out", str(tmp_path / "out.jsonl")]):
        assert cli_run([*command, str(path)]) == 2, command
        captured = capsys.readouterr()
        assert "is not an artifact" in captured.out + captured.err
    assert not (tmp_path / "out.jsonl").exists()


def test_a_recipe_warning_is_one_warning_line_without_a_source_path(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import warnings

    hotpot = {
        "dataset_name": "hotpot_qa",
        "num_samples": 2,
        "num_data_strs": 0,
        "num_shots": 1,
        "subset": "fullwiki",
        "split": "train",
        "source": str(sample_source("hotpot_qa")),
        "data_kwargs": {"difficulty": ["easy", "medium", "hard"]},
    }
    config = write_config(tmp_path, tiny_teacher_dir, data_configs=[hotpot])
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert cli_run(["generate", str(config), "--dry-run"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "few_shot_str" in line]
    assert lines == ["warning: few_shot_str is not recommended for HotpotQA"]


def test_show_prompt_raw_prints_the_exact_text_and_ids_as_json(
    tmp_path: Path, tiny_teacher_dir: Path, tiny_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    assert cli_run(["generate", str(config), "--show-prompt", "1", "--raw"]) == 0
    shown = json.loads(capsys.readouterr().out)
    samples = build_samples(load_config(config), tokenizer=tiny_tokenizer)
    assert shown["key"] == samples[1].key and shown["prompt"] == samples[1].prompt_text
    assert shown["input_ids"] == list(samples[1].input_ids or ())
    assert cli_run(["generate", str(config), "--raw"]) == 2
    assert "--raw goes with --show-prompt" in capsys.readouterr().err


def test_sigint_after_the_command_finished_exits_with_its_code_and_no_traceback() -> None:
    # A worker thread of an engine may still wind down at interpreter exit after the artifact was published.
    code = (
        "import os, signal, threading, time\n"
        "from gencache.cli.signals import quiet_exit\n"
        "threading.Thread(target=time.sleep, args=(30,)).start()  # a non-daemon thread joined at exit\n"
        "quiet_exit(0)\n"
        "threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and "Traceback" not in result.stderr and "KeyboardInterrupt" not in result.stderr


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_while_the_interpreter_tears_down_keeps_the_command_s_code(signame: str) -> None:
    # Python hands the signals back to the system's default before it destroys its modules (torch's take a
    # while): a signal then must not kill the finished command (a status of -2 or -15).
    code = (
        "import os, signal, time\n"
        "from gencache.cli.signals import quiet_exit\n"
        "class Late:\n"
        f"    def __del__(self, kill=os.kill, pid=os.getpid(), signum=signal.{signame}, sleep=time.sleep):\n"
        "        kill(pid, signum)  # a module's object destroyed at teardown\n"
        "        sleep(0.2)\n"
        "late = Late()\n"
        "quiet_exit(0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and result.stderr == ""


@pytest.mark.parametrize(
    ("value", "is_path"),
    [
        ("a/b/c", True),
        ("models/", True),
        ("data/train.jsonl", True),
        ("train.parquet", True),
        ("./x", True),
        ("~/x", True),
        ("org/name", False),
        ("name", False),
        ("Qwen/Qwen3-8B", False),
    ],
)
def test_one_rule_says_what_is_a_local_path_for_models_and_datasets(value: str, is_path: bool) -> None:
    from gencache.config import looks_like_path
    from gencache.core.errors import DatasetError
    from gencache.data.sources import classify_source

    assert looks_like_path(value) is is_path
    if is_path:  # a dataset source that looks like a path is a path (missing here), never a hub id
        with pytest.raises(DatasetError):
            classify_source(value, "hub/id")
    else:
        assert classify_source(value, "hub/id") == ("hub", value)


def test_run_messages_read_in_order_with_sub_second_durations_and_zero_based_shards(
    tmp_path: Path, tiny_teacher_dir: Path
) -> None:
    from gencache.run.api import generate

    events: list[str] = []

    class Recorder:
        def __init__(self, total: int) -> None:
            self.label = ""

        def start(self, total_samples: int) -> None:
            events.append("start")

        def advance(self, samples: int, tokens: int) -> None:
            pass

        def set_label(self, label: str) -> None:
            events.append(f"label {label}")

        def close(self) -> None:
            events.append("close")

    config = write_config(tmp_path, tiny_teacher_dir)
    generate(config, shards=2, notify=lambda level, text: events.append(text), progress=Recorder)
    loaded = next(e for e in events if e.startswith("teacher loaded in"))
    assert loaded.endswith((" ms", "s")) and "0.0s" not in loaded  # a tiny teacher loads in milliseconds
    assert [e for e in events if e.startswith("label")] == ["label shard 0/2", "label shard 1/2"]
    last_published = max(i for i, e in enumerate(events) if e.startswith("published"))
    assert events.index("close") < last_published  # the bar's final line comes before the last word
