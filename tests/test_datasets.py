"""Dataset recipes, their kwargs models, source loading through `datasets`, and NIAH chunking."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re
import shutil
from pathlib import Path
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gencache.config import parse_data_configs
from gencache.config.datasets import RulerTask
from gencache.core.errors import ConfigError, DatasetError
from gencache.data.keys import semantic_key
from gencache.data.prompts import TEMPLATES, ContextBlock, Inline, prompt_text, tokenize_prompt
from gencache.data.recipes import BUILTIN_DATASETS as DATASETS
from gencache.data.recipes import SAMPLES_DIR, DatasetRecipe, RawSample, SourceInfo, get_recipe, sample_source
from gencache.data.recipes.niah import chunk_sentences, split_sentences
from support.dataset_helpers import FIX, DataConfig

RULER_TASKS = get_args(RulerTask)
REFERENCE_DATASETS = ("biography", "hotpot_qa", "musique", "niah")
DEFAULT_SOURCES = {
    "biography": (str(FIX / "biography"), "1k", "train"),
    "hotpot_qa": (str(FIX / "hotpot_qa.jsonl"), "fullwiki", "validation"),
    "musique": (str(FIX / "musique.jsonl"), "default", "validation"),
    "niah": (str(FIX / "niah.jsonl"), "4096", "train"),
}


def dc(name: str, num_samples: int, **overrides: Any) -> DataConfig:
    source, subset, split = DEFAULT_SOURCES[name]
    fields: dict[str, Any] = {"source": source, "subset": subset, "split": split}
    fields.update(overrides)
    return DataConfig(dataset_name=name, num_samples=num_samples, **fields)


def load(config: DataConfig, tokenizer: Any = None, **kwargs: Any) -> list[RawSample]:
    recipe = get_recipe(config.dataset_name)
    samples, _ = recipe.load(config, recipe.kwargs_model.model_validate(kwargs), tokenizer)
    return samples


def load_info(config: DataConfig, **kwargs: Any) -> tuple[list[RawSample], SourceInfo]:
    recipe = get_recipe(config.dataset_name)
    return recipe.load(config, recipe.kwargs_model.model_validate(kwargs), None)


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def to_parquet(jsonl: Path, target: Path) -> Path:
    import pyarrow.json
    import pyarrow.parquet

    target.parent.mkdir(parents=True, exist_ok=True)
    pyarrow.parquet.write_table(pyarrow.json.read_json(jsonl), target)
    return target


def fingerprint(samples: list[RawSample]) -> list[tuple[str, tuple[Any, ...], str, str]]:
    return [(semantic_key(s.semantic), s.parts, s.query, s.answer) for s in samples]


# -- registry and kwargs models ------------------------------------------------------------------------------


def test_registry_names_hub_ids_and_protocol() -> None:
    assert set(DATASETS) == {"biography", "hotpot_qa", "musique", "niah", "table", "chat"}
    assert {n: r.hub_id for n, r in DATASETS.items()} == {
        "biography": "alex-karev/biographies",
        "hotpot_qa": "hotpotqa/hotpot_qa",
        "musique": "dgslibisey/MuSiQue",
        "niah": "simonjegou/ruler",
        "table": "",
        "chat": "",
    }
    for name, recipe in DATASETS.items():
        assert isinstance(recipe, DatasetRecipe)
        assert recipe.name == name and get_recipe(name) is recipe
        assert recipe.kwargs_model.model_config.get("extra") == "forbid"
    known = "known: biography, chat, hotpot_qa, musique, niah, table"
    with pytest.raises(ConfigError, match=re.escape(f"unknown dataset 'hotpot' (did you mean 'hotpot_qa'? {known})")):
        get_recipe("hotpot")


def test_kwargs_defaults_are_the_reference_defaults() -> None:
    dumped = {name: DATASETS[name].kwargs_model().model_dump() for name in REFERENCE_DATASETS}
    assert dumped == {
        "biography": {"question_type": "completion", "cache_dataset": True},
        "hotpot_qa": {"add_inst": True, "add_cot": True, "difficulty": ["hard"]},
        "musique": {"add_inst": True, "add_cot": True, "cache_dataset": True},
        "niah": {"chunk_size": 4096, "max_len": -1, "tasks": None, "cache_dataset": True},
    }


BAD_KWARGS = [
    ("hotpot_qa", {"difficulty": None}, "difficulty"),
    ("hotpot_qa", {"difficulty": []}, "difficulty"),
    ("hotpot_qa", {"difficulty": "hard"}, "difficulty"),
    ("hotpot_qa", {"difficulty": ["unknown"]}, "difficulty.0"),
    ("hotpot_qa", {"difficulty": ["hard", 1]}, "difficulty.1"),
    ("hotpot_qa", {"add_inst": 1}, "add_inst"),
    ("hotpot_qa", {"add_cot": "true"}, "add_cot"),
    ("hotpot_qa", {"add_instruction": True}, "add_instruction"),
    ("hotpot_qa", {"cache_dataset": True}, "cache_dataset"),
    ("musique", {"add_inst": 0}, "add_inst"),
    ("musique", {"cache_dataset": "yes"}, "cache_dataset"),
    ("musique", {"difficulty": ["hard"]}, "difficulty"),
    ("biography", {"question_type": "qa"}, "question_type"),
    ("biography", {"tokenizer": "x"}, "tokenizer"),
    ("niah", {"chunk_size": True}, "chunk_size"),
    ("niah", {"chunk_size": 0}, "chunk_size"),
    ("niah", {"chunk_size": "4096"}, "chunk_size"),
    ("niah", {"max_len": -2}, "max_len"),
    ("niah", {"max_len": 1.5}, "max_len"),
    ("niah", {"tasks": []}, "tasks"),
    ("niah", {"tasks": ["niah"]}, "tasks.0"),
    ("niah", {"tasks": "vt"}, "tasks"),
]


@pytest.mark.parametrize(("name", "kwargs", "where"), BAD_KWARGS)
def test_invalid_data_kwargs(name: str, kwargs: dict[str, Any], where: str) -> None:
    recipe = get_recipe(name)
    with pytest.raises(ValidationError):
        recipe.kwargs_model.model_validate(kwargs)
    path = re.sub(r"\.(\d+)", r"[\1]", f"data_configs[0].data_kwargs.{where}")  # the config writes list[0]
    with pytest.raises(ConfigError, match=re.escape(path)):
        parse_data_configs([{**dataclasses.asdict(dc(name, 1)), "data_kwargs": kwargs}])


def test_needs_tokenizer_only_for_niah_max_len() -> None:
    for name, recipe in DATASETS.items():
        assert recipe.needs_tokenizer(recipe.kwargs_model()) is False, name
    niah = get_recipe("niah")
    assert niah.needs_tokenizer(niah.kwargs_model(max_len=0)) is True
    assert niah.needs_tokenizer(niah.kwargs_model(max_len=-1)) is False


# -- hotpot_qa ---------------------------------------------------------------------------------------------------


def _question_levels() -> dict[str, str]:
    return {r["question"]: r["level"] for r in rows(FIX / "hotpot_qa.jsonl")}


def test_hotpot_payload_excludes_instruction_and_cot_controls() -> None:
    on = load(dc("hotpot_qa", 3, seed=1))
    off = load(dc("hotpot_qa", 3, seed=1), add_inst=False, add_cot=False)
    assert [s.semantic for s in on] == [s.semantic for s in off]
    assert [s.parts for s in on] != [s.parts for s in off]
    by_question = {r["question"]: r for r in rows(FIX / "hotpot_qa.jsonl")}
    for sample in on:
        record = by_question[sample.semantic["query"]]
        assert sample.semantic["documents"] == ["".join(p) for p in record["context"]["sentences"]]
        assert not any(title in doc for doc in sample.semantic["documents"] for title in record["context"]["title"])
        assert sample.semantic["task"] == {} and sample.semantic["shots"] == []
        assert [p.text for p in sample.parts if isinstance(p, ContextBlock)] == sample.semantic["documents"]
        assert sample.answer == record["answer"] and sample.query == record["question"]
    assert off[0].parts[-1] == Inline(" " + off[0].semantic["query"])


def test_hotpot_difficulty_filter_is_the_subsequence_of_the_all_levels_order() -> None:
    levels = _question_levels()
    everything = load(dc("hotpot_qa", 48, seed=3), difficulty=["easy", "medium", "hard"])
    order = [s.semantic["query"] for s in everything]
    assert sorted(order) == sorted(levels)
    for difficulty in (["hard"], ["easy"], ["medium", "hard"], ["hard", "easy", "hard"]):
        expected = [q for q in order if levels[q] in difficulty]
        got = load(dc("hotpot_qa", len(expected), seed=3), difficulty=difficulty)
        assert [s.semantic["query"] for s in got] == expected
    default = load(dc("hotpot_qa", 16, seed=3))
    assert [s.semantic["query"] for s in default] == [q for q in order if levels[q] == "hard"]


def test_hotpot_shots_come_first_and_follow_the_filter() -> None:
    levels = _question_levels()
    hard = [s.semantic["query"] for s in load(dc("hotpot_qa", 16, seed=5))]
    with pytest.warns(UserWarning, match="few_shot_str is not recommended for HotpotQA"):
        samples = load(dc("hotpot_qa", 3, seed=5, num_shots=2))
    assert [shot["query"] for shot in samples[0].semantic["shots"]] == hard[:2]
    assert [s.semantic["query"] for s in samples] == hard[2:5]
    assert all(levels[shot["query"]] == "hard" for shot in samples[0].semantic["shots"])
    first = samples[0].parts[0]
    assert isinstance(first, Inline) and first.text.startswith("Context: ")
    assert samples[0].semantic["shots"][1]["answer"] in first.text


def test_hotpot_shortfall_is_an_error_naming_what_is_available() -> None:
    message = r"holds 15 usable samples .*16 rows of difficulty hard, 1 used as few-shot"
    with pytest.raises(DatasetError, match=message), pytest.warns(UserWarning):
        load(dc("hotpot_qa", 16, num_shots=1))
    assert len(load(dc("hotpot_qa", 16))) == 16


# -- musique -----------------------------------------------------------------------------------------------------


def test_musique_payload_uses_raw_question_and_ordered_paragraphs() -> None:
    on = load(dc("musique", 4, seed=2))
    off = load(dc("musique", 4, seed=2), add_inst=False, add_cot=False)
    assert [s.semantic for s in on] == [s.semantic for s in off]
    by_question = {r["question"]: r for r in rows(FIX / "musique.jsonl")}
    for sample in on:
        record = by_question[sample.semantic["query"]]
        assert sample.semantic["documents"] == [p["paragraph_text"] for p in record["paragraphs"]]
        assert "step by step" not in sample.semantic["query"] and sample.semantic["task"] == {}
    assert prompt_text(off[0].parts).endswith(" " + off[0].semantic["query"])


def test_musique_shots_are_the_last_of_the_shuffle() -> None:
    full = load(dc("musique", 36, seed=4))
    samples = load(dc("musique", 3, seed=4, num_shots=2), add_cot=False)
    queries = [s.semantic["query"] for s in full]
    assert [shot["query"] for shot in samples[0].semantic["shots"]] == queries[-2:]
    assert [s.semantic["query"] for s in samples] == queries[:3]
    assert samples[0].parts[0].text.startswith("Context: ")
    assert samples[0].parts[0].text.endswith("\n\n")


def test_musique_shortfall() -> None:
    with pytest.raises(DatasetError, match=r"holds 34 usable samples \(36 rows, 2 used as few-shot\)"):
        load(dc("musique", 35, num_shots=2), add_cot=False)


def test_musique_ignores_num_data_strs() -> None:
    assert fingerprint(load(dc("musique", 3, num_data_strs=7))) == fingerprint(load(dc("musique", 3)))


# -- biography ---------------------------------------------------------------------------------------------------


ATTRS = ("birth_date", "birth_place", "current_location", "university", "major", "company")


def test_biography_completion_and_qa_payloads() -> None:
    tests = {r["name"]: r for r in rows(FIX / "biography" / "test.jsonl")}
    completion = load(dc("biography", 5, num_data_strs=3, num_shots=1, seed=9))
    for sample in completion:
        attribute = sample.semantic["task"]["attribute"]
        assert attribute in ATTRS
        assert sample.query == "## " + sample.semantic["query"]
        name = sample.semantic["query"].split("'s ")[0]
        assert sample.semantic["query"] in [p.rstrip() for p in tests[name][attribute]]
        assert sample.answer == tests[name]["labels"][attribute]
        assert [p.text for p in sample.parts if isinstance(p, ContextBlock)] == sample.semantic["documents"]
        assert len(sample.semantic["documents"]) == 3
        assert any(doc.startswith(name + " ") for doc in sample.semantic["documents"])
        (shot,) = sample.semantic["shots"]
        assert set(shot) == {"documents", "query", "answer", "task"} and len(shot["documents"]) == 1
        assert shot["task"]["attribute"] in ATTRS
        assert len(shot["documents"][0].split(". ")) == 6
        assert sample.parts[0].text.endswith(f" {shot['answer']}.\n")
    qa = load(dc("biography", 5, num_data_strs=2, seed=9), question_type="QA")
    for sample in qa:
        assert sample.query == sample.semantic["query"] + " Respond with the answer only. Answer:"
        assert "Respond with the answer only" not in sample.semantic["query"]


def test_biography_without_documents_is_preamble_space_task() -> None:
    (sample,) = load(dc("biography", 1, seed=3))
    assert sample.semantic["documents"] == []
    assert sample.parts == (Inline(" " + sample.query),)


def test_biography_filters_rows_and_partitions_halves() -> None:
    tests = rows(FIX / "biography" / "test.jsonl")
    kept = [r for r in tests if r["birth_date"] and len(set(r["birth_date"])) > 1]
    assert len(kept) == 36
    train = {s.semantic["query"].split("'s ")[0] for s in load(dc("biography", 18, seed=0))}
    test = {s.semantic["query"].split("'s ")[0] for s in load(dc("biography", 18, split="test", seed=0))}
    assert train == {r["name"] for r in kept[:18]} and test == {r["name"] for r in kept[18:]}


def test_biography_errors() -> None:
    with pytest.raises(DatasetError, match=r"holds 16 usable samples \(18 people in this half of 36 kept rows"):
        load(dc("biography", 17, num_shots=2))
    with pytest.raises(DatasetError, match=r"num_data_strs is 19 .* at most 18"):
        load(dc("biography", 1, num_data_strs=19))
    with pytest.raises(DatasetError, match="Unknown split 'validation' for biography"):
        load(dc("biography", 1, split="validation", source="/nonexistent/never-read"))
    with pytest.raises(DatasetError, match=r"needs the tables train, test, but the single file .* holds only one"):
        load(dc("biography", 1, source=str(FIX / "biography" / "train.jsonl")))


def test_biography_tables_must_be_row_aligned(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "1k" / "train.jsonl", rows(FIX / "biography" / "train.jsonl")[:-1])
    write_jsonl(tmp_path / "1k" / "test.jsonl", rows(FIX / "biography" / "test.jsonl"))
    with pytest.raises(DatasetError, match="not row-aligned: train has 49 rows, test has 50"):
        load(dc("biography", 1, source=str(tmp_path)))


# -- niah --------------------------------------------------------------------------------------------------------


def test_niah_payload_uses_raw_context_and_has_no_shots() -> None:
    contexts = {r["context"]: r for r in rows(FIX / "niah.jsonl")}
    assert len(contexts) == 30
    samples = load(dc("niah", 4, seed=2), chunk_size=200)
    for sample in samples:
        record = contexts[sample.semantic["documents"][0]]
        assert sample.semantic == {
            "documents": [record["context"]],
            "query": record["question"],
            "shots": [],
            "task": {},
        }
        blocks = [p.text for p in sample.parts if isinstance(p, ContextBlock)]
        assert blocks == chunk_sentences(split_sentences(record["context"]), 200)
        assert len(blocks) > 1
        assert (
            sample.query == record["question"] + "\nProvide a short answer directly separated by space. Short Answer:"
        )
        assert sample.answer == " ".join(record["answer"])
        assert sample.parts[-1] == Inline(" " + sample.query)


def test_niah_partition_halves_are_disjoint_and_cover_the_table() -> None:
    train = {s.semantic["documents"][0] for s in load(dc("niah", 15))}
    test = {s.semantic["documents"][0] for s in load(dc("niah", 15, split="test"))}
    assert not train & test and len(train | test) == 30


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"split": "trian"}, "Unknown split 'trian' for niah"),
        ({"num_data_strs": 1}, "NIAH dataset requires num_data_strs to be 0"),
        ({"num_shots": 1}, "niah has no few-shot examples"),
    ],
)
def test_niah_rejects_before_loading(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        load(dc("niah", 1, source="nobody/not-a-dataset", **overrides))


def test_niah_max_len_needs_a_tokenizer() -> None:
    with pytest.raises(DatasetError, match="max_len=100 counts teacher tokens and needs a tokenizer"):
        load(dc("niah", 1), max_len=100)


def test_niah_max_len_skips_long_contexts_in_order(tokenizer: Any) -> None:
    everything = load(dc("niah", 15, seed=6))
    lengths = [len(tokenizer(s.semantic["documents"][0], add_special_tokens=False)["input_ids"]) for s in everything]
    limit = sorted(lengths)[7]
    expected = [semantic_key(s.semantic) for s, n in zip(everything, lengths, strict=True) if n <= limit]
    assert 0 < len(expected) < 15
    got = load(dc("niah", len(expected), seed=6), tokenizer, max_len=limit)
    assert [semantic_key(s.semantic) for s in got] == expected
    with pytest.raises(DatasetError, match=rf"holds {len(expected)} usable samples .*longer than max_len={limit}"):
        load(dc("niah", len(expected) + 1, seed=6), tokenizer, max_len=limit)


def test_niah_tasks_filter_is_a_subsequence_of_all_tasks() -> None:
    task_of = {r["context"]: r["task"] for r in rows(FIX / "niah.jsonl")}
    order = [s.semantic["documents"][0] for s in load(dc("niah", 15, seed=1))]
    for tasks in (["vt"], ["niah_single_1", "cwe"]):
        expected = [c for c in order if task_of[c] in tasks]
        got = load(dc("niah", len(expected), seed=1), tasks=tasks)
        assert [s.semantic["documents"][0] for s in got] == expected
        with pytest.raises(DatasetError, match=rf"holds {len(expected)} usable samples"):
            load(dc("niah", len(expected) + 1, seed=1), tasks=tasks)
    all_tasks = load(dc("niah", 15, seed=1), tasks=list(RULER_TASKS))
    assert [s.semantic["documents"][0] for s in all_tasks] == order


def test_niah_tasks_need_a_task_column(tmp_path: Path) -> None:
    stripped = [{k: v for k, v in r.items() if k != "task"} for r in rows(FIX / "niah.jsonl")]
    path = write_jsonl(tmp_path / "ruler.jsonl", stripped)
    assert len(load(dc("niah", 2, source=str(path)))) == 2
    with pytest.raises(DatasetError, match="needs a 'task' column"):
        load(dc("niah", 2, source=str(path)), tasks=["vt"])


def test_niah_shortfall() -> None:
    with pytest.raises(DatasetError, match=r"holds 15 usable samples \(15 rows in this half of 30\)"):
        load(dc("niah", 16))


# -- NIAH sentence splitting and chunking ----------------------------------------------------------------------


def test_split_empty_and_whitespace() -> None:
    assert split_sentences("") == [] and split_sentences(" \n\n\t ") == []
    assert chunk_sentences([], 10) == []


def test_first_sentence_is_not_duplicated() -> None:
    sentences = split_sentences("First sentence. Second sentence.")
    assert sentences == ["First sentence.", "Second sentence."]
    assert chunk_sentences(sentences, 4096) == ["First sentence. Second sentence."]


def test_chunk_splits_when_next_sentence_would_exceed_size() -> None:
    assert chunk_sentences(["aaaaaaaaa.", "bbbbbbbbb."], 20) == ["aaaaaaaaa.", "bbbbbbbbb."]
    assert chunk_sentences(["aaaaaaaa.", "bbbbbbbbb."], 20) == ["aaaaaaaa. bbbbbbbbb."]
    assert chunk_sentences(["x" * 30, "y."], 20) == ["x" * 30, "y."]
    assert chunk_sentences(["a.", "b.", "c."], 5) == ["a. b.", "c."]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Dr. Smith walked. Mr. Brown ran!", ["Dr. Smith walked.", "Mr. Brown ran!"]),
        ("Prices rose by 3.5 percent. Then fell.", ["Prices rose by 3.5 percent.", "Then fell."]),
        ("Fruits, e.g. apples, grow. Yes.", ["Fruits, e.g. apples, grow.", "Yes."]),
        ("Met at 9 a.m. on Tuesday. Left.", ["Met at 9 a.m. on Tuesday.", "Left."]),
        ("J. R. R. Tolkien wrote it. Done?", ["J. R. R. Tolkien wrote it.", "Done?"]),
        ("Was it? Really?! Yes...\nOk", ["Was it?", "Really?!", "Yes...", "Ok"]),
        ('He said "stop." Then left.', ['He said "stop."', "Then left."]),
        ("Title line\n\nBody text here", ["Title line", "Body text here"]),
        ("line one\nline two.", ["line one\nline two."]),
        ("The U.S. army. the end", ["The U.S. army. the end"]),
        ("她去了北京。很喜欢！Ok", ["她去了北京。", "很喜欢！", "Ok"]),
        ("key-0 is: 9052837.\n\nDr. Lee ran.", ["key-0 is: 9052837.", "Dr. Lee ran."]),
        ("No terminal punctuation", ["No terminal punctuation"]),
    ],
)
def test_sentence_splitter_rules(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


@settings(deadline=None, max_examples=200)
@given(
    text=st.text(alphabet=st.sampled_from(list("ab .!?\n\"')。e.g")), max_size=80),
    size=st.integers(1, 30),
)
def test_splitter_and_chunker_properties(text: str, size: int) -> None:
    sentences = split_sentences(text)
    assert all(s and s == s.strip() for s in sentences)
    assert "".join(sentences).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace("\n", "").strip()
    chunks = chunk_sentences(sentences, size)
    assert " ".join(chunks) == " ".join(sentences)
    for chunk in chunks:
        assert len(chunk) <= size or chunk in sentences
    assert split_sentences(text) == sentences


# -- shared guarantees: RNG isolation, prefix stability --------------------------------------------------------


def test_global_rng_is_untouched_by_loading(tokenizer: Any) -> None:
    random.seed(1234)
    state = random.getstate()
    load(dc("biography", 4, num_data_strs=2, num_shots=1))
    load(dc("hotpot_qa", 3, num_shots=0))
    load(dc("musique", 3, num_shots=1), add_cot=False)
    load(dc("niah", 3), tokenizer, max_len=10000)
    assert random.getstate() == state


def _synthetic(root: Path) -> dict[str, tuple[str, str, str]]:
    """Larger tables of our own in the real schemas (for prefix stability)."""
    hotpot = [
        {
            "id": f"h{i}",
            "question": f"Synthetic question {i}?",
            "answer": f"answer {i}",
            "type": "bridge",
            "level": "easy" if i % 5 == 0 else "hard",
            "supporting_facts": {"title": [f"T{i}"], "sent_id": [0]},
            "context": {
                "title": [f"T{i}", f"U{i}"],
                "sentences": [[f"Fact {i} one.", f" Fact {i} two."], [f"Other {i}."]],
            },
        }
        for i in range(400)
    ]
    musique = [
        {
            "id": f"m{i}",
            "paragraphs": [
                {"idx": k, "title": f"P{k}", "paragraph_text": f"Paragraph {k} of {i}.", "is_supporting": k == 0}
                for k in range(1 + i % 4)
            ],
            "question": f"Multi-hop {i}?",
            "question_decomposition": [],
            "answer": f"m{i}",
            "answer_aliases": [],
            "answerable": True,
        }
        for i in range(300)
    ]
    niah = [
        {
            "context": f"Haystack {i}. The needle for k{i} is {i * 7}.\n\nMore hay. Even more hay.",
            "question": f"What is the needle for k{i}?",
            "answer": [str(i * 7)],
            "answer_prefix": "",
            "task": RULER_TASKS[i % len(RULER_TASKS)],
            "max_new_tokens": 32,
            "length": 4096,
        }
        for i in range(600)
    ]
    train, test = [], []
    for i in range(600):
        name = f"Person {i}"
        train.append({a: [f"{name} {a} fact A.", f"{name} {a} fact B."] for a in ATTRS})
        prefixes = {a: [f"{name}'s {a} is ", f"The {a} of {name} is "] for a in ATTRS}
        test.append({**prefixes, "name": name, "labels": {a: f"{a}-{i}" for a in ATTRS}})
    write_jsonl(root / "hotpot" / "distractor" / "train.jsonl", hotpot)
    write_jsonl(root / "musique" / "train.jsonl", musique)
    write_jsonl(root / "ruler" / "4096" / "test.jsonl", niah)
    write_jsonl(root / "bio" / "10k" / "train.jsonl", train)
    write_jsonl(root / "bio" / "10k" / "test.jsonl", test)
    return {
        "hotpot_qa": (str(root / "hotpot"), "distractor", "train"),
        "musique": (str(root / "musique"), "default", "train"),
        "niah": (str(root / "ruler"), "4096", "train"),
        "biography": (str(root / "bio"), "10k", "train"),
    }


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str, str]]:
    return _synthetic(tmp_path_factory.mktemp("synthetic"))


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("biography", {"num_data_strs": 5, "num_shots": 2}),
        ("hotpot_qa", {}),
        ("musique", {"num_shots": 1}),
        ("niah", {}),
    ],
)
def test_prefix_stability_64_vs_256(
    name: str, extra: dict[str, Any], synthetic: dict[str, tuple[str, str, str]]
) -> None:
    source, subset, split = synthetic[name]
    kwargs = {"add_cot": False} if name == "musique" else {}
    base = DataConfig(name, 64, source=source, subset=subset, split=split, seed=11, **extra)
    small = load(base, **kwargs)
    large = load(dataclasses.replace(base, num_samples=256), **kwargs)
    assert len(small) == 64 and len(large) == 256
    assert fingerprint(large[:64]) == fingerprint(small)
    assert len({semantic_key(s.semantic) for s in large}) == 256


# -- sources -----------------------------------------------------------------------------------------------------


def test_directory_layouts_parquet_and_single_files_give_the_same_samples(tmp_path: Path) -> None:
    jsonl = FIX / "hotpot_qa.jsonl"
    reference = fingerprint(load(dc("hotpot_qa", 6, seed=2)))
    layouts = {
        "subset-dir": tmp_path / "a" / "fullwiki" / "validation.jsonl",
        "root-dir": tmp_path / "b" / "validation.jsonl",
    }
    for path in layouts.values():
        path.parent.mkdir(parents=True)
        shutil.copy(jsonl, path)
    to_parquet(jsonl, tmp_path / "c" / "fullwiki" / "validation.parquet")
    to_parquet(jsonl, tmp_path / "single.parquet")
    array = tmp_path / "array.json"
    array.write_text(json.dumps(rows(jsonl), ensure_ascii=False), encoding="utf-8")
    half = len(rows(jsonl)) // 2
    write_jsonl(tmp_path / "shards" / "part0.jsonl", rows(jsonl)[:half])
    write_jsonl(tmp_path / "shards" / "part1.jsonl", rows(jsonl)[half:])
    to_parquet(tmp_path / "shards" / "part0.jsonl", tmp_path / "d" / "validation-00000-of-00002.parquet")
    to_parquet(tmp_path / "shards" / "part1.jsonl", tmp_path / "d" / "validation-00001-of-00002.parquet")
    for source, kind in [
        (tmp_path / "a", "directory"),
        (tmp_path / "b", "directory"),
        (tmp_path / "c", "directory"),
        (tmp_path / "d", "directory"),
        (tmp_path / "single.parquet", "file"),
        (array, "file"),
    ]:
        samples, info = load_info(dc("hotpot_qa", 6, seed=2, source=str(source)))
        assert fingerprint(samples) == reference, source
        assert info.kind == kind and info.location == str(source.resolve())
        for path, digest in info.files:
            assert Path(path).is_absolute()
            assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == digest
    _, info = load_info(dc("hotpot_qa", 1, source=str(tmp_path / "d")))
    assert [Path(p).name for p, _ in info.files] == [
        "validation-00000-of-00002.parquet",
        "validation-00001-of-00002.parquet",
    ]


def test_source_info_json_and_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(FIX / "musique.jsonl", tmp_path / "validation.jsonl")
    monkeypatch.chdir(tmp_path)
    _, info = load_info(dc("musique", 1, source="."))
    digest = hashlib.sha256((tmp_path / "validation.jsonl").read_bytes()).hexdigest()
    assert info.to_json() == {
        "kind": "directory",
        "location": str(tmp_path.resolve()),
        "files": [{"path": str((tmp_path / "validation.jsonl").resolve()), "sha256": digest}],
        "fingerprints": {},
    }
    _, info = load_info(dc("musique", 1, source="validation.jsonl"))
    assert info.kind == "file" and info.files == ((str((tmp_path / "validation.jsonl").resolve()), digest),)


def test_biography_directory_with_subset_folder_and_parquet(tmp_path: Path) -> None:
    reference = fingerprint(load(dc("biography", 4, num_data_strs=2, seed=5)))
    for table in ("train", "test"):
        to_parquet(FIX / "biography" / f"{table}.jsonl", tmp_path / "1k" / f"{table}.parquet")
    samples, info = load_info(dc("biography", 4, num_data_strs=2, seed=5, source=str(tmp_path)))
    assert fingerprint(samples) == reference
    assert [Path(p).name for p, _ in info.files] == ["train.parquet", "test.parquet"]


def test_missing_split_names_the_paths_tried(tmp_path: Path) -> None:
    (tmp_path / "fullwiki").mkdir()
    shutil.copy(FIX / "hotpot_qa.jsonl", tmp_path / "fullwiki" / "train.jsonl")
    with pytest.raises(DatasetError) as info:
        load(dc("hotpot_qa", 1, source=str(tmp_path)))
    message = str(info.value)
    assert "no file for split 'validation'" in message
    assert (
        str(tmp_path / "fullwiki" / "validation.jsonl") in message and str(tmp_path / "validation.parquet") in message
    )


def test_biography_directory_missing_test_table(tmp_path: Path) -> None:
    shutil.copy(FIX / "biography" / "train.jsonl", tmp_path / "train.jsonl")
    with pytest.raises(DatasetError, match="no file for split 'test'"):
        load(dc("biography", 1, source=str(tmp_path)))


def test_ambiguous_split_files(tmp_path: Path) -> None:
    shutil.copy(FIX / "hotpot_qa.jsonl", tmp_path / "validation.jsonl")
    to_parquet(FIX / "hotpot_qa.jsonl", tmp_path / "validation.parquet")
    with pytest.raises(DatasetError, match="ambiguous"):
        load(dc("hotpot_qa", 1, source=str(tmp_path)))


@pytest.mark.parametrize("source", ["./missing-dir", "/definitely/not/here.jsonl", "missing.parquet", "~/nope-xyz"])
def test_missing_local_paths(source: str) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        load(dc("musique", 1, source=source))


def test_unsupported_file_type(tmp_path: Path) -> None:
    path = tmp_path / "rows.xlsx"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(DatasetError, match=r"is not \.jsonl, \.json, \.parquet, \.csv or \.tsv"):
        load(dc("musique", 1, source=str(path)))


def test_malformed_json_is_a_dataset_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text('{"question": "a", "answer": "b", "paragraphs": []}\n{"question": \n')
    with pytest.raises(DatasetError, match=r"broken\.jsonl line 2 is not valid JSON \(Expecting value at column 14\)"):
        load(dc("musique", 1, source=str(path)))


def test_wrong_schema_is_a_dataset_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "x.jsonl", [{"question": "q", "answer": "a"}])
    with pytest.raises(DatasetError, match=r"column 'paragraphs' is missing .*\(its columns: question, answer\)"):
        load(dc("musique", 1, source=str(path)))
    with pytest.raises(DatasetError, match="column 'context' is missing"):
        load(dc("hotpot_qa", 1, source=str(path)))


@pytest.mark.parametrize(("name", "hub_id"), [(n, DATASETS[n].hub_id) for n in REFERENCE_DATASETS])
def test_hub_sources_go_through_datasets_and_fail_clearly_offline(name: str, hub_id: str) -> None:
    with pytest.raises(DatasetError, match=re.escape(f"hub dataset '{hub_id}'")) as info:
        load(dc(name, 1, source=None))
    assert "set source to a local copy" in str(info.value)
    with pytest.raises(DatasetError, match="no local file or directory named 'someone/mirror' exists either"):
        load(dc(name, 1, source="someone/mirror"))


def test_directory_declaring_configs_loads_through_datasets(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    shutil.copy(FIX / "hotpot_qa.jsonl", tmp_path / "data" / "fw-val.jsonl")
    (tmp_path / "README.md").write_text(
        "---\nconfigs:\n- config_name: fullwiki\n  data_files:\n"
        "  - split: validation\n    path: data/fw-val.jsonl\n---\n"
    )
    samples, info = load_info(dc("hotpot_qa", 5, seed=8, source=str(tmp_path)))
    assert fingerprint(samples) == fingerprint(load(dc("hotpot_qa", 5, seed=8)))
    assert info.kind == "directory"
    assert {Path(p).name for p, _ in info.files} == {"README.md", "fw-val.jsonl"}


# -- bundled samples ---------------------------------------------------------------------------------------------


SAMPLE_CONFIGS = {
    "biography": DataConfig("biography", 4, num_data_strs=2, subset="1k", split="train"),
    "hotpot_qa": DataConfig("hotpot_qa", 4, subset="fullwiki", split="train"),
    "musique": DataConfig("musique", 4, subset="default", split="train"),
    "niah": DataConfig("niah", 4, subset="4096", split="train"),
}


@pytest.mark.parametrize("name", sorted(REFERENCE_DATASETS))
def test_bundled_samples_load_render_and_tokenize(name: str, tokenizer: Any) -> None:
    source = sample_source(name)
    assert source.is_dir() and source.parent == SAMPLES_DIR
    config = dataclasses.replace(SAMPLE_CONFIGS[name], source=str(source))
    samples, info = load_info(config, **({"chunk_size": 120} if name == "niah" else {}))
    assert len(samples) == 4 and info.kind == "directory" and info.files
    assert len({semantic_key(s.semantic) for s in samples}) == 4
    for sample in samples:
        for template in ("default", "tokenizer_chat", "qwen_3_chat"):
            spec = TEMPLATES[template]
            parts = spec.render(sample.parts, spec.kwargs_model(), tokenizer)
            _, spans = tokenize_prompt(parts, tokenizer)
            assert len(spans) == len(parts)
    if name == "niah":
        assert any(sum(isinstance(p, ContextBlock) for p in s.parts) > 1 for s in samples)
