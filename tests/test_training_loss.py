"""The online distillation loss against an independent full-vocabulary float64 computation, its edge cases, and
its memory bound: no float32 tensor larger than one chunk of positions x vocabulary is ever created."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from gencache.core.errors import CompatibilityError, ConfigError
from gencache.training import answer_positions, distillation_loss


def fixed_batch(vocabulary: int = 37, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    student = torch.randn(3, 9, vocabulary, generator=generator) * 3
    teacher = torch.randn(3, 9, vocabulary, generator=generator) * 2
    labels = torch.randint(0, vocabulary, (3, 9), generator=generator)
    labels[:, :4] = -100  # prompts
    labels[1, 7:] = -100  # padding
    labels[2, :] = -100  # a row with no answer
    labels[2, 5] = 4
    return student, teacher, labels


def reference(
    student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor, *, t: float, ce_w: float, kl_w: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """loss, d loss / d student logits and the KL, written out the textbook way in float64 over the whole
    vocabulary."""
    z_s = student.detach().double().requires_grad_(True)
    z_t = teacher.double()
    targets = labels[:, 1:]
    mask = targets != -100
    s, q = z_s[:, :-1][mask], z_t[:, :-1][mask]
    ce = F.cross_entropy(s, targets[mask])
    p_teacher = torch.softmax(q / t, dim=-1)
    kl = (p_teacher * (torch.log_softmax(q / t, dim=-1) - torch.log_softmax(s / t, dim=-1))).sum(-1).mean()
    loss = ce_w * ce + kl_w * t**2 * kl
    loss.backward()
    assert z_s.grad is not None
    return loss.detach(), z_s.grad, kl.detach()


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("chunk_size", [1, 3, 8, 4096])
def test_the_loss_and_its_gradient_match_a_float64_reference(temperature: float, chunk_size: int) -> None:
    student, teacher, labels = fixed_batch()
    student.requires_grad_(True)
    out = distillation_loss(
        student, teacher, labels, temperature=temperature, ce_weight=0.7, kl_weight=1.3, chunk_size=chunk_size
    )
    out.loss.backward()
    expected, grad, kl = reference(student, teacher, labels, t=temperature, ce_w=0.7, kl_w=1.3)
    assert out.positions == int((labels[:, 1:] != -100).sum()) == 9
    assert out.loss.item() == pytest.approx(float(expected), rel=1e-5, abs=1e-6)
    assert float(out.kl) == pytest.approx(float(kl), rel=1e-5, abs=1e-6)
    assert student.grad is not None
    torch.testing.assert_close(student.grad.double(), grad, rtol=1e-4, atol=1e-7)
    assert student.grad[:, 0].abs().sum() == 0 and student.grad[1, 6:].abs().sum() == 0  # not answer positions


def test_num_items_the_teacher_elsewhere_and_the_weights() -> None:
    student, teacher, labels = fixed_batch()
    student.requires_grad_(True)
    half = teacher.to(torch.bfloat16)  # another dtype: chunks are upcast as they are used
    out = distillation_loss(student, half, labels, temperature=2.0, num_items=24, chunk_size=5)
    expected, grad, _ = reference(student, half.float(), labels, t=2.0, ce_w=1.0, kl_w=1.0)
    assert out.loss.item() == pytest.approx(float(expected) * 9 / 24, rel=1e-5)  # sum over 24 items, not 9
    out.loss.backward()
    assert student.grad is not None
    torch.testing.assert_close(student.grad.double(), grad * 9 / 24, rtol=1e-4, atol=1e-7)
    ce_only = distillation_loss(student.detach(), None, labels, kl_weight=0.0)
    assert ce_only.loss.item() == pytest.approx(float(ce_only.ce)) and float(ce_only.kl) == 0.0
    empty = torch.full_like(labels, -100)
    nothing = distillation_loss(student, teacher, empty)
    assert nothing.loss.item() == 0.0 and nothing.positions == 0


def test_positions_predict_the_next_label() -> None:
    labels = torch.tensor([[-100, -100, 5, 6], [-100, 7, -100, -100]])
    positions, targets = answer_positions(labels)
    assert positions.tolist() == [1, 2, 4] and targets.tolist() == [5, 6, 7]


def test_bad_inputs_are_one_clear_error() -> None:
    student, teacher, labels = fixed_batch()
    with pytest.raises(CompatibilityError, match="vocabulary"):
        distillation_loss(student, teacher[..., :-1], labels)
    with pytest.raises(ConfigError, match="teacher_logits is None"):
        distillation_loss(student, None, labels)
    with pytest.raises(ConfigError, match="temperature"):
        distillation_loss(student, teacher, labels, temperature=0.0)
    with pytest.raises(ConfigError, match="chunk_size"):
        distillation_loss(student, teacher, labels, chunk_size=0)
    with pytest.raises(ConfigError, match="labels"):
        distillation_loss(student, teacher, labels[:, :-1])


class FloatSizes(TorchDispatchMode):
    """Records the element count of every floating-point tensor an operation returns, by dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.largest: dict[torch.dtype, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        for value in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                self.largest[value.dtype] = max(self.largest.get(value.dtype, 0), value.numel())
        return result


@pytest.mark.parametrize("chunk_size", [16, 48])
def test_a_wide_vocabulary_never_meets_more_than_one_float32_chunk(chunk_size: int) -> None:
    vocabulary, positions = 151_936, 96
    student = torch.randn(2, positions // 2 + 1, vocabulary, dtype=torch.bfloat16, requires_grad=True)
    teacher = torch.randn(2, positions // 2 + 1, vocabulary, dtype=torch.bfloat16)
    labels = torch.randint(0, vocabulary, (2, positions // 2 + 1))
    labels[:, 0] = -100
    with FloatSizes() as sizes:
        out = distillation_loss(student, teacher, labels, temperature=2.0, chunk_size=chunk_size)
        out.loss.backward()
    assert out.positions == positions
    # float32 work is bounded by one chunk; the unchunked computation would hold positions x vocabulary
    assert sizes.largest[torch.float32] <= chunk_size * vocabulary < positions * vocabulary
    # the one full-size buffer is the gradient, in the student's own dtype
    assert student.grad is not None and student.grad.dtype == torch.bfloat16
    assert sizes.largest[torch.bfloat16] == student.numel()


def test_a_teacher_logit_of_minus_infinity_adds_nothing() -> None:
    student, teacher, labels = fixed_batch()
    masked = teacher.clone()
    masked[..., :5] = float("-inf")  # tokens the teacher rules out
    out = distillation_loss(student, masked, labels, temperature=2.0)
    targets = labels[:, 1:]
    mask = targets != -100
    s, q = student[:, :-1][mask].double(), masked[:, :-1][mask].double()
    p = torch.softmax(q / 2, dim=-1)
    terms = torch.where(p > 0, p * (torch.log_softmax(q / 2, dim=-1) - torch.log_softmax(s / 2, dim=-1)), 0.0)
    expected = F.cross_entropy(s, targets[mask]) + 4 * terms.sum(-1).mean()
    assert torch.isfinite(out.loss) and out.loss.item() == pytest.approx(expected.item(), rel=1e-5)
