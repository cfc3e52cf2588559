"""A torch ``Dataset`` of distillation samples: prompt ids then the teacher's answer ids, labels masked over the
prompt.

The samples are rebuilt from the training side's data configs with :func:`gencache.data.samples.build_samples`
(the same keys generation used), the caches are opened with :func:`gencache.artifact.mixture.open_caches`, and
compatibility and coverage are checked before the first item is served.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils.data import Dataset

from gencache.artifact.cache import GenerationCache
from gencache.artifact.mixture import open_caches
from gencache.config import CacheConfig, DataConfig, load_config
from gencache.data.samples import Sample, SampleSet, build_samples
from gencache.errors import ConfigError
from gencache.training.collate import IGNORE_INDEX

SequenceChoice = Literal["first", "random", "all"]
Truncation = Literal["refuse", "left"]
SEQUENCE_CHOICES: tuple[str, ...] = ("first", "random", "all")
TRUNCATION_POLICIES: tuple[str, ...] = ("refuse", "left")

DataConfigs = CacheConfig | Sequence[DataConfig | Mapping[str, Any]] | str | os.PathLike[str]


class DistillationDataset(Dataset[dict[str, Any]]):
    """Every sample of ``data_configs`` (run order, duplicates included) with the teacher's answer from the caches.

    ``data_configs`` is a config file path, a :class:`CacheConfig` or a list of data configs (the same fields as
    generation: dataset, template, kwargs). ``tokenizer`` is the student's tokenizer, prepared as for generation
    (:func:`gencache.prepare_tokenizer`); its state and the teacher's ``model_path``, ``tokenizer_path`` and
    ``dtype`` must match the caches' provenance (``check_compatible``), and every sample's key must be in the
    caches (``require``): both are checked here, so a wrong setup fails before the first batch.

    Item ``i`` is a dict: ``input_ids`` (prompt ids then answer ids, int64), ``attention_mask`` (ones),
    ``labels`` (``-100`` over the prompt, the answer ids after it), and what describes it: ``key`` (the
    sample's semantic key), ``finish_reason``, ``sequence_index`` (which of the key's answers) and
    ``prompt_length`` (the number of prompt ids at the front of ``input_ids``, after truncation).
    :class:`~gencache.training.DistillationCollator` keeps those four out of the model inputs
    (``batch.metadata``), so the batches suit Hugging Face ``Trainer`` under any ``remove_unused_columns``;
    :meth:`to_hf_dataset` gives the same items as a ``datasets.Dataset`` for TRL.

    With several answers per key (``num_return_sequences > 1``), ``sequences`` chooses: ``"first"`` (the first
    answer), ``"random"`` (one answer per sample, drawn from ``seed`` and the item index, so reproducible and the
    same in every worker) or ``"all"`` (one item per answer: sample-major, answer-minor; every sample then needs
    the same number of answers in all caches, checked when the item is read).

    ``max_length`` bounds ``len(input_ids)``. ``truncation="refuse"`` raises :class:`ConfigError` on a longer
    sample; ``"left"`` drops prompt tokens from the left until it fits. The answer is never cut: a sample whose
    answer alone exceeds ``max_length`` is refused under either policy.

    ``index_cache`` is passed to :func:`gencache.artifact.mixture.open_caches` (see :class:`CacheReader`): with it,
    every rank and spawned worker after the first maps the checked index instead of re-checking the manifests.
    """

    def __init__(
        self,
        data_configs: DataConfigs,
        tokenizer: Any,
        cache_paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        model_path: str,
        tokenizer_path: str,
        dtype: str | torch.dtype,
        sequences: SequenceChoice = "first",
        seed: int = 0,
        max_length: int | None = None,
        truncation: Truncation = "refuse",
        index_cache: str | os.PathLike[str] | bool | None = None,
    ) -> None:
        if sequences not in SEQUENCE_CHOICES:
            raise ConfigError(f"sequences must be one of {', '.join(SEQUENCE_CHOICES)}, got {sequences!r}.")
        if truncation not in TRUNCATION_POLICIES:
            raise ConfigError(f"truncation must be one of {', '.join(TRUNCATION_POLICIES)}, got {truncation!r}.")
        if max_length is not None and (type(max_length) is not int or max_length < 1):
            raise ConfigError(f"max_length must be a positive integer or None, got {max_length!r}.")
        configs = load_config(data_configs) if isinstance(data_configs, (str, os.PathLike)) else data_configs
        self.samples: SampleSet = build_samples(configs, tokenizer)
        self.cache: GenerationCache = open_caches(
            cache_paths if isinstance(cache_paths, (str, os.PathLike)) else [Path(p) for p in cache_paths],
            index_cache=index_cache,
        )
        self.cache.check_compatible(
            model_path=model_path, tokenizer_path=tokenizer_path, dtype=dtype, tokenizer=tokenizer
        )
        self.cache.require(self.samples.keys())
        self.sequences: SequenceChoice = sequences
        self.seed = seed
        self.max_length = max_length
        self.truncation: Truncation = truncation
        self._per_sample = 1
        if sequences == "all" or max_length is not None:
            self._check_lengths()

    def _check_lengths(self) -> None:
        """Fail now, not in a DataLoader worker mid-epoch: with ``sequences='all'`` every key must hold the same
        number of answers, and with ``max_length`` every item must fit under the truncation policy. Reads the
        manifest's shapes only, never the payload."""
        if not self.samples.unique:
            raise ConfigError("The data configs select no samples; there is nothing to train on.")
        for position, sample in enumerate(self.samples.unique):
            entry = self.cache.metadata(sample.key)
            assert entry is not None  # require() above
            lengths = [int(ref["shape"][0]) for ref in entry["sequences"]]
            if self.sequences == "all":
                if position == 0:
                    self._per_sample = len(lengths)
                elif len(lengths) != self._per_sample:
                    raise ConfigError(
                        f"sequences='all' needs the same number of answers for every key, but key {sample.key} has "
                        f"{len(lengths)} and the first has {self._per_sample}; use sequences='first' or 'random'."
                    )
            assert sample.input_ids is not None  # build_samples tokenizes with the tokenizer given
            for answer_length in lengths[:1] if self.sequences == "first" else lengths:
                self._check_fit(sample, len(sample.input_ids), answer_length)

    def __len__(self) -> int:
        return len(self.samples) * self._per_sample

    def sample(self, index: int) -> Sample:
        """The sample item ``index`` comes from."""
        return self.samples[index // self._per_sample]

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"item {index} is out of range for {len(self)} items")
        index %= len(self)
        sample = self.sample(index)
        generation = self.cache[sample.key]
        count = len(generation.sequences)
        if self.sequences == "first":
            choice = 0
        elif self.sequences == "random":
            choice = random.Random(self.seed * 1_000_003 + index).randrange(count)
        else:
            choice = index % self._per_sample  # every key holds _per_sample answers (checked at construction)
        answer = generation.sequences[choice]
        assert sample.input_ids is not None  # build_samples tokenizes with the tokenizer given
        prompt = torch.tensor(sample.input_ids, dtype=torch.int64)
        prompt = self._fit(sample, prompt, len(answer))
        input_ids = torch.cat([prompt, answer])
        labels = torch.cat([torch.full((len(prompt),), IGNORE_INDEX, dtype=torch.int64), answer])
        return {
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "labels": labels,
            "key": sample.key,
            "finish_reason": generation.finish_reasons[choice],
            "sequence_index": choice,
            "prompt_length": len(prompt),
        }

    def _fit(self, sample: Sample, prompt: torch.Tensor, answer_length: int) -> torch.Tensor:
        self._check_fit(sample, len(prompt), answer_length)
        limit = self.max_length
        if limit is None or len(prompt) + answer_length <= limit:
            return prompt
        return prompt[len(prompt) + answer_length - limit :]

    def _check_fit(self, sample: Sample, prompt_length: int, answer_length: int) -> None:
        limit = self.max_length
        if limit is None or prompt_length + answer_length <= limit:
            return
        where = f"sample {sample.sample_index} of data_configs[{sample.data_config_index}] (key {sample.key[:12]}...)"
        if answer_length >= limit:
            raise ConfigError(
                f"{where}: the teacher's answer has {answer_length} tokens, leaving no room for the prompt within "
                f"max_length {limit}; the answer is never cut: raise max_length or leave this sample out."
            )
        if self.truncation == "refuse":
            raise ConfigError(
                f"{where} has {prompt_length} prompt + {answer_length} answer tokens, over max_length {limit}; raise "
                "max_length or pass truncation='left' to drop prompt tokens from the left."
            )

    def to_hf_dataset(self, *, path: str | os.PathLike[str] | None = None, metadata: bool = True) -> Any:
        """These items as a ``datasets.Dataset`` of the exact stored ids, with TRL's ``completion_mask``: see
        :func:`gencache.training.to_hf_dataset`."""
        from gencache.training.hf import to_hf_dataset

        return to_hf_dataset(self, path=path, metadata=metadata)

    def __repr__(self) -> str:
        return f"DistillationDataset(items={len(self)}, sequences={self.sequences!r}, cache={self.cache!r})"


__all__ = ["SEQUENCE_CHOICES", "TRUNCATION_POLICIES", "DistillationDataset"]
