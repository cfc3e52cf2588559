"""DistillationDataset and its collator on the tiny teacher's demo artifact: ids, labels and masks exactly as
specified, keys matching the samples, the sequence choice, truncation, and a bad setup failing before any batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from gencache.artifact.reader import CacheReader
from gencache.core.errors import CompatibilityError, ConfigError, MissingEntriesError
from gencache.data.samples import build_samples
from gencache.training import DistillationCollator, DistillationDataset, pad_batch
from support.storage_helpers import Entry, write_artifact


@pytest.fixture(scope="module")
def demo(demo_run: dict[str, Any]) -> dict[str, Any]:
    """The session's demo run (see conftest), with its data configs and its teacher's tokenizer."""
    from gencache.generation.teacher import load_tokenizer

    config = json.loads(demo_run["config_path"].read_text())
    return {**demo_run, "data_configs": config["data_configs"], "tokenizer": load_tokenizer(demo_run["teacher"])}


def dataset(demo: dict[str, Any], paths: Any = None, **options: Any) -> DistillationDataset:
    return DistillationDataset(
        demo["artifact"] if paths is None else paths,
        demo["tokenizer"],
        config=demo["config_path"],
        model_path=demo["teacher"],
        tokenizer_path=demo["teacher"],
        dtype="float32",
        **options,
    )


def test_items_are_prompt_then_answer_with_the_prompt_masked(demo: dict[str, Any]) -> None:
    data = dataset(demo)
    samples = build_samples(demo["data_configs"], demo["tokenizer"])
    reader = CacheReader(demo["artifact"])
    assert len(data) == len(samples) == sum(dc["num_samples"] for dc in demo["data_configs"])
    for index, sample in enumerate(samples):
        item = data[index]
        answer = reader[sample.key].sequences[0].tolist()
        prompt = list(sample.input_ids or ())
        assert item["key"] == sample.key and item["prompt_length"] == len(prompt) > 0
        assert item["input_ids"].tolist() == prompt + answer
        assert item["labels"].tolist() == [-100] * len(prompt) + answer
        assert item["attention_mask"].tolist() == [1] * (len(prompt) + len(answer))
        assert item["input_ids"].dtype == item["labels"].dtype == torch.int64
        assert item["finish_reason"] == reader[sample.key].finish_reasons[0] and item["sequence_index"] == 0
    assert data[-1]["key"] == samples[len(samples) - 1].key
    with pytest.raises(IndexError):
        data[len(data)]


def test_the_collator_pads_on_the_tokenizer_side(demo: dict[str, Any]) -> None:
    tokenizer = demo["tokenizer"]
    data = dataset(demo)
    assert tokenizer.padding_side == "left"
    loader = DataLoader(data, batch_size=4, collate_fn=DistillationCollator(tokenizer))
    rows = 0
    for batch in loader:
        width = batch["input_ids"].shape[1]
        assert set(batch) == {"input_ids", "attention_mask", "labels"}  # model inputs only
        for row, key in enumerate(batch.metadata["key"]):
            item = data[rows]
            assert item["key"] == key
            n = len(item["input_ids"])
            assert batch["input_ids"][row, width - n :].tolist() == item["input_ids"].tolist()
            assert batch["input_ids"][row, : width - n].tolist() == [tokenizer.pad_token_id] * (width - n)
            assert batch["attention_mask"][row].tolist() == [0] * (width - n) + [1] * n
            assert batch["labels"][row].tolist() == [-100] * (width - n) + item["labels"].tolist()
            assert batch.metadata["prompt_length"][row] == item["prompt_length"]
            assert batch.metadata["finish_reason"][row] == item["finish_reason"]
            rows += 1
    assert rows == len(data)
    right = pad_batch([data[0], data[1]], pad_token_id=7, padding_side="right")
    n = len(data[0]["input_ids"])
    assert right["input_ids"][0, :n].tolist() == data[0]["input_ids"].tolist()
    assert right["input_ids"][0, n:].tolist() == [7] * (right["input_ids"].shape[1] - n)
    assert right["labels"][0, n:].tolist() == [-100] * (right["input_ids"].shape[1] - n)


def test_forked_workers_serve_the_same_items(demo: dict[str, Any]) -> None:
    data = dataset(demo)
    loader = DataLoader(data, batch_size=None, num_workers=2, multiprocessing_context="fork", timeout=120)
    for index, item in enumerate(loader):
        assert item["key"] == data[index]["key"] and torch.equal(item["input_ids"], data[index]["input_ids"])


def test_a_bad_setup_fails_before_the_first_batch(demo: dict[str, Any]) -> None:
    more = [dict(dc) for dc in demo["data_configs"]]
    more[0]["num_samples"] += 2  # samples the artifact was not generated for
    with pytest.raises(MissingEntriesError, match="missing 2 required semantic samples"):
        DistillationDataset(
            demo["artifact"],
            demo["tokenizer"],
            config=more,
            model_path=demo["teacher"],
            tokenizer_path=demo["teacher"],
            dtype="float32",
        )
    with pytest.raises(CompatibilityError, match="dtype"):
        DistillationDataset(
            demo["artifact"],
            demo["tokenizer"],
            config=demo["config_path"],
            model_path=demo["teacher"],
            tokenizer_path=demo["teacher"],
            dtype=torch.bfloat16,
        )
    with pytest.raises(ConfigError, match="sequences must be one of"):
        dataset(demo, sequences="best")
    with pytest.raises(ConfigError, match="truncation must be one of"):
        dataset(demo, truncation="right")


def test_truncation_cuts_the_prompt_from_the_left_and_never_the_answer(demo: dict[str, Any]) -> None:
    full = dataset(demo)
    item = full[0]
    answer = len(item["input_ids"]) - item["prompt_length"]
    limit = item["prompt_length"] // 2 + answer
    with pytest.raises(ConfigError, match="over max_length"):
        dataset(demo, max_length=limit)  # refused up front, before any item is read
    cut = dataset(demo, max_length=limit, truncation="left")[0]
    assert len(cut["input_ids"]) == limit
    assert cut["input_ids"].tolist() == item["input_ids"].tolist()[-limit:]
    assert cut["labels"][-answer:].tolist() == item["labels"][-answer:].tolist()
    assert cut["labels"][: limit - answer].tolist() == [-100] * (limit - answer)
    for policy in ("refuse", "left"):
        with pytest.raises(ConfigError, match="answer is never cut"):
            dataset(demo, max_length=answer, truncation=policy)


def test_the_sequence_choice_with_several_answers(demo: dict[str, Any], tmp_path: Path) -> None:
    reader = CacheReader(demo["artifact"])
    entries = []
    for key in reader:
        generation = reader[key]
        first = tuple(generation.sequences[0].tolist())
        entries.append(Entry(key, (first, (*first, 5), (*first, 6, 6)), ("a", "b", "c"), ("eos", "length", "eos")))
    several = write_artifact(tmp_path / "several", entries, provenance=reader.provenance)
    firsts = dataset(demo, several)
    assert all(firsts[i]["sequence_index"] == 0 for i in range(len(firsts)))
    drawn = dataset(demo, several, sequences="random", seed=3)
    again = dataset(demo, several, sequences="random", seed=3)
    choices = [drawn[i]["sequence_index"] for i in range(len(drawn))]
    assert choices == [again[i]["sequence_index"] for i in range(len(again))] and len(set(choices)) > 1
    for i, choice in enumerate(choices):
        item = drawn[i]
        answer = item["input_ids"][item["prompt_length"] :].tolist()
        assert answer == reader[item["key"]].sequences[0].tolist() + ([], [5], [6, 6])[choice]
        assert item["finish_reason"] == ("eos", "length", "eos")[choice]
    every = dataset(demo, several, sequences="all")
    assert len(every) == 3 * len(firsts)
    assert [every[i]["sequence_index"] for i in range(6)] == [0, 1, 2, 0, 1, 2]
    assert every[4]["key"] == firsts[1]["key"]


def test_batches_hold_model_inputs_and_carry_metadata_across_processes(demo: dict[str, Any]) -> None:
    import copy
    import pickle

    data = dataset(demo)
    collate = DistillationCollator(demo["tokenizer"], padding_side="right")
    batch = collate([data[0], data[1]])
    assert list(batch) == ["input_ids", "attention_mask", "labels"]
    for again in (pickle.loads(pickle.dumps(batch)), copy.copy(batch)):  # DataLoader workers, pin_memory
        assert again.metadata == batch.metadata and torch.equal(again["input_ids"], batch["input_ids"])
    assert batch.metadata["key"] == [data[0]["key"], data[1]["key"]]
    # what Trainer's remove_unused_columns leaves of an item: the collator needs only the ids and labels
    stripped = collate([{k: data[0][k] for k in ("input_ids", "labels")}])
    assert stripped.metadata == {} and stripped["attention_mask"].tolist() == [[1] * len(data[0]["input_ids"])]
    with pytest.raises(ConfigError, match="padding_side"):
        DistillationCollator(demo["tokenizer"], padding_side="middle")


def test_a_compatibility_error_is_one_sentence_of_fix_after_the_differences(tmp_path: Path) -> None:
    from gencache.artifact.reader import CacheReader
    from gencache.core.errors import CompatibilityError
    from support.storage_helpers import PROVENANCE, make_entries, write_artifact

    reader = CacheReader(write_artifact(tmp_path / "a", make_entries(2)))
    with pytest.raises(CompatibilityError) as info:
        reader.check_compatible(
            model_path="other/teacher",
            tokenizer_path=PROVENANCE["tokenizer_path"],
            dtype="float32",
            tokenizer=PROVENANCE["tokenizer"],
        )
    message = str(info.value)
    assert "\n" not in message and "model_path (cache 'tiny/teacher', requested 'other/teacher')" in message
    assert (
        message.endswith(
            "To fix it, train with the cache's teacher, tokenizer and dtype, or regenerate the cache with this teacher."
        )
        and "; or " not in message
    )
