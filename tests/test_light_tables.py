"""Local data files load without torch or transformers; CSV and TSV give the keys of the same rows in JSON Lines,
with errors naming the file's own line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gencache.config import parse_data_configs
from gencache.core.errors import DatasetError
from gencache.data.samples import build_samples


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def test_local_files_load_without_torch_or_transformers() -> None:
    code = (
        "import sys\n"
        "from gencache.config import parse_data_configs\n"
        "from gencache.data.recipes import sample_source\n"
        "from gencache.data.samples import build_samples\n"
        "dc = {'dataset_name': 'musique', 'num_samples': 3, 'num_data_strs': 0, 'num_shots': 1, 'subset': 'default',"
        " 'source': str(sample_source('musique'))}\n"
        "assert len(build_samples(parse_data_configs([dc]))) == 3\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
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


def test_a_source_that_is_no_file_or_directory_and_an_unreadable_file_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(DatasetError, match=r"rows\.jsonl' is neither a regular file nor a directory"):
        keys(fifo, "table", query="q")
    unreadable = write_jsonl(tmp_path / "rows.json", TABLE_ROWS)
    read_bytes = Path.read_bytes

    def denied(path: Path) -> bytes:
        if path == unreadable:
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(DatasetError, match=r"table: cannot read .*rows\.json \(Permission denied\)"):
        keys(unreadable, "table", query="q")
