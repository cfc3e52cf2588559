"""What each built-in dataset needs from its tables: a missing column names the column, the file and the columns
that are there; a bad value names the file's own line (blank lines and all), before any shuffling."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gencache.core.errors import DatasetError
from gencache.data.recipes import BUILTIN_DATASETS, get_recipe
from support.dataset_helpers import FIX, DataConfig

Row = dict[str, Any]


def read(path: Path) -> list[Row]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write(path: Path, rows: list[Row]) -> Path:
    """Rows as JSON Lines after two blank lines, with a blank line after the third row: row i is not line i+1."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["", ""] + [json.dumps(row, ensure_ascii=False) for row in rows]
    lines.insert(5, "")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def line_of(row: int) -> int:
    """The 1-based line of row ``row`` in a file written by :func:`write`."""
    return row + 3 if row < 3 else row + 4


def load(config: DataConfig, **kwargs: Any) -> None:
    recipe = get_recipe(config.dataset_name)
    recipe.load(config, recipe.kwargs_model.model_validate(kwargs), None)


def drop(column: str) -> Callable[[Row], Row]:
    return lambda row: {k: v for k, v in row.items() if k != column}


# dataset, fixture, the config reading the copy, and its data_kwargs (every row is read)
CASES: dict[str, tuple[str, Callable[[str], DataConfig], dict[str, Any]]] = {
    "hotpot_qa": (
        "hotpot_qa.jsonl",
        lambda s: DataConfig("hotpot_qa", 48, split="train", source=s),
        {"difficulty": ["easy", "medium", "hard"]},
    ),
    "musique": ("musique.jsonl", lambda s: DataConfig("musique", 36, split="train", source=s), {}),
    "niah": ("niah.jsonl", lambda s: DataConfig("niah", 15, split="train", source=s), {}),
}


@pytest.mark.parametrize(
    ("name", "column"),
    [
        ("hotpot_qa", "question"),
        ("hotpot_qa", "answer"),
        ("hotpot_qa", "context"),
        ("hotpot_qa", "level"),
        ("musique", "question"),
        ("musique", "answer"),
        ("musique", "paragraphs"),
        ("niah", "context"),
        ("niah", "question"),
        ("niah", "answer"),
    ],
)
def test_a_missing_column_names_it_the_file_and_the_columns_there(name: str, column: str, tmp_path: Path) -> None:
    fixture, config, kwargs = CASES[name]
    rows = [drop(column)(row) for row in read(FIX / fixture)]
    path = write(tmp_path / "train.jsonl", rows)
    with pytest.raises(DatasetError) as info:
        load(config(str(path)), **kwargs)
    there = ", ".join(rows[0])
    assert str(info.value).startswith(f"{name}: column {column!r} is missing from {path} (its columns: {there});")
    assert "docs/datasets.md" in str(info.value)


def _null(path: tuple[str, ...]) -> Callable[[Row], None]:
    def mutate(row: Row) -> None:
        target: Any = row
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = None

    return mutate


ROW_CASES = [
    ("hotpot_qa", 4, _null(("question",)), "'question' is missing or null (the row has: id, answer"),
    ("hotpot_qa", 6, _null(("answer",)), "'answer' is missing or null"),
    ("hotpot_qa", 7, _null(("context", "sentences")), "'context.sentences' is missing or null (context has: title)"),
    (
        "musique",
        3,
        lambda row: row["paragraphs"][1].pop("paragraph_text"),
        "'paragraphs[1].paragraph_text' is missing or null (paragraphs[1] has: idx, title, is_supporting)",
    ),
    ("musique", 8, _null(("question",)), "'question' is missing or null"),
    ("niah", 10, _null(("context",)), "'context' is missing or null (the row has: question, answer"),
]


@pytest.mark.parametrize(("name", "row", "mutate", "message"), ROW_CASES)
def test_a_bad_value_names_the_file_and_its_line(
    name: str, row: int, mutate: Callable[[Row], None], message: str, tmp_path: Path
) -> None:
    fixture, config, kwargs = CASES[name]
    rows = read(FIX / fixture)
    mutate(rows[row])
    path = write(tmp_path / "train.jsonl", rows)
    splits = ("train", "test") if name == "niah" else ("train",)  # niah: the row is in one of the halves
    errors = []
    for split in splits:
        try:
            load(dataclasses.replace(config(str(path)), split=split), **kwargs)
        except DatasetError as error:
            errors.append(str(error))
    assert len(errors) == 1
    assert errors[0].startswith(f"{name}: {path} line {line_of(row)}: ") and message in errors[0], errors[0]


