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

Memory: the answer positions are processed ``chunk_size`` at a time, upcast to float32, and each chunk's loss and
its gradient with respect to the student's logits are computed together (in closed form), so no more than one chunk
of positions x vocabulary exists in float32 at a time. The gradient is written into one buffer of the student
logits' own shape and dtype, what autograd would hand back anyway. The teacher's logits may be on another device or
in another dtype: each chunk is copied to the student's device as it is used.
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
    """The loss settings that do not depend on a batch (checked by the trainer before its first step)."""
    if type(chunk_size) is not int or chunk_size < 1:
        raise ConfigError(f"chunk_size must be a positive integer, got {chunk_size!r}.")
    if not temperature > 0:
        raise ConfigError(f"temperature must be positive, got {temperature!r}.")


def _chunk_loss(
    student: torch.Tensor, teacher: torch.Tensor | None, targets: torch.Tensor, options: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-row CE and KL of one chunk and, when ``options["want_grad"]``, ``options["scale"]`` times the gradient
    of the loss (summed over the rows) with respect to the student's logits."""
    temperature, ce_weight, kl_weight = options["temperature"], options["ce_weight"], options["kl_weight"]
    want_grad = options["want_grad"]
    rows = torch.arange(len(targets), device=student.device)
    z = student.float()  # the chunk is a private copy (index_select), so it may be changed in place
    log_p = torch.log_softmax(z, dim=-1)
    ce = -log_p[rows, targets]
    kl = torch.zeros_like(ce)
    grad: torch.Tensor | None = None
    if teacher is not None:
        log_q = log_p if temperature == 1.0 else torch.log_softmax(z.div_(temperature), dim=-1)
        del z
        zero_mass = bool(torch.isneginf(teacher).any())
        t = teacher.to(device=student.device, dtype=torch.float32)
        log_t = torch.log_softmax(t if temperature == 1.0 else t.div_(temperature), dim=-1)
        del t
        p_t = log_t.exp()
        terms = log_t.sub_(log_q).mul_(p_t)
        if zero_mass:
            terms.nan_to_num_(nan=0.0)  # 0 * log 0 is 0 (a teacher logit of -inf)
        kl = terms.sum(dim=-1)
        del terms, log_t
        if want_grad:
            # d(CE)/dz_s = softmax(z_s) - onehot; d(T**2 * KL)/dz_s = T * (softmax(z_s / T) - softmax(z_t / T))
            if temperature == 1.0:
                grad = log_p.exp_().mul_(ce_weight + kl_weight).sub_(p_t, alpha=kl_weight)
            else:
                grad = log_p.exp_().mul_(ce_weight)
                grad.add_(log_q.exp_().sub_(p_t), alpha=kl_weight * temperature)
        del log_q, p_t
    elif want_grad:
        del z
        grad = log_p.exp_().mul_(ce_weight)
    del log_p
    if grad is not None:
        grad[rows, targets] -= ce_weight
        grad.mul_(options["scale"])
    return ce, kl, grad


class _ChunkedDistillation(torch.autograd.Function):
    """Forward computes the loss and the gradient chunk by chunk; backward hands the stored gradient back."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, student: torch.Tensor, teacher: torch.Tensor | None, labels: torch.Tensor, options: dict[str, Any]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        vocabulary = student.shape[-1]
        positions, targets = answer_positions(labels.to(student.device))
        count = int(positions.numel())
        denominator = float(options["num_items"]) if options["num_items"] is not None else float(max(count, 1))
        flat_student = student.detach().reshape(-1, vocabulary)
        flat_teacher = None if teacher is None else teacher.detach().reshape(-1, vocabulary)
        teacher_positions = positions if teacher is None else positions.to(teacher.device)
        grad = torch.zeros_like(flat_student) if options["want_grad"] else None
        ce_sum = torch.zeros((), dtype=torch.float64, device=student.device)
        kl_sum = torch.zeros((), dtype=torch.float64, device=student.device)
        chunk, options = int(options["chunk_size"]), {**options, "scale": 1.0 / denominator}
        for start in range(0, count, chunk):
            index, teacher_index = positions[start : start + chunk], teacher_positions[start : start + chunk]
            teacher_chunk = None if flat_teacher is None else flat_teacher.index_select(0, teacher_index)
            ce, kl, chunk_grad = _chunk_loss(
                flat_student.index_select(0, index), teacher_chunk, targets[start : start + chunk], options
            )
            ce_sum += ce.sum(dtype=torch.float64)
            kl_sum += kl.sum(dtype=torch.float64)
            if grad is not None and chunk_grad is not None:
                grad.index_copy_(0, index, chunk_grad.to(grad.dtype))
            del ce, kl, chunk_grad, teacher_chunk
        weight = options["kl_weight"] * options["temperature"] ** 2
        loss = ((options["ce_weight"] * ce_sum + weight * kl_sum) / denominator).float()
        ctx.grad = None if grad is None else grad.view(student.shape)
        per_position = float(max(count, 1))
        ce_mean, kl_mean = (ce_sum / per_position).float(), (kl_sum / per_position).float()
        ctx.mark_non_differentiable(ce_mean, kl_mean)
        return loss, ce_mean, kl_mean

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_loss: torch.Tensor, *unused: Any) -> tuple[torch.Tensor | None, None, None, None]:
        grad: torch.Tensor | None = ctx.grad
        ctx.grad = None
        return None if grad is None else grad.mul_(grad_loss.to(grad.dtype)), None, None, None


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
    """``ce_weight * CE + kl_weight * T**2 * KL`` over the answer positions of ``labels`` (unshifted, as a Hugging
    Face causal LM takes them; see the module docstring). ``teacher_logits`` may be on any device or dtype, and
    ``None`` only with ``kl_weight=0``. A batch with no answer position has loss 0."""
    check_loss_settings(temperature=temperature, chunk_size=chunk_size)
    if teacher_logits is None and kl_weight != 0.0:
        raise ConfigError("teacher_logits is None but kl_weight is not 0; pass the teacher's logits or kl_weight=0.")
    student, teacher = student_logits, teacher_logits
    if student.dim() != 3 or tuple(labels.shape) != tuple(student.shape[:2]):
        raise ConfigError(f"labels {tuple(labels.shape)} must be the (batch, length) of logits {tuple(student.shape)}.")
    if teacher is not None and tuple(teacher.shape) != tuple(student.shape):
        error = CompatibilityError if teacher.shape[-1] != student.shape[-1] else ConfigError
        raise error(
            f"teacher_logits {tuple(teacher.shape)} do not match student_logits {tuple(student.shape)} (batch, "
            "length, vocabulary): run the teacher on the same input_ids, with one shared vocabulary."
        )
    options = {
        "temperature": float(temperature),
        "ce_weight": float(ce_weight),
        "kl_weight": float(kl_weight),
        "chunk_size": chunk_size,
        "num_items": int(num_items) if num_items is not None and int(num_items) > 0 else None,
        "want_grad": student_logits.requires_grad and torch.is_grad_enabled(),
    }
    loss, ce, kl = _ChunkedDistillation.apply(student, teacher if kl_weight != 0.0 else None, labels, options)
    positions = int((labels[:, 1:] != IGNORE_INDEX).sum())
    return DistillationLoss(loss=loss, ce=ce.detach(), kl=kl.detach(), positions=positions)
