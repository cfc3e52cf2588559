"""Training from the artifact alone: DistillationDataset(artifact, tokenizer) rebuilds the samples from the
artifact's checked resolved_config.json (a --limit / --set artifact, a shard base, a lone shard), Trainer trains on
it given nothing else, the selections (finish reasons, answer length, data configs, missing keys skipped) leave
out what they say and count it, the datasets view carries the join-back columns, and a damaged record is refused."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch

import gencache
from gencache.artifact.reader import CacheReader
from gencache.core.errors import ConfigError, FormatError, MissingEntriesError
from gencache.data.samples import build_samples
from gencache.training import DistillationCollator, DistillationDataset, LeftOut, to_hf_dataset
from support.storage_helpers import writable_copy

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, tiny_teacher_dir: Path) -> dict[str, Any]:
    """The demo config, a --limit 3 --set artifact of it and a 2-shard run of it."""
    from gencache.cli.demo import demo_config
    from gencache.generation.teacher import load_tokenizer

    work = tmp_path_factory.mktemp("from-artifact")
    config = work / "demo-config.json"
    config.write_text(json.dumps(demo_config(tiny_teacher_dir, work / "out")), encoding="utf-8")
    settings = {"model.generation_kwargs.max_new_tokens": 5}
    limited = gencache.generate(config, limit=3, overrides=settings, output_dir=work / "limited")
    sharded = gencache.generate(config, shards=2, output_dir=work / "sharded")
    teacher = json.loads(config.read_text())["model"]["model_path"]
    return {"config": config, "limited": limited, "sharded": sharded, "tokenizer": load_tokenizer(teacher)}


def test_a_limit_artifact_trains_with_trainer_given_only_its_path(runs: dict[str, Any], tmp_path: Path) -> None:
    data = DistillationDataset(runs["limited"], runs["tokenizer"])
    reader = CacheReader(runs["limited"])
    assert {data[i]["key"] for i in range(len(data))} == set(reader) and not data.left_out
    assert all(len(reader[data[i]["key"]].sequences[0]) <= 5 for i in range(len(data)))  # --set was recorded
    teacher = transformers.AutoModelForCausalLM.from_pretrained(reader.provenance["model_path"])
    arguments = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=2,
        report_to=[],
        save_strategy="no",
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=teacher, args=arguments, train_dataset=data, data_collator=DistillationCollator(runs["tokenizer"])
    )
    assert trainer.train().global_step == 2


def test_the_artifact_alone_gives_the_config_s_items(runs: dict[str, Any]) -> None:
    tokenizer = runs["tokenizer"]
    alone = DistillationDataset(runs["sharded"], tokenizer)
    configured = DistillationDataset(runs["sharded"], tokenizer, config=runs["config"])
    assert (
        len(alone)
        == len(configured)
        == len(build_samples(gencache.config.load_config(runs["config"]), runs["tokenizer"]))
    )
    for index in range(len(alone)):
        ours, theirs = alone[index], configured[index]
        assert ours["key"] == theirs["key"] and torch.equal(ours["input_ids"], theirs["input_ids"])
    one = DistillationDataset(f"{runs['sharded']}-shard-00001-of-00002", tokenizer)  # a lone shard: its own keys
    assert {one[i]["key"] for i in range(len(one))} == set(CacheReader(f"{runs['sharded']}-shard-00001-of-00002"))
    assert not one.left_out and one.left_out.considered == len(one)
    with pytest.raises(MissingEntriesError, match="missing"):
        DistillationDataset(f"{runs['sharded']}-shard-00001-of-00002", tokenizer, config=runs["config"])


def test_missing_skip_on_a_partial_mixture_counts_the_skipped(runs: dict[str, Any]) -> None:
    shard = f"{runs['sharded']}-shard-00000-of-00002"
    samples = build_samples(gencache.config.load_config(runs["config"]), runs["tokenizer"])
    held = set(CacheReader(shard))
    data = DistillationDataset(shard, runs["tokenizer"], config=runs["config"], missing="skip")
    assert data.left_out.missing == sum(sample.key not in held for sample in samples) > 0
    assert len(data) + data.left_out.missing == len(samples)
    assert data.left_out.as_dict() == {
        "data_configs": 0,
        "missing": data.left_out.missing,
        "finish_reason": 0,
        "max_answer_tokens": 0,
        "answers": 0,
        "min_score": 0,
        "unscored": 0,
    }
    assert "whose key no cache holds" in data.left_out.describe()


def test_selections_leave_out_what_they_say(runs: dict[str, Any], tmp_path: Path) -> None:
    data = DistillationDataset(runs["sharded"], runs["tokenizer"])
    items = [data[i] for i in range(len(data))]
    reasons = {item["finish_reason"] for item in items}
    kept = sorted(reasons)[:1]
    by_reason = data.select(finish_reasons=kept)
    assert {by_reason[i]["finish_reason"] for i in range(len(by_reason))} == set(kept)
    assert by_reason.left_out.finish_reason == sum(item["finish_reason"] not in kept for item in items)
    lengths = sorted(int((item["labels"] != -100).sum()) for item in items)
    cap = lengths[len(lengths) // 2]
    short = data.select(max_answer_tokens=cap)
    assert len(short) == sum(length <= cap for length in lengths) and short.left_out.max_answer_tokens == len(
        data
    ) - len(short)
    first_two = data.select(data_configs=[0, 1])
    assert {first_two[i]["data_config_index"] for i in range(len(first_two))} == {0, 1}
    assert first_two.left_out.data_configs == sum(item["data_config_index"] >= 2 for item in items)
    assert len(data) == len(items) and not data.left_out  # select() copies; the dataset is unchanged
    for wrong in (
        {"finish_reasons": "eos"},
        {"finish_reasons": ["done"]},
        {"data_configs": [9]},
        {"max_answer_tokens": 0},
        {"missing": "ignore"},
    ):
        with pytest.raises(ConfigError):
            data.select(**wrong)
    assert min(lengths) > 1  # the tiny teacher's answers here: a cap below the shortest leaves nothing
    # a selection that keeps nothing is refused wherever it is made, naming the selection and the counts
    cap = min(lengths) - 1
    with pytest.raises(
        ConfigError, match=rf"selection \(max_answer_tokens={cap}\) keeps no item: left out {len(data)}"
    ):
        data.select(max_answer_tokens=cap)
    with pytest.raises(ConfigError, match="keeps no item"):
        data.to_hf_dataset(max_answer_tokens=cap)
    with pytest.raises(ConfigError, match=rf"max_answer_tokens={cap}\) keeps no item"):
        DistillationDataset(runs["sharded"], runs["tokenizer"], max_answer_tokens=cap)


def test_the_datasets_view_carries_the_selection_and_the_join_back_columns(runs: dict[str, Any]) -> None:
    view = to_hf_dataset(runs["limited"], runs["tokenizer"], data_configs=[2])  # from the artifact alone
    data = DistillationDataset(runs["limited"], runs["tokenizer"]).select(data_configs=[2])
    assert view.num_rows == len(data) and set(view["data_config_index"]) == {2}
    assert {"row_id", "row_index", "reference", "data_config_index"} <= set(view.column_names)
    for row, index in zip(view, range(len(data)), strict=True):
        sample = data.sample(index)
        assert row["row_index"] == sample.row and row["row_id"] == str(sample.row) and row["reference"] == sample.answer
    again = DistillationDataset(runs["limited"], runs["tokenizer"]).to_hf_dataset(data_configs=[2])
    assert again["key"] == view["key"]


def test_the_trainer_logs_what_was_left_out_once(
    runs: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from gencache.training import DistillationTrainer

    data = DistillationDataset(runs["limited"], runs["tokenizer"], data_configs=[0])
    assert isinstance(data.left_out, LeftOut) and data.left_out.data_configs > 0
    teacher = transformers.AutoModelForCausalLM.from_pretrained(CacheReader(runs["limited"]).provenance["model_path"])
    arguments = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    with caplog.at_level(logging.WARNING, logger="gencache.training.trainer"):
        DistillationTrainer(model=teacher, teacher=teacher, args=arguments, train_dataset=data)
    assert [r.getMessage() for r in caplog.records] == [f"gencache: {data.left_out.describe()}"]


def test_a_damaged_record_is_refused(runs: dict[str, Any], tmp_path: Path) -> None:
    copy = writable_copy(runs["limited"], tmp_path / "copy")
    path = copy / "resolved_config.json"
    resolved = json.loads(path.read_text(encoding="utf-8"))
    resolved["config"]["data_configs"][0]["num_samples"] = 2  # a hand edit verify rejects
    path.write_text(json.dumps(resolved), encoding="utf-8")
    with pytest.raises(FormatError, match=r"resolved_config\.json: .*resolved_digest"):
        DistillationDataset(copy, runs["tokenizer"])
