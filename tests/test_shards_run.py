"""`gencache generate --shards N`: every shard in one process, each published when done; after a kill -9 the same
command regenerates only what is missing, entry for entry as an uninterrupted run, leaving finished shards alone."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

import gencache
from gencache.artifact.mixture import open_caches
from gencache.artifact.names import shard_dir_name
from gencache.artifact.publish import clean
from gencache.artifact.reader import CacheReader
from gencache.cli.app import run as cli_run
from support.config_factory import hotpot_qa, musique
from support.config_factory import write_config as factory_config
from test_generate_signals import Child

COUNT = 4


def shard_path(base: Path, index: int, count: int) -> Path:
    """The directory of shard ``index`` of ``count`` of the output ``base``."""
    return Path(shard_dir_name(str(base), index, count))


def write_config(tmp_path: Path, teacher: Path) -> Path:
    """Six MuSiQue and six HotpotQA samples: enough keys for every shard."""
    hotpot = hotpot_qa()
    return factory_config(tmp_path, teacher, name="config.json", data_configs=[musique(num_samples=6), hotpot])


def inodes(directory: Path) -> dict[str, int]:
    return {name: os.stat(directory / name).st_ino for name in ["", *sorted(os.listdir(directory))]}


def content(directory: Path) -> dict[str, Any]:
    reader = CacheReader(directory)
    return {
        key: ([s.tolist() for s in reader[key].sequences], reader[key].texts, reader[key].finish_reasons)
        for key in reader
    }


@pytest.mark.slow
def test_kill_9_during_shard_2_of_4_then_rerun(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    assert gencache.generate(config, shards=COUNT, output_dir=tmp_path / "reference") == tmp_path / "reference"
    reference = [shard_path(tmp_path / "reference", i, COUNT) for i in range(COUNT)]
    assert all(len(CacheReader(p)) for p in reference)  # every shard published, each owns keys

    child = Child(config, ["--shards", str(COUNT)])
    child.run_until("temp_created", 3)  # shard 2's build began
    os.write(child.go_w, b"g")
    child.run_until("appended", 1)  # and wrote an entry
    child.proc.kill()
    assert child.finish() == -signal.SIGKILL
    out = tmp_path / "out"
    done = [shard_path(out, i, COUNT) for i in range(2)]
    assert all(p.is_dir() for p in done)
    assert not shard_path(out, 2, COUNT).exists() and not shard_path(out, 3, COUNT).exists()
    before = {p: inodes(p) for p in done}

    notices: list[str] = []
    gencache.generate(config, shards=COUNT, notify=lambda level, text: notices.append(text))
    assert [n for n in notices if "already published and verified" in n] == [
        f"already published and verified: {path}" for path in done
    ]
    published = [shard_path(out, i, COUNT) for i in (2, 3)]
    assert [n.split(" (")[0] for n in notices if n.startswith("published ")] == [f"published {p}" for p in published]
    assert {p: inodes(p) for p in done} == before  # untouched: same inodes
    for index in range(COUNT):
        assert content(shard_path(out, index, COUNT)) == content(reference[index])
        ours = json.loads((shard_path(out, index, COUNT) / "manifest.json").read_text(encoding="utf-8"))
        theirs = json.loads((reference[index] / "manifest.json").read_text(encoding="utf-8"))
        assert ours["entries"] == theirs["entries"] and ours["summary"] == theirs["summary"]
    mixture = open_caches(out)
    assert set(mixture.keys()) == set(open_caches(tmp_path / "reference").keys())
    # the killed build's temporary directory is dead (its lock is free): clean removes it
    assert len(clean(tmp_path)) == 1
    # a third run has nothing left to do
    notices.clear()
    gencache.generate(config, shards=COUNT, notify=lambda level, text: notices.append(text))
    assert sum("already published and verified" in n for n in notices) == COUNT
    assert not any(n.startswith("published ") for n in notices)
    assert cli_run(["verify", str(out)]) == 0


@pytest.mark.slow
def test_sigterm_between_shards_names_what_was_published(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    child = Child(config, ["--shards", "2"])
    child.run_until("temp_created", 2)
    child.proc.send_signal(signal.SIGTERM)
    child.release()
    assert child.finish() == 143
    first = shard_path(tmp_path / "out", 0, 2)
    assert first.is_dir() and not shard_path(tmp_path / "out", 1, 2).exists()
    assert f"published: {first}" in child.stderr and "Rerun the same command" in child.stderr
    assert "nothing was published" not in child.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130)])  # SIGTERM: between shards, above
def test_a_signal_right_after_the_rename_says_it_was_published(
    tmp_path: Path, tiny_teacher_dir: Path, signum: int, code: int
) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    child = Child(config)
    child.run_until("renamed")
    child.proc.send_signal(signum)
    child.release()
    assert child.finish() == code
    assert "was published; the artifact is complete" in child.stderr
    assert "nothing was published" not in child.stderr
    assert cli_run(["verify", str(tmp_path / "out")]) == 0


def test_shards_and_shard_together_are_refused(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    assert cli_run(["generate", str(config), "--shards", "2", "--shard", "0/2"]) == 2
    assert cli_run(["generate", str(config), "--shards", "0"]) == 2
    assert sorted(os.listdir(tmp_path)) == ["config.json"]


@pytest.mark.parametrize("count", [3])
def test_dry_run_with_shards_lists_each_shard(
    tmp_path: Path, tiny_teacher_dir: Path, count: int, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    assert cli_run(["generate", str(config), "--shards", str(count), "--dry-run"]) == 0
    err = capsys.readouterr().out
    for index in range(count):
        assert f"shard {index}/{count} (--shards)" in err
    assert not (tmp_path / "out").exists()


def test_a_second_split_beside_a_finished_one_is_refused_before_the_teacher(
    tmp_path: Path, tiny_teacher_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a finished --shards 2 run, --shards 3, a launcher of 3 processes and an unsplit run of the same
    output path are refused (exit 2, dry run alike) naming the existing split and the fix; nothing is written."""
    config = write_config(tmp_path, tiny_teacher_dir)
    assert cli_run(["generate", str(config), "--shards", "2"]) == 0
    capsys.readouterr()
    before = sorted(os.listdir(tmp_path))
    existing = "already has a 2-way split (2 of its 2 directories, out-shard-00000-of-00002, ...)"
    for args, env in (
        (["--shards", "3"], {}),
        (["--shards", "3", "--dry-run"], {}),
        ([], {"WORLD_SIZE": "3", "RANK": "1"}),
        (["--dry-run"], {"WORLD_SIZE": "3", "RANK": "1"}),
        ([], {}),
        (["--dry-run"], {}),
    ):
        with monkeypatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            assert cli_run(["generate", str(config), *args]) == 2, args
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and existing in errors[0] and "rerun with --shards 2" in errors[0], err
        ours = "write a 3-way split (out-shard-*-of-00003) beside it" if env or args[:1] == ["--shards"] else "itself"
        assert ours in errors[0], errors[0]
        assert sorted(os.listdir(tmp_path)) == before
    assert cli_run(["generate", str(config), "--shards", "2", "--dry-run"]) == 0


def test_a_stop_as_the_build_releases_its_lock_still_names_the_artifact_published(
    tmp_path: Path, tiny_teacher_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build's exit (its lock released) runs after the rename: a stop landing there names the artifact as
    published and complete (it is), not 'nothing was published', which would send the user to a rerun that fails."""
    from gencache.artifact import writer
    from gencache.artifact.reader import verify
    from gencache.core.errors import Stopped
    from gencache.run.api import generate

    release = writer.release_lock

    def release_then_stop(*args: object) -> None:
        release(*args)  # type: ignore[arg-type]
        raise Stopped("SIGINT")

    monkeypatch.setattr(writer, "release_lock", release_then_stop)
    config = write_config(tmp_path, tiny_teacher_dir)
    with pytest.raises(Stopped) as stopped:
        generate(config)
    out = tmp_path / "out"
    assert verify(out) == []
    assert "nothing was published" not in str(stopped.value)
    assert str(out) in str(stopped.value) and "published" in str(stopped.value)
