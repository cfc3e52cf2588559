"""Online distillation with Hugging Face ``Trainer`` (this module imports transformers)."""

from __future__ import annotations

import logging
from typing import Any

import torch
import transformers

from gencache.core.errors import CompatibilityError
from gencache.training.dataset import LeftOut
from gencache.training.loss import DEFAULT_CHUNK_SIZE, check_loss_settings, distillation_loss

logger = logging.getLogger(__name__)


def check_vocabularies(
    student: Any, teacher: Any, student_tokenizer: Any = None, teacher_tokenizer: Any = None
) -> None:
    """Raise one :class:`CompatibilityError` when the teacher and the student cannot be distilled token for token:
    output layers of different widths, a tokenizer with ids past the student's output layer, or two tokenizers
    (when both are given) that map some token to different ids."""
    student_size, teacher_size = (len(model.get_output_embeddings().weight) for model in (student, teacher))
    if student_size != teacher_size:
        raise CompatibilityError(
            f"The teacher's vocabulary has {teacher_size} logits and the student's {student_size}; distillation on "
            "cached teacher tokens needs one shared vocabulary (the same tokenizer and output layer width)."
        )
    for name, tokenizer in (("student", student_tokenizer), ("teacher", teacher_tokenizer)):
        if tokenizer is not None and len(tokenizer) > student_size:
            raise CompatibilityError(
                f"The {name} tokenizer has {len(tokenizer)} tokens, more than the models' {student_size} logits; "
                "use the tokenizer of these models."
            )
    if student_tokenizer is not None and teacher_tokenizer is not None:
        differing = sorted(set(student_tokenizer.get_vocab().items()) ^ set(teacher_tokenizer.get_vocab().items()))
        if differing:
            raise CompatibilityError(
                f"The student's and the teacher's tokenizers differ (at token {differing[0][0]!r}, {len(differing)} "
                "entries in all); distillation needs one shared tokenizer."
            )


class DistillationTrainer(transformers.Trainer):
    """``transformers.Trainer`` whose loss runs ``teacher`` on the batch's inputs and returns
    :func:`gencache.training.distillation_loss` of the student's logits against it (docs/training.md describes
    the keyword arguments). The teacher is put in eval mode with gradients off and moved to the training device
    unless ``move_teacher=False`` or it was dispatched with a ``device_map``. A vocabulary or tokenizer mismatch
    raises :class:`CompatibilityError` here, before the first step. The mean cross-entropy and KL of the logged
    steps are logged beside the loss as ``ce`` and ``kl``.
    """

    def __init__(
        self,
        *args: Any,
        teacher: Any,
        temperature: float = 1.0,
        ce_weight: float = 1.0,
        kl_weight: float = 1.0,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        teacher_tokenizer: Any = None,
        move_teacher: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **{**kwargs, "compute_loss_func": self._loss})
        check_vocabularies(self.model, teacher, self.processing_class, teacher_tokenizer)
        check_loss_settings(temperature=temperature, chunk_size=chunk_size)  # now, not at the first step
        teacher.eval().requires_grad_(False)
        if move_teacher and getattr(teacher, "hf_device_map", None) is None:
            teacher.to(self.args.device)
        self.teacher = teacher
        self.loss_options: dict[str, Any] = {"temperature": temperature, "ce_weight": ce_weight}
        self.loss_options |= {"kl_weight": kl_weight, "chunk_size": chunk_size}
        self._teacher_logits: torch.Tensor | None = None
        # (ce, kl) summed as a tensor over the training steps since the last log (no sync per step), and their count
        self._parts: tuple[torch.Tensor | int, int] = (0, 0)
        for data in (self.train_dataset, self.eval_dataset):  # once: what a DistillationDataset left out
            left_out = getattr(data, "left_out", None)
            if isinstance(left_out, LeftOut) and left_out:
                logger.warning("gencache: %s", left_out.describe())

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        """The teacher's logits on the batch's inputs, then ``Trainer``'s own ``compute_loss``, which calls
        :meth:`_loss` (and scales for gradient accumulation as for any loss)."""
        if self.loss_options["kl_weight"] != 0.0:
            device = next(self.teacher.parameters()).device
            with torch.no_grad():
                given = {k: v.to(device) for k, v in inputs.items() if k != "labels"}
                self._teacher_logits = self.teacher(**given).logits
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)  # type: ignore[no-any-return]

    def _loss(self, outputs: Any, labels: torch.Tensor, num_items_in_batch: Any = None) -> torch.Tensor:
        teacher_logits, self._teacher_logits = self._teacher_logits, None  # never held past its step
        parts = distillation_loss(
            outputs.logits, teacher_logits, labels, **self.loss_options, num_items=num_items_in_batch
        )
        if outputs.logits.requires_grad:  # a training step
            total, steps = self._parts
            self._parts = (total + torch.stack([parts.ce, parts.kl]), steps + 1)
        return parts.loss

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        total, steps = self._parts
        if "loss" in logs and steps:
            ce, kl = (total / steps).tolist()  # type: ignore[union-attr]
            logs, self._parts = {**logs, "ce": ce, "kl": kl}, (0, 0)
        super().log(logs, *args, **kwargs)
