"""The declarative ``table`` recipe: any JSON Lines, parquet or hub-layout directory, columns named in data_kwargs;
keys equal a hand computation of the documented rule, and DistillationDataset finds the same keys."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from gencache.cli.app import run as cli_run
from gencache.core.errors import ConfigError, DatasetError
from gencache.data.prompts import ContextBlock
from gencache.data.samples import build_samples

ROWS = [
    {
        "id": i,
        "question": f"Question {i}?",
        "answer": f"Answer {i}",
        "passages": [f"P{i} one.", f"P{i} two."],
        "objects": [{"text": f"O{i} first.", "score": 1}, {"text": f"O{i} second.", "score": 2}],
        "title": f"Title {i}",
        "body": f"Body {i}.",
        "lang": ["en", "de", "fr"][i % 3],
        "level": i % 2,
    }
    for i in range(12)
]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow
    import pyarrow.parquet

    path.parent.mkdir(parents=True, exist_ok=True)
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    return path


def key(documents: list[str], query: str, shots: list[dict[str, Any]], task: dict[str, Any]) -> str:
    """The documented rule, by hand."""
    payload = {"documents": documents, "query": query, "shots": shots, "task": task}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def data_config(source: Path, num_samples: int = 4, **fields: Any) -> dict[str, Any]:
    config = {
        "dataset_name": "table",
        "num_samples": num_samples,
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "default",
        "split": "train",
        "seed": 7,
        "source": str(source),
    }
    config.update(fields)
    return config


def order(seed: int = 7, rows: list[dict[str, Any]] = ROWS) -> list[int]:
    indices = list(range(len(rows)))
    random.Random(seed).shuffle(indices)
    return indices


@pytest.fixture()
def jsonl(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "rows.jsonl", ROWS)


DOCUMENTS = {
    "list": ({"documents": "passages"}, lambda r: r["passages"]),
    "objects": ({"documents": "objects"}, lambda r: [o["text"] for o in r["objects"]]),
    "columns": ({"documents": ["title", "body"]}, lambda r: [r["title"], r["body"]]),
    "list and column": ({"documents": ["passages", "body"]}, lambda r: [*r["passages"], r["body"]]),
    "none": ({}, lambda r: []),
}


@pytest.mark.parametrize("kind", sorted(DOCUMENTS))
@pytest.mark.parametrize(("num_shots", "task"), [(0, []), (2, []), (0, ["lang"]), (1, ["lang", "level"])])
def test_keys_follow_the_documented_rule(jsonl: Path, kind: str, num_shots: int, task: list[str]) -> None:
    extra, documents_of = DOCUMENTS[kind]
    samples = build_samples([data_config(jsonl, num_shots=num_shots, data_kwargs={**extra, "task": task})])
    chosen = order()
    shots = [
        {
            "documents": documents_of(ROWS[i]),
            "query": ROWS[i]["question"],
            "answer": ROWS[i]["answer"],
            "task": {column: ROWS[i][column] for column in task},
        }
        for i in chosen[:num_shots]
    ]
    expected = [
        key(documents_of(ROWS[i]), ROWS[i]["question"], shots, {column: ROWS[i][column] for column in task})
        for i in chosen[num_shots : num_shots + 4]
    ]
    assert [sample.key for sample in samples] == expected
    first = samples[0]
    assert [p.text for p in first.parts if isinstance(p, ContextBlock)] == first.semantic["documents"]
    assert first.answer == ROWS[chosen[num_shots]]["answer"]


def test_parquet_and_a_hub_layout_directory_give_the_same_samples(jsonl: Path, tmp_path: Path) -> None:
    kwargs = {"documents": "passages", "task": ["lang"]}
    reference = build_samples([data_config(jsonl, data_kwargs=kwargs)])
    parquet = write_parquet(tmp_path / "rows.parquet", ROWS)
    hub = tmp_path / "hub"
    write_parquet(hub / "data" / "train-00000-of-00001.parquet", ROWS)
    (hub / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
        "    path: data/train-*.parquet\n---\n# My dataset\n",
        encoding="utf-8",
    )
    split_dir = tmp_path / "by-split"
    write_jsonl(split_dir / "mine" / "train.jsonl", ROWS)
    for source, subset in [(parquet, "default"), (hub, "default"), (split_dir, "mine")]:
        got = build_samples([data_config(source, subset=subset, data_kwargs=kwargs)])
        assert got.keys() == reference.keys(), source
        assert [s.parts for s in got] == [s.parts for s in reference]


def test_prompt_instruction_and_shots(jsonl: Path) -> None:
    kwargs = {"documents": "passages", "instruction": "Answer with one word."}
    (sample,) = build_samples([data_config(jsonl, num_samples=1, num_shots=1, data_kwargs=kwargs)])
    shot = ROWS[order()[0]]
    row = ROWS[order()[1]]
    expected = (
        f"{shot['passages'][0]}\n{shot['passages'][1]}\nQuestion: {shot['question']}\nAnswer: {shot['answer']}\n\n"
        f"{row['passages'][0]} {row['passages'][1]} Answer with one word.\n{row['question']}"
    )
    assert sample.prompt_text == expected
    assert sample.semantic["query"] == row["question"]  # the instruction is never part of the key


def test_filters_keep_the_seeded_order_and_shuffle_false_keeps_the_file_order(jsonl: Path) -> None:
    got = build_samples(
        [data_config(jsonl, num_samples=3, data_kwargs={"filters": {"lang": ["en", "fr"], "level": 0}})]
    )
    expected = [i for i in order() if ROWS[i]["lang"] in ("en", "fr") and ROWS[i]["level"] == 0][:3]
    assert [s.semantic["query"] for s in got] == [ROWS[i]["question"] for i in expected]
    plain = build_samples([data_config(jsonl, num_samples=3, data_kwargs={"shuffle": False})])
    assert [s.semantic["query"] for s in plain] == [ROWS[i]["question"] for i in range(3)]


def test_filters_never_equate_true_with_one(jsonl: Path) -> None:
    with pytest.raises(DatasetError, match=r"holds 0 usable samples \(12 rows, 0 where level in True"):
        build_samples([data_config(jsonl, num_samples=1, data_kwargs={"filters": {"level": True}})])


def test_asking_for_more_than_the_table_holds_says_how_many(jsonl: Path) -> None:
    with pytest.raises(
        DatasetError, match=r"table split 'train' holds 10 usable samples \(12 rows, 2 used as few-shot\)"
    ):
        build_samples([data_config(jsonl, num_samples=11, num_shots=2)])
    with pytest.raises(DatasetError, match=r"holds 4 usable samples \(12 rows, 4 where lang in 'en'"):
        build_samples([data_config(jsonl, num_samples=5, data_kwargs={"filters": {"lang": "en"}})])


def test_column_errors_name_the_column_the_file_and_the_line(jsonl: Path, tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"table: column 'prompt' is missing from .*rows\.jsonl \(its columns: id, "):
        build_samples([data_config(jsonl, data_kwargs={"query": "prompt"})])
    rows = [dict(r) for r in ROWS]
    rows[5]["question"] = None
    path = tmp_path / "gaps.jsonl"
    path.write_text(
        "\n".join(json.dumps(r) for r in rows[:3]) + "\n\n" + "".join(json.dumps(r) + "\n" for r in rows[3:])
    )
    with pytest.raises(
        DatasetError, match=rf"table: {path} line 7: 'question' is missing or null \(the row has: id, answer"
    ):
        build_samples([data_config(path, num_samples=12, data_kwargs={"shuffle": False})])
    objects = write_jsonl(tmp_path / "o.jsonl", [{"question": "q", "answer": "a", "passages": [{"body": "x"}]}])
    with pytest.raises(
        DatasetError, match=r"o\.jsonl line 1: 'passages\[0\]\.text' is missing or null \(passages\[0\] has: body\)"
    ):
        build_samples([data_config(objects, num_samples=1, data_kwargs={"documents": "passages"})])


def test_a_source_is_required_and_shots_need_an_answer(jsonl: Path) -> None:
    with pytest.raises(DatasetError, match="table reads your own table: set source"):
        build_samples([{**data_config(jsonl), "source": None}])
    with pytest.raises(DatasetError, match="few-shot examples show the answer"):
        build_samples([data_config(jsonl, num_shots=1, data_kwargs={"answer": None})])
    with pytest.raises(ConfigError, match=r"data_kwargs\.documents"):
        build_samples([data_config(jsonl, data_kwargs={"documents": []})])
    with pytest.raises(ConfigError, match=r"data_kwargs\.quary"):
        build_samples([data_config(jsonl, data_kwargs={"quary": "question"})])


def test_distillation_dataset_finds_the_same_keys(
    jsonl: Path, tmp_path: Path, tiny_teacher_dir: Path, tiny_tokenizer: Any
) -> None:
    from gencache.training import DistillationDataset

    configs = [data_config(jsonl, num_shots=1, data_kwargs={"documents": ["title", "body"], "task": ["lang"]})]
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model": {
                    "model_path": str(tiny_teacher_dir),
                    "dtype": "float32",
                    "device": "cpu",
                    "generation_kwargs": {"max_new_tokens": 3},
                },
                "data_configs": configs,
                "output_dir": str(tmp_path / "out"),
            }
        ),
        encoding="utf-8",
    )
    assert cli_run(["generate", str(config)]) == 0
    chosen = order()
    shot = {
        "documents": [ROWS[chosen[0]]["title"], ROWS[chosen[0]]["body"]],
        "query": ROWS[chosen[0]]["question"],
        "answer": ROWS[chosen[0]]["answer"],
        "task": {"lang": ROWS[chosen[0]]["lang"]},
    }
    expected = [
        key([ROWS[i]["title"], ROWS[i]["body"]], ROWS[i]["question"], [shot], {"lang": ROWS[i]["lang"]})
        for i in chosen[1:5]
    ]
    dataset = DistillationDataset(
        tmp_path / "out",
        tiny_tokenizer,
        config=configs,
        model_path=str(tiny_teacher_dir),
        tokenizer_path=str(tiny_teacher_dir),
        dtype="float32",
    )
    assert [dataset[i]["key"] for i in range(len(dataset))] == expected
