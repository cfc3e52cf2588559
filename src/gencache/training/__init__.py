"""Training on a generation cache: :class:`DistillationDataset` pairs each sample's prompt ids with the teacher's
cached answer ids, and :class:`DistillationCollator` pads them into batches.

Imports torch (lazily, through the submodules), never transformers: pass the student's tokenizer in.
"""

from __future__ import annotations

from gencache.training.collate import DistillationCollator, pad_batch
from gencache.training.dataset import SEQUENCE_CHOICES, TRUNCATION_POLICIES, DistillationDataset

__all__ = ["SEQUENCE_CHOICES", "TRUNCATION_POLICIES", "DistillationCollator", "DistillationDataset", "pad_batch"]
