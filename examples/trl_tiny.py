"""Fine-tune a student on the tiny demo teacher's cached answers with TRL's ``SFTTrainer``, token for token.

    uv run python examples/trl_tiny.py [--workdir DIR] [--steps 30]

``DistillationDataset.to_hf_dataset()`` is a ``datasets.Dataset`` of the exact stored ids: ``input_ids`` (prompt
then the teacher's answer), ``labels`` (-100 over the prompt) and TRL's ``completion_mask``. SFTTrainer sees
``input_ids`` and trains on them as they are, so the loss covers exactly the cached answer tokens; handing it the
answer *text* instead would re-tokenize it and lose the teacher's token boundaries. Two settings matter:
``completion_only_loss=True`` and ``max_length=None`` (TRL's default of 1,024 truncates rows from the end, which
would cut answers; bound lengths with ``DistillationDataset(max_length=..., truncation="left")`` instead). This is
plain cross-entropy on the teacher's tokens; for the online KL term use ``trainer_tiny.py``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny_setup import distillation_data, load_teacher, make_student, prepare


def train(workdir: Path, *, steps: int = 30, seed: int = 0) -> tuple[list[dict[str, Any]], Any]:
    """Train for ``steps`` steps; the Trainer's log history and the datasets view it trained on."""
    import trl

    setup = prepare(workdir)
    tokenizer, teacher = load_teacher(setup)
    view = distillation_data(setup, tokenizer).to_hf_dataset()
    config = trl.SFTConfig(
        output_dir=str(workdir / "sft-out"),
        max_steps=steps,
        per_device_train_batch_size=4,
        learning_rate=3e-3,
        logging_steps=max(1, steps // 10),
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=seed,
        completion_only_loss=True,
        max_length=None,
    )
    trainer = trl.SFTTrainer(
        model=make_student(teacher, seed), args=config, train_dataset=view, processing_class=tokenizer
    )
    trainer.train()
    return list(trainer.state.log_history), view


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train on the tiny teacher's cached tokens with TRL's SFTTrainer.")
    parser.add_argument("--workdir", type=Path, default=None, help="where the teacher and cache live (temp dir)")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gencache-trl-") as scratch:
        history, view = train(args.workdir or Path(scratch), steps=args.steps)
    answer_tokens = sum(sum(mask) for mask in view["completion_mask"])
    print(f"{len(view)} rows, {answer_tokens} cached answer tokens")
    for entry in history:
        if "loss" in entry:
            print(f"step {entry['step']:4d}  loss {entry['loss']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
