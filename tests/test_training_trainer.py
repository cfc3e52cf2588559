"""gencache's training pieces with Hugging Face Trainer and TRL on the demo's tiny teacher: Trainer takes
DistillationDataset + DistillationCollator under either remove_unused_columns, DistillationTrainer adds the online
KL term with a teacher, SFTTrainer trains on the datasets view on exactly the stored answer tokens, and a
vocabulary mismatch fails before the first step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from gencache.artifact.reader import CacheReader
from gencache.core.errors import CompatibilityError, OutputExistsError
from gencache.training import DistillationCollator, DistillationDataset

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def demo(demo_run: dict[str, Any]) -> dict[str, Any]:
    """The session's demo run (see conftest), with its teacher's tokenizer."""
    from gencache.generation.teacher import load_tokenizer

    return {**demo_run, "tokenizer": load_tokenizer(demo_run["teacher"])}


@pytest.fixture(scope="module")
def data(demo: dict[str, Any]) -> DistillationDataset:
    return DistillationDataset(
        demo["artifact"],
        demo["tokenizer"],
        config=demo["config_path"],
        model_path=demo["teacher"],
        tokenizer_path=demo["teacher"],
        dtype="float32",
        max_length=512,
        truncation="left",
    )


@pytest.fixture(scope="module")
def teacher(demo: dict[str, Any]) -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(demo["teacher"], dtype=torch.float32)


def student(teacher: Any, *, vocab_size: int | None = None, seed: int = 0) -> Any:
    config = teacher.config
    torch.manual_seed(seed)
    return transformers.Qwen3ForCausalLM(
        transformers.Qwen3Config(
            vocab_size=vocab_size or config.vocab_size,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            max_position_embeddings=config.max_position_embeddings,
        )
    )


def arguments(tmp_path: Path, **options: Any) -> Any:
    return transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=4,
        learning_rate=3e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        **options,
    )


def forward_keys(model: Any) -> list[list[str]]:
    """The keyword arguments every forward call of ``model`` receives."""
    calls: list[list[str]] = []
    model.register_forward_pre_hook(lambda module, args, kwargs: calls.append(sorted(kwargs)), with_kwargs=True)
    return calls


@pytest.mark.parametrize("remove_unused_columns", [True, False])
def test_trainer_takes_the_dataset_and_collator(
    data: DistillationDataset, teacher: Any, demo: dict[str, Any], tmp_path: Path, remove_unused_columns: bool
) -> None:
    model = student(teacher)
    calls = forward_keys(model)
    trainer = transformers.Trainer(
        model=model,
        args=arguments(tmp_path, remove_unused_columns=remove_unused_columns),
        train_dataset=data,
        data_collator=DistillationCollator(demo["tokenizer"]),
    )
    result = trainer.train()
    assert result.global_step == 2 and torch.isfinite(torch.tensor(result.training_loss))
    assert calls and all(set(keys) <= {"input_ids", "attention_mask", "labels", "num_items_in_batch"} for keys in calls)


def test_the_distillation_trainer_adds_the_teacher_term(
    data: DistillationDataset, teacher: Any, demo: dict[str, Any], tmp_path: Path
) -> None:
    from gencache.training import DistillationTrainer, distillation_loss

    before = {name: p.detach().clone() for name, p in teacher.named_parameters()}
    trainer = DistillationTrainer(
        model=student(teacher),
        args=arguments(tmp_path),
        train_dataset=data,
        data_collator=DistillationCollator(demo["tokenizer"]),
        processing_class=demo["tokenizer"],
        teacher=teacher,
        teacher_tokenizer=demo["tokenizer"],
        temperature=2.0,
        kl_weight=0.5,
        chunk_size=7,
    )
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    # compute_loss is the library's loss on the two models' logits
    batch = DistillationCollator(demo["tokenizer"])([data[i] for i in range(4)])
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    trainer.model.eval()
    with torch.no_grad():
        expected = distillation_loss(
            trainer.model(**inputs).logits, teacher(**inputs).logits, batch["labels"], temperature=2.0, kl_weight=0.5
        )
        got = trainer.compute_loss(trainer.model, dict(batch))
    assert isinstance(got, torch.Tensor) and got.item() == pytest.approx(expected.loss.item(), rel=1e-5)
    result = trainer.train()
    assert result.global_step == 2
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 2 and all(entry["kl"] > 0 and entry["ce"] > 0 for entry in logged)
    assert all(torch.equal(before[name], p) for name, p in teacher.named_parameters())  # the teacher never trains


def test_the_distillation_trainer_also_takes_the_datasets_view(
    data: DistillationDataset, teacher: Any, demo: dict[str, Any], tmp_path: Path
) -> None:
    from gencache.training import DistillationTrainer

    model = student(teacher)
    calls = forward_keys(model)
    trainer = DistillationTrainer(
        model=model,
        args=arguments(tmp_path),  # remove_unused_columns drops completion_mask and the metadata columns
        train_dataset=data.to_hf_dataset(),
        data_collator=DistillationCollator(demo["tokenizer"], padding_side="right"),
        teacher=teacher,
    )
    assert trainer.train().global_step == 2
    model_inputs = {"input_ids", "attention_mask", "num_items_in_batch"}  # the last Trainer's own, as for any model
    assert calls and all(set(keys) <= model_inputs for keys in calls)


def test_a_vocabulary_mismatch_fails_before_the_first_step(
    data: DistillationDataset, teacher: Any, demo: dict[str, Any], tmp_path: Path, golden_tokenizer: Any
) -> None:
    from gencache.training import DistillationTrainer

    common = {"args": arguments(tmp_path), "train_dataset": data, "teacher": teacher}
    with pytest.raises(CompatibilityError, match="vocabulary has"):
        DistillationTrainer(model=student(teacher, vocab_size=teacher.config.vocab_size + 8), **common)
    with pytest.raises(CompatibilityError, match="tokenizer"):
        DistillationTrainer(
            model=student(teacher), processing_class=demo["tokenizer"], teacher_tokenizer=golden_tokenizer, **common
        )


def test_the_datasets_view_holds_the_stored_tokens(data: DistillationDataset, tmp_path: Path) -> None:
    view = data.to_hf_dataset()
    assert len(view) == len(data)
    for index, row in enumerate(view):
        item = data[index]
        assert row["input_ids"] == item["input_ids"].tolist() and row["labels"] == item["labels"].tolist()
        prompt = item["prompt_length"]
        assert row["completion_mask"] == [0] * prompt + [1] * (len(row["input_ids"]) - prompt)
        assert row["attention_mask"] == [1] * len(row["input_ids"])
        assert (row["key"], row["finish_reason"]) == (item["key"], item["finish_reason"])
    mapped = data.to_hf_dataset(path=tmp_path / "view.arrow", metadata=False)
    assert mapped.column_names == ["input_ids", "attention_mask", "labels", "completion_mask"]
    assert mapped["input_ids"] == view["input_ids"] and mapped["labels"] == view["labels"]
    with pytest.raises(OutputExistsError):
        data.to_hf_dataset(path=tmp_path / "view.arrow")


def test_sft_trainer_trains_on_exactly_the_stored_answer_tokens(
    data: DistillationDataset, teacher: Any, demo: dict[str, Any], tmp_path: Path
) -> None:
    trl = pytest.importorskip("trl")
    seen: list[tuple[list[int], list[int]]] = []

    class Recording(trl.SFTTrainer):  # type: ignore[misc]
        def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            for ids, mask, labels in zip(inputs["input_ids"], inputs["attention_mask"], inputs["labels"], strict=True):
                real = int(mask.sum())  # TRL pads on the right
                seen.append((ids[:real].tolist(), labels[:real].tolist()))
            return super().compute_loss(model, inputs, *args, **kwargs)

    config = trl.SFTConfig(
        output_dir=str(tmp_path / "sft"),
        max_steps=3,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        completion_only_loss=True,
        max_length=None,
    )
    view = data.to_hf_dataset()
    trainer = Recording(model=student(teacher), args=config, train_dataset=view, processing_class=demo["tokenizer"])
    trainer.train()
    reader = CacheReader(demo["artifact"])
    items = [data[i] for i in range(len(data))]
    stored = {tuple(item["input_ids"].tolist()): reader[item["key"]].sequences[0].tolist() for item in items}
    assert len(seen) == len(data) == 12  # three steps of four: one epoch, every item once
    assert sorted(tuple(ids) for ids, _ in seen) == sorted(stored)  # the exact stored ids, never re-tokenized
    for ids, labels in seen:
        answer = stored[tuple(ids)]
        # the label positions are exactly the stored answer tokens, at the end of the row
        assert labels == [-100] * (len(ids) - len(answer)) + answer


def test_importing_the_training_package_does_not_import_transformers() -> None:
    probe = "import sys, gencache.training\nprint('transformers' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
