"""Local data files are read without ``datasets`` (gencache.data.tables) exactly as ``datasets`` reads them, or by
``datasets`` itself where its Arrow typing would give other values; CSV and TSV give the keys of the same rows in
JSON Lines, with errors naming the file's own line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gencache.config import parse_data_configs
from gencache.core.errors import DatasetError
from gencache.data.recipes import SAMPLES_DIR
from gencache.data.samples import build_samples
from gencache.data.sources import _read_files, _read_with_datasets
from gencache.data.tables import read_light

GOLDEN = Path(__file__).parent / "data" / "golden" / "fixtures"
FILES = sorted([*SAMPLES_DIR.rglob("*.jsonl"), *GOLDEN.rglob("*.jsonl")])


def same_rows(light: Any, reference: Any) -> None:
    assert light.column_names == reference.column_names and len(light) == len(reference)
    for index in range(len(reference)):
        assert _shown(light[index]) == _shown(reference[index]), index  # values, types and key order
    for name in reference.column_names:
        assert _shown(list(light[name])) == _shown(list(reference[name]))


def _shown(value: Any) -> str:
    return json.dumps(value, default=repr)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(p.parents[1])) for p in FILES])
def test_bundled_and_golden_files_read_as_datasets_reads_them(path: Path) -> None:
    light = read_light([path], "x")
    assert light is not None
    same_rows(light, _read_with_datasets([path], "x"))


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


PLAIN = {
    "columns missing in some rows": [{"a": "x", "b": 1}, {"a": "y"}, {"c": True, "a": "z"}],
    "nulls and nested lists": [{"a": [["x", None], []], "b": None}, {"a": [["y"]], "b": 2.5}],
    "objects with the same fields": [{"p": [{"t": "a", "n": 1}]}, {"p": [{"t": "b", "n": None}, {"t": "c", "n": 3}]}],
    "line separators inside strings": [{"q": "one\u2028two\u2029three\x85", "n": -3}],
    "unicode and escapes": [{"q": 'caf\u00e9 \U0001f600 \\ "quoted"', "d": ["\t", ""]}],
}
DIFFERENT = {
    "integers and floats in one column": [{"a": 1}, {"a": 1.5}],
    "a date-like string": [{"a": "2020-01-01"}],
    "nested objects with differing fields": [{"a": {"x": 1}}, {"a": {"y": 2}}],
    "an empty nested object": [{"a": {}}],
    "an integer beyond 64 bits": [{"a": 2**70}],
    "booleans and integers in one column": [{"a": True}, {"a": 0}],
    "strings and lists in one column": [{"a": "x"}, {"a": ["x"]}],
}


@pytest.mark.parametrize("name", PLAIN)
def test_plain_rows_are_read_without_datasets_as_datasets_reads_them(name: str, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", PLAIN[name])
    light = read_light([path], "x")
    assert light is not None
    same_rows(light, _read_with_datasets([path], "x"))


@pytest.mark.parametrize("name", DIFFERENT)
def test_rows_arrow_would_type_differently_are_read_by_datasets(name: str, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", DIFFERENT[name])
    assert read_light([path], "x") is None
    try:
        reference = _read_with_datasets([path], "x")
    except DatasetError as error:  # datasets itself refuses some of them: the same error as before
        with pytest.raises(DatasetError) as again:
            _read_files([path], "x")
        assert str(again.value) == str(error)
        return
    same_rows(_read_files([path], "x"), reference)


def test_json_arrays_are_read_as_datasets_reads_them(tmp_path: Path) -> None:
    objects = tmp_path / "objects.json"
    objects.write_text(json.dumps([{"q": "a", "n": 1}, {"q": "b"}]), encoding="utf-8")
    strings = tmp_path / "strings.json"
    strings.write_text(json.dumps(["first", "second"]), encoding="utf-8")
    for path in (objects, strings):
        light = read_light([path], "x")
        assert light is not None
        same_rows(light, _read_with_datasets([path], "x"))
    floats = tmp_path / "floats.json"  # datasets re-encodes arrays with pandas (10 digits): left to it
    floats.write_text(json.dumps([{"x": 0.1234567890123}]), encoding="utf-8")
    assert read_light([floats], "x") is None


def test_parquet_is_read_as_datasets_reads_it(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([{"q": "a", "p": [{"t": "x", "n": 1}], "f": 0.5}, {"q": "b", "p": [], "f": None}])
    path = tmp_path / "rows.parquet"
    pq.write_table(table, path)
    light = read_light([path], "x")
    assert light is not None
    same_rows(light, _read_with_datasets([path], "x"))
    declared = table.replace_schema_metadata(
        {
            "huggingface": json.dumps(
                {"info": {"features": {"q": {"_type": "Sequence", "feature": {"_type": "Value", "dtype": "string"}}}}}
            )
        }
    )
    pq.write_table(declared, path)
    assert read_light([path], "x") is None  # a feature datasets decodes: datasets reads it


def test_local_files_load_without_datasets_torch_or_transformers() -> None:
    code = (
        "import sys\n"
        "from gencache.config import parse_data_configs\n"
        "from gencache.data.recipes import sample_source\n"
        "from gencache.data.samples import build_samples\n"
        "dc = {'dataset_name': 'musique', 'num_samples': 3, 'num_data_strs': 0, 'num_shots': 1, 'subset': 'default',"
        " 'source': str(sample_source('musique'))}\n"
        "assert len(build_samples(parse_data_configs([dc]))) == 3\n"
        "print(sorted(m for m in ('datasets', 'torch', 'transformers') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]", result.stderr


# -- CSV and TSV ---------------------------------------------------------------------------------------------
TABLE_ROWS = [
    {"q": "What is two and two?", "a": "four", "ctx": "Arithmetic, with a comma", "lang": "en"},
    {"q": 'A "quoted"\nquestion', "a": "", "ctx": "line one\nline two", "lang": "en"},
    {"q": "Quelle heure est-il ?", "a": "midi", "ctx": "tab\there", "lang": "fr"},
]
CHAT_ROWS = [
    {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi, there"},
            {"role": "assistant", "content": "Hello."},
        ],
        "topic": "greeting",
    },
    {"messages": [{"role": "user", "content": "Name a colour"}], "topic": "colour"},
]


def write_delimited(path: Path, rows: list[dict[str, Any]], delimiter: str) -> Path:
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    writer.writerow(list(rows[0]))
    for row in rows:
        writer.writerow([json.dumps(v) if isinstance(v, list) else v for v in row.values()])
    path.write_text(out.getvalue(), encoding="utf-8")
    return path


def keys(source: Path, dataset: str, tokenizer: Any = None, **data_kwargs: Any) -> list[str]:
    dc = {
        "dataset_name": dataset,
        "num_samples": 2,
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "default",
        "source": str(source),
        "data_kwargs": data_kwargs,
    }
    if dataset == "chat":
        dc["template"] = "tokenizer_chat"
    return [s.key for s in build_samples(parse_data_configs([dc]), tokenizer=tokenizer)]


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_csv_and_tsv_give_the_keys_of_the_same_rows_in_json_lines(suffix: str, tmp_path: Path, tokenizer: Any) -> None:
    delimiter = "," if suffix == ".csv" else "\t"
    jsonl = write_jsonl(tmp_path / "rows.jsonl", TABLE_ROWS)
    text = write_delimited(tmp_path / f"rows{suffix}", TABLE_ROWS, delimiter)
    kwargs = {"query": "q", "answer": "a", "documents": "ctx", "task": ["lang"], "filters": {"lang": "en"}}
    assert keys(text, "table", **kwargs) == keys(jsonl, "table", **kwargs)
    chat_jsonl = write_jsonl(tmp_path / "chat.jsonl", CHAT_ROWS)
    chat_text = write_delimited(tmp_path / f"chat{suffix}", CHAT_ROWS, delimiter)
    chat_keys = keys(chat_text, "chat", tokenizer, task=["topic"])
    assert chat_keys == keys(chat_jsonl, "chat", tokenizer, task=["topic"]) and len(set(chat_keys)) == 2


def test_csv_errors_name_the_line(tmp_path: Path, tokenizer: Any) -> None:
    short = tmp_path / "short.csv"
    short.write_text('q,a\n"x",y\n"multi\nline",b\nz\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"short\.csv line 5: 1 cells, but the header names 2 columns"):
        keys(short, "table", query="q")
    repeated = tmp_path / "repeated.tsv"
    repeated.write_text("q\tq\nx\ty\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"repeated\.tsv line 1: the TSV header must name each column once"):
        keys(repeated, "table", query="q")
    chat = tmp_path / "chat.csv"
    chat.write_text('messages\n"[{""role"": ""user"", ""content"": ""a""}]"\nnot json\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"chat\.csv line 3: 'messages' is not JSON"):
        keys(chat, "chat", tokenizer, shuffle=False)
    typo = write_delimited(tmp_path / "typo.csv", TABLE_ROWS, ",")
    with pytest.raises(
        DatasetError,
        match=r"column 'qq' is missing from .*typo\.csv \(its columns: q, a, ctx, lang\); "
        r"did you mean 'q'\? set data_kwargs\.query to one of the file's columns",
    ):
        keys(typo, "table", query="qq")


def test_a_source_that_is_no_file_or_directory_and_an_unreadable_file_are_named(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(DatasetError, match=r"rows\.jsonl' is neither a regular file nor a directory"):
        keys(fifo, "table", query="q")
    from gencache.data.tables import read_bytes

    with pytest.raises(DatasetError, match=r"x: cannot read .*missing\.jsonl \(No such file or directory\)"):
        read_bytes(tmp_path / "missing.jsonl", "x")
