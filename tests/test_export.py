"""`gencache export` from the artifact alone: JSONL and parquet, prompts when the data is reachable (or pointed at
with --data-root / --source), none with --no-prompts, streamed in batches; the stored token ids under TRL's column
names, and the artifact's provenance in the parquet schema metadata."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gencache.artifact.reader import CacheReader
from gencache.cli.app import run as cli_run
from gencache.config import load_config
from gencache.data.recipes import sample_source
from gencache.data.samples import build_samples
from gencache.run.api import generate


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory, tiny_teacher_dir: Path) -> tuple[Path, Path]:
    """An artifact over a private copy of the musique sample data; returns (artifact, data directory)."""
    work = tmp_path_factory.mktemp("export")
    data = work / "musique-data"
    shutil.copytree(sample_source("musique"), data)
    config = {
        "model": {
            "model_path": str(tiny_teacher_dir),
            "dtype": "float32",
            "device": "cpu",
            "generation_kwargs": {"max_new_tokens": 8},
        },
        "data_configs": [
            {
                "dataset_name": "musique",
                "num_samples": 5,
                "num_data_strs": 0,
                "num_shots": 0,
                "subset": "default",
                "split": "train",
                "seed": 2,
                "source": str(data),
            }
        ],
        "gen_batch_size": 4,
        "seed": 0,
        "output_dir": str(work / "out"),
    }
    path = work / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    out = generate(path)
    assert out is not None
    return out, data


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_export_with_prompts_then_without_the_data(
    artifact: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    published, data = artifact
    reader = CacheReader(published)
    full = tmp_path / "full.jsonl"
    assert cli_run(["export", str(published), "--out", str(full)]) == 0
    with_prompts = lines(full)
    assert len(with_prompts) == len(reader) == 5
    assert all(r["prompt"] and r["prompt_token_length"] > 0 and r["data_config_index"] == 0 for r in with_prompts)
    assert not {"prompt_text", "text"} & set(with_prompts[0])  # only the current column names
    # the dataset moves away: the export still works, from the artifact alone, and says what it left out
    moved = tmp_path / "moved" / data.name
    shutil.move(str(data), moved)
    try:
        capsys.readouterr()
        bare = tmp_path / "bare.jsonl"
        assert cli_run(["export", str(published), "--out", str(bare)]) == 0
        assert "prompts left out" in capsys.readouterr().err
        without = lines(bare)
        assert {r["key"] for r in without} == set(reader.keys())
        for record in without:
            generation = reader[record["key"]]
            assert record["completion"] == generation.texts[record["sequence_index"]]
            assert record["finish_reason"] == generation.finish_reasons[record["sequence_index"]]
            assert record["token_length"] == generation.sequences[record["sequence_index"]].numel()
            assert record["max_new_tokens"] == 8
            assert record["prompt"] is None and record["data_config_index"] is None
        # --data-root and --source bring the prompts back, identical to the first export
        for option in (["--data-root", str(moved.parent)], ["--source", f"0={moved}"]):
            again = tmp_path / f"again-{option[0].strip('-')}.jsonl"
            assert cli_run(["export", str(published), "--out", str(again), *option]) == 0
            assert lines(again) == with_prompts
        # a --data-root that does not hold the data is an error, not a silent export without prompts
        wrong = tmp_path / "wrong.jsonl"
        assert cli_run(["export", str(published), "--out", str(wrong), "--data-root", str(tmp_path)]) == 2
        assert not wrong.exists()
    finally:
        shutil.move(str(moved), data)


def test_no_prompts_and_parquet_read_back_with_datasets(
    artifact: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets
    import pyarrow.parquet as pq

    import gencache.run.export

    published, _ = artifact
    jsonl = tmp_path / "a.jsonl"
    assert cli_run(["export", str(published), "--out", str(jsonl)]) == 0
    monkeypatch.setattr(gencache.run.export, "PARQUET_BATCH_ROWS", 2)  # streamed: several row groups
    parquet = tmp_path / "a.parquet"
    assert cli_run(["export", str(published), "--out", str(parquet)]) == 0  # the format follows the extension
    assert pq.ParquetFile(parquet).metadata.num_row_groups == 3
    table = datasets.load_dataset("parquet", data_files=str(parquet), split="train")
    assert table.num_rows == 5
    assert table.features["token_length"].dtype == "int64"
    assert table.features["reached_max_length"].dtype == "bool"
    assert [dict(row) for row in table] == lines(jsonl)
    bare = tmp_path / "bare.parquet"
    assert cli_run(["export", str(published), "--out", str(bare), "--format", "parquet", "--no-prompts"]) == 0
    rows = datasets.load_dataset("parquet", data_files=str(bare), split="train")
    assert rows["prompt"] == [None] * 5 and sorted(rows["key"]) == sorted(r["key"] for r in lines(jsonl))
    assert cli_run(["export", str(published), "--out", str(tmp_path / "x.csv"), "--format", "csv"]) == 2


def test_export_of_a_missing_directory_is_bad_input(tmp_path: Path) -> None:
    assert cli_run(["export", str(tmp_path / "missing"), "--out", str(tmp_path / "a.jsonl")]) == 2


@pytest.mark.parametrize("out", ["/", ".", ".."])
def test_export_to_a_path_without_a_name_is_bad_input(
    artifact: tuple[Path, Path], out: str, capsys: pytest.CaptureFixture[str]
) -> None:
    published, _ = artifact
    assert cli_run(["export", str(published), "--out", out]) == 2
    assert f"error: --out {out!r} has no name of its own" in capsys.readouterr().err


def test_export_never_writes_over_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from support.storage_helpers import make_entries, write_artifact

    source = write_artifact(tmp_path / "a", make_entries(3))
    taken = tmp_path / "taken.jsonl"
    taken.write_text("mine\n")
    assert cli_run(["export", str(source), "--out", str(taken), "--no-prompts"]) == 2
    assert f"error: {taken} already exists; choose another --out path." in capsys.readouterr().err
    assert taken.read_text() == "mine\n"
    link = os.link

    def racing_link(src: str, dst: str) -> None:  # another process creates --out while the records are written
        Path(dst).write_text("theirs\n")
        link(src, dst)

    later = tmp_path / "later.jsonl"
    monkeypatch.setattr(os, "link", racing_link)
    assert cli_run(["export", str(source), "--out", str(later), "--no-prompts"]) == 2
    assert f"error: {later} appeared while writing it; nothing was replaced." in capsys.readouterr().err
    assert later.read_text() == "theirs\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "later.jsonl", "taken.jsonl"]  # no temporary left


def test_token_columns_and_provenance_survive_the_parquet(
    artifact: tuple[Path, Path], tmp_path: Path, tiny_teacher_dir: Path, tiny_tokenizer: Any
) -> None:
    import hashlib

    import datasets
    import pyarrow.parquet as pq

    published, data = artifact
    reader = CacheReader(published)
    out = tmp_path / "tokens.parquet"
    assert cli_run(["export", str(published), "--out", str(out), "--format", "parquet"]) == 0
    table = datasets.load_dataset("parquet", data_files=str(out), split="train")
    assert "text" not in table.column_names and "prompt_text" not in table.column_names
    assert {"prompt", "completion", "prompt_ids", "completion_ids", "dataset_name"} <= set(table.column_names)
    samples = {s.key: s for s in build_samples(load_config(data.parent / "config.json"), tiny_tokenizer)}
    for row in table:
        generation = reader[row["key"]]
        stored = generation.sequences[row["sequence_index"]]
        assert row["completion_ids"] == stored.tolist() and row["token_length"] == len(stored)
        assert row["completion"] == generation.texts[row["sequence_index"]]
        assert row["prompt_ids"] == list(samples[row["key"]].input_ids or ())
        assert row["prompt"] == samples[row["key"]].prompt_text and row["prompt_token_length"] == len(row["prompt_ids"])
        assert row["dataset_name"] == "musique" and row["data_config_index"] == 0
        assert row["content_digest"] == (reader.metadata(row["key"]) or {})["content_digest"]
    meta = json.loads(pq.read_schema(out).metadata[b"gencache"])
    assert meta["teacher"]["model_path"] == str(tiny_teacher_dir) == reader.provenance["model_path"]
    assert meta["provenance_digest"] == reader.provenance_digest and meta["dtype"] == "float32"
    assert meta["tokenizer"] == reader.provenance["tokenizer"] and meta["format_version"] == 3
    entries = hashlib.sha256()
    for key in sorted(reader.keys()):
        entries.update(f"{key} {(reader.metadata(key) or {})['content_digest']}\n".encode())
    assert meta["entries_digest"] == entries.hexdigest() and meta["entries"] == len(reader)
    # the recipe the README gives for TRL: exact ids, completion_mask on the answer
    tokenized = table.map(
        lambda r: {
            "input_ids": r["prompt_ids"] + r["completion_ids"],
            "completion_mask": [0] * len(r["prompt_ids"]) + [1] * len(r["completion_ids"]),
        }
    )
    first = tokenized[0]
    assert first["input_ids"][-first["token_length"] :] == first["completion_ids"]
    assert sum(first["completion_mask"]) == first["token_length"]


@pytest.mark.parametrize(
    "damage",
    [
        "empty",
        "list",
        "number",
        "utf8",
        "no-generation",
        "max-new-tokens",
        "model-path",
        "data-configs-int",
        "data-configs-int-redigested",
    ],
)
@pytest.mark.parametrize("prompts", [True, False])
def test_a_damaged_record_stops_the_export_naming_the_file(
    artifact: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str, prompts: bool
) -> None:
    from gencache.artifact.resolved import with_resolved_digest
    from support.storage_helpers import writable_copy

    copy = writable_copy(artifact[0], tmp_path / "copy")
    path = copy / "resolved_config.json"
    resolved = json.loads(path.read_text(encoding="utf-8"))
    if damage == "no-generation":
        del resolved["generation"]
    elif damage == "max-new-tokens":
        resolved["generation"]["max_new_tokens"] = 9  # a flipped digit
    elif damage == "model-path":
        resolved["model"]["model_path"] = resolved["model"]["model_path"][:-1] + "X"
    elif damage.startswith("data-configs-int"):
        resolved["config"]["data_configs"] = 3
        if damage.endswith("redigested"):  # the digest recomputed: the config itself no longer parses
            resolved = with_resolved_digest(resolved)
    texts = {"empty": b"", "list": b"[]", "number": b"7", "utf8": b"\xff\xfe{}"}
    path.write_bytes(texts.get(damage, json.dumps(resolved).encode()))
    out = tmp_path / "out.jsonl"
    capsys.readouterr()
    code = cli_run(["export", str(copy), "--out", str(out), *([] if prompts else ["--no-prompts"])])
    if damage.endswith("redigested") and not prompts:  # what it writes passed every check; the join fields are left
        assert code == 0 and "join fields (row_id, row_index, reference) left out" in capsys.readouterr().err
        return
    assert code == 1
    err = capsys.readouterr().err.strip()
    assert str(path) in err and len(err.splitlines()) == 1 and "internal error" not in err
    assert not out.exists()


def test_a_changed_source_file_stops_the_export(artifact: tuple[Path, Path], tmp_path: Path) -> None:
    from support.storage_helpers import writable_copy

    data = writable_copy(artifact[1], tmp_path / artifact[1].name)
    train = data / "train.jsonl"
    train.write_bytes(train.read_bytes().replace(b"the", b"The", 1))
    out = tmp_path / "out.jsonl"
    assert cli_run(["export", str(artifact[0]), "--out", str(out), "--data-root", str(tmp_path)]) == 2
    assert not out.exists()
    # read from another source on purpose (--source): not held to the recorded files (only the keys must match)
    assert cli_run(["export", str(artifact[0]), "--out", str(out), "--source", f"0={data}"]) == 0
    assert all(record["prompt"] for record in lines(out))


def test_an_export_joins_back_to_the_source_rows(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    import gencache

    rows = [{"qid": f"q-{i}", "question": f"What is {i} plus {i}?", "gold": str(2 * i)} for i in range(6)]
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    table = {
        "dataset_name": "table",
        "num_samples": 4,
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "default",
        "split": "train",
        "seed": 1,
        "source": str(source),
        "data_kwargs": {"answer": "gold", "id": "qid"},
    }
    plain = {**table, "seed": 2, "data_kwargs": {"answer": "gold"}}
    config = {
        "model": {
            "model_path": str(tiny_teacher_dir),
            "dtype": "float32",
            "device": "cpu",
            "generation_kwargs": {"max_new_tokens": 4},
        },
        "data_configs": [table, plain],
        "gen_batch_size": 4,
        "output_dir": str(tmp_path / "out"),
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    published = gencache.generate(path, limit=3)
    out = tmp_path / "answers.jsonl"
    assert cli_run(["export", str(published), "--out", str(out)]) == 0
    records = lines(out)
    by_id = {row["qid"]: row for row in rows}
    assert {r["data_config_index"] for r in records} <= {0, 1} and records
    for record in records:
        row = rows[record["row_index"]]
        if record["data_config_index"] == 0:  # data_kwargs.id names the id column
            assert by_id[record["row_id"]] is row
        else:  # no id column: the row's index in the source file
            assert record["row_id"] == str(record["row_index"])
        assert record["reference"] == row["gold"] and row["question"] in record["prompt"]
