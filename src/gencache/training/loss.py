"""The online distillation loss: cross-entropy on the cached answer tokens plus a KL term against the teacher's
logits, computed on the same ``input_ids``, over answer positions only.

With ``z_s`` and ``z_t`` the student's and the teacher's logits at a position ``t`` whose next label
``labels[t + 1]`` is not -100 (an answer token; the position predicts it, as in Hugging Face causal LMs), ``N``
the number of such positions and ``T`` the temperature::

    loss = ce_weight * CE + kl_weight * T**2 * KL
    CE   = (1 / N) * sum_t -log softmax(z_s)[labels[t + 1]]
    KL   = (1 / N) * sum_t KL(softmax(z_t / T) || softmax(z_s / T))

``T**2`` keeps the KL term's gradient on the scale of the cross-entropy's as ``T`` changes. ``N`` is the batch's
answer positions, or ``num_items`` when given (Hugging Face ``Trainer`` passes the count over all the batches of
one optimizer step, so gradient accumulation sums to the same mean).

Memory: the answer positions are processed ``chunk_size`` at a time; each chunk is upcast to float32 and its loss
and its gradient with respect to the student's logits (by autograd, within the chunk) are computed together, so
no more than one chunk of positions x vocabulary exists in float32 at a time. The gradient is written into one
buffer of the student logits' own shape and dtype, what autograd would hand back anyway. The teacher's logits may
be on another device or in another dtype: each chunk is copied to the student's device as it is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from gencache.core.errors import CompatibilityError, ConfigError
from gencache.training.collate import IGNORE_INDEX

DEFAULT_CHUNK_SIZE = 512


@dataclass(frozen=True)
class DistillationLoss:
    """The loss (differentiable with respect to the student's logits) and its parts, each a per-position mean over
    this batch's answer positions (detached float32): ``ce``, ``kl`` (before ``T**2`` and the weight), and
    ``positions``, the number of answer positions."""

    loss: torch.Tensor
    ce: torch.Tensor
    kl: torch.Tensor
    positions: int


def answer_positions(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The flat positions ``b * L + t`` (of a ``(B, L)`` batch) whose next label is an answer token, and those
    labels: position ``t`` predicts ``labels[b, t + 1]``."""
    targets = torch.full_like(labels, IGNORE_INDEX)
    targets[:, :-1] = labels[:, 1:]
    flat = targets.reshape(-1)
    positions = (flat != IGNORE_INDEX).nonzero().squeeze(1)
    return positions, flat[positions]


def check_loss_settings(*, temperature: float, chunk_size: int) -> None:
    """The loss settings that do not depend on a batch: a positive ``temperature`` and a positive integer
    ``chunk_size``; one :class:`ConfigError` otherwise."""
    if type(chunk_size) is not int or chunk_size < 1:
        raise ConfigError(f"chunk_size must be a positive integer, got {chunk_size!r}.")
    if not temperature > 0:
        raise ConfigError(f"temperature must be positive, got {temperature!r}.")


class _ChunkedDistillation(torch.autograd.Function):
    """Forward computes the loss and its gradient chunk by chunk; backward hands the stored gradient back."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        student: torch.Tensor,
        teacher: torch.Tensor | None,
        labels: torch.Tensor,
        weights: tuple[float, float, float],
        chunk: int,
        num_items: int | None,
        want_grad: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        temperature, ce_weight, kl_weight = weights
        positions, targets = answer_positions(labels.to(student.device))
        count = int(positions.numel())
        denominator = float(num_items or max(count, 1))
        flat_student = student.detach().reshape(-1, student.shape[-1])
        flat_teacher = None if teacher is None else teacher.detach().reshape(-1, student.shape[-1])
        grad = torch.zeros_like(flat_student) if want_grad else None
        sums = torch.zeros(2, dtype=torch.float64, device=student.device)
        for start in range(0, count, chunk):
            index = positions[start : start + chunk]
            with torch.enable_grad():
                z = flat_student.index_select(0, index).float().requires_grad_(want_grad)
                ce = torch.nn.functional.cross_entropy(z, targets[start : start + chunk], reduction="none")
                kl = torch.zeros_like(ce)
                if flat_teacher is not None:
                    t = flat_teacher.index_select(0, index.to(flat_teacher.device))
                    log_t = torch.log_softmax(t.to(device=z.device, dtype=torch.float32) / temperature, dim=-1)
                    terms = log_t.exp() * (log_t - torch.log_softmax(z / temperature, dim=-1))
                    kl = terms.nan_to_num(nan=0.0).sum(dim=-1)  # 0 * log 0 is 0 (a teacher logit of -inf)
                if grad is not None:
                    total = (ce_weight * ce + kl_weight * temperature**2 * kl).sum() / denominator
                    grad.index_copy_(0, index, torch.autograd.grad(total, z)[0].to(grad.dtype))
            sums += torch.stack([ce.detach().sum(dtype=torch.float64), kl.detach().sum(dtype=torch.float64)])
        ce_sum, kl_sum = sums.unbind()
        loss = ((ce_weight * ce_sum + kl_weight * temperature**2 * kl_sum) / denominator).float()
        ctx.grad = None if grad is None else grad.view(student.shape)
        ce_mean, kl_mean = (sums / max(count, 1)).float().unbind()
        ctx.mark_non_differentiable(ce_mean, kl_mean)
        return loss, ce_mean, kl_mean

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_loss: torch.Tensor, *unused: Any) -> tuple[torch.Tensor | None, ...]:
        grad: torch.Tensor | None = ctx.grad
        ctx.grad = None
        return (None if grad is None else grad.mul_(grad_loss.to(grad.dtype)), *[None] * 6)


def distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor | None,
    labels: torch.Tensor,
    *,
    temperature: float = 1.0,
    ce_weight: float = 1.0,
    kl_weight: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    num_items: int | torch.Tensor | None = None,
) -> DistillationLoss:
    """``ce_weight * CE + kl_weight * T**2 * KL`` over the answer positions of ``labels`` (see the module
    docstring for the formula and the memory bound).

    ``student_logits`` is ``(batch, length, vocabulary)``, the student's output on ``input_ids``;
    ``teacher_logits`` the teacher's on the same ``input_ids`` (any device or dtype; ``None`` only with
    ``kl_weight=0``); ``labels`` the batch's labels (-100 off the answer), unshifted as a Hugging Face causal LM
    takes them. ``num_items`` replaces the batch's answer-position count as the denominator. A batch with no
    answer position has loss 0.
    """
    check_loss_settings(temperature=temperature, chunk_size=chunk_size)
    if teacher_logits is None and kl_weight != 0.0:
        raise ConfigError("teacher_logits is None but kl_weight is not 0; pass the teacher's logits or kl_weight=0.")
    if student_logits.dim() != 3 or tuple(labels.shape) != tuple(student_logits.shape[:2]):
        raise ConfigError(
            f"labels {tuple(labels.shape)} do not match the student's logits {tuple(student_logits.shape)} (batch, "
            "length, vocabulary)."
        )
    teacher = teacher_logits if kl_weight != 0.0 else None
    if teacher is not None and teacher.shape[-1] != student_logits.shape[-1]:
        raise CompatibilityError(
            f"The teacher's vocabulary has {teacher.shape[-1]} logits and the student's {student_logits.shape[-1]}; "
            "distillation needs one shared vocabulary."
        )
    if teacher is not None and tuple(teacher.shape) != tuple(student_logits.shape):
        raise ConfigError(
            f"teacher_logits {tuple(teacher.shape)} do not match student_logits {tuple(student_logits.shape)}; run "
            "the teacher on the same input_ids."
        )
    items = int(num_items) if num_items is not None and int(num_items) > 0 else None
    want_grad = student_logits.requires_grad and torch.is_grad_enabled()
    weights = (float(temperature), float(ce_weight), float(kl_weight))
    loss, ce, kl = _ChunkedDistillation.apply(student_logits, teacher, labels, weights, chunk_size, items, want_grad)
    positions = int((labels[:, 1:] != IGNORE_INDEX).sum())
    return DistillationLoss(loss=loss, ce=ce.detach(), kl=kl.detach(), positions=positions)
