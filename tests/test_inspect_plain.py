"""``gencache inspect`` to a pipe or a file (a log, ``| grep``, a CI step): plain text without colour codes, tables
whole whatever the terminal's width, every recorded value shown as it is, ``error:``/``FAIL`` lines on stderr in
the order of the paths, and the exit code of the worst path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gencache.cli.app import run
from support.storage_helpers import (
    PROVENANCE,
    Entry,
    make_entries,
    resolved_for,
    writable_copy,
    write_artifact,
    write_shard,
)
from support.terminal_env import FORCED_COLOUR_ENV, without_terminal


@pytest.fixture(autouse=True)
def _uncoloured(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FORCED_COLOUR_ENV:
        monkeypatch.delenv(name, raising=False)


def with_determinism(path: Path, entries: list[Entry], **facts: object) -> Path:
    resolved = resolved_for(path, PROVENANCE, None)
    resolved["engine"] = {"name": "vllm", "sampling": {"scope": "per-sequence draws"}}
    resolved["runtime"] = {"determinism": {"batch_invariant": True, "prefix_caching": None, **facts}}
    resolved["samples"] = {"conflicting_prompts": 2}
    summary = {"duplicates": 4, "data_configs": [{"index": 0, "samples": len(entries) + 4, "unique": len(entries)}]}
    return write_artifact(path, entries, resolved_config=resolved, summary=summary)


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("plain")
    entries = make_entries(9, sequences=2)
    conflicting = [Entry(e.key, e.sequences, ("x", "y"), e.finish_reasons) for e in entries[3:6]]
    found = {
        "one": write_artifact(
            root / "one", entries, summary={"data_configs": [{"index": 0, "samples": 11, "unique": 9}]}
        ),
        "determinism": with_determinism(
            root / "det", entries[:4], gpu_name="NVIDIA H200", cublas_workspace_config=":4096:8"
        ),
        "other": write_artifact(root / "other", conflicting),
        "names": write_artifact(root / "a [red]b[/] :smile: back\\slash 中文 café", entries[:2]),
        "long": write_artifact(root / ("a-long-output-directory-name-" * 6), entries[:2]),
    }
    for index in (0, 1, 3):
        write_shard(root / "sharded", index, 4, entries, "d" * 64)
    shard = Path(f"{root / 'sharded'}-shard-00001-of-00004")
    os.chmod(shard, 0o755)
    for name in os.listdir(shard):
        os.chmod(shard / name, 0o644)
    (shard / "manifest.json").write_bytes(b"{}")
    (writable_copy(found["one"], root / "damaged") / "manifest.json").write_bytes(b"{}")
    return found | {name: root / name for name in ("sharded", "damaged", "missing")}


def inspect(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, str, str]:
    code = run(["inspect", *map(str, paths)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_piped_inspect_is_plain_text_with_whole_tables(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "40")  # a pipe's tables do not follow the terminal's width
    code, out, err = inspect(capsys, paths["one"], paths["long"], paths["determinism"])
    assert (code, err) == (0, "")
    assert "\x1b" not in out and "…" not in out
    assert f"\n{paths['long']}\n" in out  # each table titled by its whole path, on one line
    assert "│ teacher         │ tiny/teacher" in out
    assert "│ data configs    │ #0: 11 samples, 9 unique" in out
    assert "CUBLAS_WORKSPACE_CONFIG :4096:8" in out and "GPU NVIDIA H200 (compute capability None)" in out
    assert "│ duplicates      │ 4 (2 rendered different prompts; the first was generated)" in out


def test_recorded_values_are_shown_as_they_are(paths: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = inspect(capsys, paths["names"])
    assert code == 0 and f"{paths['names']}\n" in out  # no markup, emoji or escaping applied to a path


def test_several_paths_show_their_overlap(paths: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = inspect(capsys, paths["one"], paths["other"])
    assert code == 0
    overlap = out[out.index("\noverlap\n") :]
    assert f"│ {paths['one']} │ {paths['other']} │ 3           │ 3 (e.g. " in overlap
    assert "provenance: identical; union of keys: 9" in overlap


def test_a_sharded_output_with_a_missing_and_a_damaged_shard_shows_both(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = inspect(capsys, paths["sharded"])
    assert code == 1
    assert f"{paths['sharded']} (4 shards)\n" in out
    assert "│ 00000 │ ok " in out and "│ 00001 │ unreadable (FAIL line below) │" in out and "│ 00002 │ missing " in out
    assert "\nproblem: " in out
    assert err.splitlines() == [f"FAIL {paths['sharded']}-shard-00001-of-00004: " + err.split(": ", 1)[1].rstrip()]


def test_error_and_fail_lines_go_to_stderr_in_the_order_of_the_paths(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = inspect(capsys, paths["missing"], paths["one"], paths["damaged"])
    assert code == 2  # a path that is not an artifact is bad input, worse than an unreadable one
    lines = err.splitlines()
    assert [line.split(" ")[0] for line in lines] == ["error:", "FAIL"]
    assert str(paths["missing"]) in lines[0] and lines[1].startswith(f"FAIL {paths['damaged']}")
    assert f"{paths['one']}\n" in out and str(paths["damaged"]) not in out


def test_the_console_script_prints_to_a_pipe_what_the_command_prints(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = inspect(capsys, paths["one"], paths["sharded"])
    argv = ["inspect", str(paths["one"]), str(paths["sharded"])]
    env = without_terminal(COLUMNS="40")
    piped = subprocess.run(
        [sys.executable, "-m", "gencache", *argv], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    forced = subprocess.run(
        [sys.executable, "-m", "gencache", *argv],
        capture_output=True,
        text=True,
        env={**env, "FORCE_COLOR": "1"},
        timeout=300,
        check=False,
    )
    assert (piped.returncode, piped.stdout, piped.stderr) == (code, out, err) and code == 1
    assert "\x1b[" not in out and "│ 00002 │ missing " in out
    assert "\x1b[" in forced.stdout  # colours only when the environment forces them
