"""Training on a generation cache: the dataset, its collator and datasets view, the online distillation loss and
the ``transformers.Trainer`` that computes it. The trainer is imported when first asked for: this package imports
torch, never transformers (DataLoader workers stay light).
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
