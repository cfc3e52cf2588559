"""Distil the tiny demo teacher with Hugging Face ``Trainer``: a standard Trainer script with two extra arguments.

    uv run python examples/trainer_tiny.py [--workdir DIR] [--steps 100] [--kl-weight 1.0] [--temperature 2.0]

:class:`gencache.training.DistillationTrainer` is a ``transformers.Trainer`` whose loss is
:func:`gencache.training.distillation_loss` against the ``teacher`` it is given, run online on every batch.
:class:`~gencache.training.DistillationDataset` items and :class:`~gencache.training.DistillationCollator` batches
hold model inputs only, so the default ``TrainingArguments`` (``remove_unused_columns=True``) work as they are.
The logs carry ``ce`` and ``kl`` beside ``loss``; see ``distil_tiny.py`` for why the KL rises on this random
teacher while the total falls.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny_setup import distillation_data, load_teacher, make_student, prepare

from gencache.training import DistillationCollator, DistillationTrainer


def train(
    workdir: Path, *, steps: int = 100, kl_weight: float = 1.0, temperature: float = 2.0, seed: int = 0
) -> list[dict[str, Any]]:
    """Train for ``steps`` steps; the Trainer's log history (one entry per logged step, then the summary)."""
    import transformers

    setup = prepare(workdir)
    tokenizer, teacher = load_teacher(setup)
    args = transformers.TrainingArguments(
        output_dir=str(workdir / "trainer-out"),
        max_steps=steps,
        per_device_train_batch_size=4,
        learning_rate=3e-3,
        logging_steps=max(1, steps // 10),
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=seed,
    )
    trainer = DistillationTrainer(
        model=make_student(teacher, seed),
        args=args,
        train_dataset=distillation_data(setup, tokenizer),
        data_collator=DistillationCollator(tokenizer, padding_side="right"),
        processing_class=tokenizer,
        teacher=teacher,  # the two extra arguments: the teacher, and how to weigh its term
        kl_weight=kl_weight,
        temperature=temperature,
    )
    trainer.train()
    return list(trainer.state.log_history)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Distil the tiny demo teacher with transformers.Trainer.")
    parser.add_argument("--workdir", type=Path, default=None, help="where the teacher and cache live (temp dir)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--kl-weight", type=float, default=1.0)
    parser.add_argument("--temperature", type=float, default=2.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gencache-trainer-") as scratch:
        history = train(
            args.workdir or Path(scratch), steps=args.steps, kl_weight=args.kl_weight, temperature=args.temperature
        )
    for entry in history:
        if "loss" in entry:
            print(f"step {entry['step']:4d}  loss {entry['loss']:.3f}  (ce {entry['ce']:.3f}, kl {entry['kl']:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
