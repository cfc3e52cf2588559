"""Training on a generation cache.

- :class:`DistillationDataset` pairs each sample's prompt ids with the teacher's cached answer ids;
  :class:`DistillationCollator` pads them into :class:`DistillationBatch` es of model inputs only (what describes
  the rows rides beside them in ``batch.metadata``), so Hugging Face ``Trainer`` takes them;
  :func:`to_hf_dataset` gives the same items as a ``datasets.Dataset`` with TRL's ``completion_mask``.
- :func:`distillation_loss` is the online loss: cross-entropy on the cached answer tokens plus a KL term against
  the teacher's logits, over answer positions only, in bounded memory; :class:`DistillationTrainer` is a
  ``transformers.Trainer`` that computes it. It is imported when first asked for: this package imports torch,
  never transformers (DataLoader workers stay light).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gencache.core.lazy import lazy_names
from gencache.training.collate import (
    METADATA_COLUMNS,
    METADATA_FIELDS,
    MODEL_INPUTS,
    DistillationBatch,
    DistillationCollator,
    pad_batch,
)
from gencache.training.dataset import (
    MISSING_POLICIES,
    SEQUENCE_CHOICES,
    TRUNCATION_POLICIES,
    DistillationDataset,
    LeftOut,
    to_hf_dataset,
)
from gencache.training.loss import DistillationLoss, answer_positions, distillation_loss

if TYPE_CHECKING:
    from gencache.training.trainer import DistillationTrainer, check_vocabularies

_LAZY = {"DistillationTrainer": "gencache.training.trainer", "check_vocabularies": "gencache.training.trainer"}

__all__ = [
    "METADATA_COLUMNS",
    "METADATA_FIELDS",
    "MISSING_POLICIES",
    "MODEL_INPUTS",
    "SEQUENCE_CHOICES",
    "TRUNCATION_POLICIES",
    "DistillationBatch",
    "DistillationCollator",
    "DistillationDataset",
    "DistillationLoss",
    "DistillationTrainer",
    "LeftOut",
    "answer_positions",
    "check_vocabularies",
    "distillation_loss",
    "pad_batch",
    "to_hf_dataset",
]


__getattr__ = lazy_names(__name__, _LAZY)