def _biography(tmp_path: Path, table: str, mutate: Callable[[list[Row]], None]) -> Path:
    tables = {t: read(FIX / "biography" / f"{t}.jsonl") for t in ("train", "test")}
    mutate(tables[table])
    for t, rows in tables.items():
        write(tmp_path / "1k" / f"{t}.jsonl", rows)
    return tmp_path / "1k" / f"{table}.jsonl"


def _first_kept() -> int:
    tests = read(FIX / "biography" / "test.jsonl")
    return next(i for i, r in enumerate(tests) if r["birth_date"] and len(set(r["birth_date"])) > 1)


@pytest.mark.parametrize(("table", "column"), [("train", "university"), ("test", "labels"), ("test", "company")])
def test_biography_missing_columns_name_the_table(table: str, column: str, tmp_path: Path) -> None:
    path = _biography(tmp_path, table, lambda rows: [row.pop(column) for row in rows])
    with pytest.raises(
        DatasetError,
        match=rf"^biography {table} table: column '{column}' is missing from {re.escape(str(path))} \(its columns: ",
    ):
        load(DataConfig("biography", 1, subset="1k", source=str(tmp_path)))


def test_biography_bad_values_name_the_table_file_and_line(tmp_path: Path) -> None:
    person = _first_kept()
    path = _biography(tmp_path, "test", lambda rows: rows[person].update(labels=None))
    full = DataConfig("biography", 18, num_data_strs=2, subset="1k", source=str(tmp_path))
    with pytest.raises(DatasetError, match=rf"^biography test: {re.escape(str(path))} line {line_of(person)}: 'labels"):
        load(full)
    path = _biography(tmp_path, "train", lambda rows: rows[person].update(major=[]))
    with pytest.raises(
        DatasetError, match=rf"^biography train: {re.escape(str(path))} line {line_of(person)}: 'major' is empty"
    ):
        load(DataConfig("biography", 18, num_data_strs=18, subset="1k", source=str(tmp_path)))


def test_parquet_rows_are_named_by_their_index_in_the_file(tmp_path: Path) -> None:
    import pyarrow
    import pyarrow.parquet

    rows = read(FIX / "musique.jsonl")
    rows[11]["question"] = None
    for part, chunk in enumerate((rows[:10], rows[10:])):
        pyarrow.parquet.write_table(pyarrow.Table.from_pylist(chunk), tmp_path / f"train-0000{part}-of-00002.parquet")
    with pytest.raises(DatasetError, match=r"train-00001-of-00002\.parquet row 1: 'question' is missing or null"):
        load(DataConfig("musique", 36, split="train", source=str(tmp_path)))


def test_every_builtin_declares_its_columns() -> None:
    for name, recipe in BUILTIN_DATASETS.items():
        assert recipe.columns, name
        assert any(column.required for column in recipe.columns), name


def test_generate_exits_2_with_one_line_naming_the_missing_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gencache.cli.app import run as cli_run

    rows = [drop("question")(row) for row in read(FIX / "musique.jsonl")]
    path = write(tmp_path / "train.jsonl", rows)
    data = {
        "dataset_name": "musique",
        "num_samples": 2,
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "default",
        "source": str(path),
    }
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model": {"model_path": str(tmp_path / "none")},
                "data_configs": [data],
                "output_dir": str(tmp_path / "out"),
            }
        ),
        encoding="utf-8",
    )
    assert cli_run(["generate", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err.splitlines()
    lines = [line for line in err if line.startswith("error:") and "column 'question'" in line]
    assert lines == [
        f"error: data_configs[0]: musique: column 'question' is missing from {path} (its columns: id, paragraphs, "
        "question_decomposition, answer, answer_aliases, answerable); rename the column in the file or see "
        "docs/datasets.md for the columns musique reads."
    ]


def test_a_biography_row_whose_labels_lack_the_asked_attribute_is_refused(tmp_path: Path) -> None:
    person = _first_kept()
    path = _biography(tmp_path, "test", lambda rows: rows[person].update(labels={}))
    full = DataConfig("biography", 18, num_data_strs=2, subset="1k", source=str(tmp_path))
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))} line {line_of(person)}: 'labels\.[a-z_]+' is"):
        load(full)
