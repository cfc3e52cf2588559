"""A torch ``Dataset`` of distillation samples: prompt ids then the teacher's answer ids, labels masked over the
prompt.

The samples are rebuilt with :func:`gencache.data.samples.build_samples` (the same keys generation used): from the
artifact's own record of its run (``resolved_config.json``, checked by :mod:`gencache.data.recorded`) when no config
is given, else from the config. The caches are opened with :func:`gencache.artifact.mixture.open_caches`, and
compatibility (against the manifests), coverage and the selection (:mod:`gencache.training.selection`) are checked
before the first item is served.
"""

from __future__ import annotations

import bisect
import itertools
import os
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils.data import Dataset

from gencache.artifact.mixture import MultiCacheReader, open_caches
from gencache.artifact.reader import GenerationCache
from gencache.config import CacheConfig, DataConfig, load_config
from gencache.core.errors import ConfigError
from gencache.data.recorded import RecordedRun, rebuild_samples, run_of_readers
from gencache.data.samples import Sample, SampleSet, build_samples, concat_sample_sets
from gencache.training.collate import IGNORE_INDEX
from gencache.training.selection import Items, LeftOut, Missing, Selection, check_not_empty, select_items

SequenceChoice = Literal["first", "random", "all"]
Truncation = Literal["refuse", "left"]
SEQUENCE_CHOICES: tuple[str, ...] = ("first", "random", "all")
TRUNCATION_POLICIES: tuple[str, ...] = ("refuse", "left")

DataConfigs = CacheConfig | Sequence[DataConfig | Mapping[str, Any]] | str | os.PathLike[str]
CachePaths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
ScoreSource = str | os.PathLike[str] | Mapping[tuple[str, int], Mapping[str, float] | None] | Any
#: "Keep this dataset's value" for :meth:`DistillationDataset.select`.
KEEP: Any = ...


def _runs_of(cache: GenerationCache) -> list[RecordedRun]:
    """The recorded runs of the opened artifacts, in order: the shards of one run together, every other artifact
    its own run."""
    readers: list[Any] = list(cache.readers) if isinstance(cache, MultiCacheReader) else [cache]
    groups: dict[str, list[Any]] = {}
    for position, reader in enumerate(readers):
        shard = reader.summary.get("shard")
        groups.setdefault(f"run {shard['run_digest']}" if shard else f"artifact {position}", []).append(reader)
    return [run_of_readers(group[0].path, group) for group in groups.values()]


def recorded_samples(cache: GenerationCache, tokenizer: Any) -> tuple[SampleSet, Callable[[Sample], bool] | None]:
    """The samples of the runs ``cache`` was opened on, rebuilt from their checked records (each recorded source
    file hashed again) and tokenized, one run after another (data config indices numbered on), and which of them
    the artifacts hold (None: all; a lone shard holds only its own keys)."""
    runs = _runs_of(cache)
    samples = concat_sample_sets([rebuild_samples(run, tokenizer) for run in runs])
    if all(run.shards is None for run in runs):
        return samples, None
    starts = list(itertools.accumulate((len(run.config.data_configs) for run in runs[:-1]), initial=0))

    def owns(sample: Sample) -> bool:
        return runs[bisect.bisect_right(starts, sample.data_config_index) - 1].owns(sample.key)

    return samples, owns


class DistillationDataset(Dataset[dict[str, Any]]):
    """The samples of an artifact (run order, duplicates included) with the teacher's answers from the caches.

    ``DistillationDataset(artifact, tokenizer)``: ``artifact`` is an artifact directory, one shard, a shard base
    (all its shards) or a list of them (a mixture, as :func:`gencache.artifact.mixture.open_caches` takes). With
    no ``config`` the samples (prompts, masks, keys) are rebuilt from each artifact's own ``resolved_config.json``,
    which records the effective data configs after ``--limit``, ``--set`` and ``--output-dir``; it is checked first
    (its ``resolved_digest``, its shape, the recorded source files' SHA-256), and a damaged record or a changed
    source file is refused in one line naming it. A lone shard serves the samples it holds. With ``config`` (a
    config file path, a :class:`CacheConfig` or a list of data configs) the samples are those of the config and
    every one must be in the caches.

    ``tokenizer`` is the student's tokenizer, prepared as for generation (:func:`gencache.prepare_tokenizer`). The
    compatibility gate is the manifests': the tokenizer state always, and ``model_path``, ``tokenizer_path`` and
    ``dtype`` when given (omitted, the caches' own are taken), must match the caches' provenance.

    Item ``i`` is a dict: ``input_ids`` (prompt ids then answer ids, int64), ``attention_mask`` (ones),
    ``labels`` (``-100`` over the prompt, the answer ids after it), and what describes it: ``key`` (the
    sample's semantic key), ``finish_reason``, ``sequence_index`` (which of the key's answers),
    ``prompt_length`` (the number of prompt ids at the front of ``input_ids``, after truncation),
    ``data_config_index``, ``row_id`` (the source row's id: the id column ``data_kwargs.id`` names, else the row's
    index in the source, as text; None for a recipe without rows), ``row_index`` and ``reference`` (the recipe's
    gold answer, None without one). :class:`~gencache.training.DistillationCollator` keeps the descriptive fields
    out of the model inputs (``batch.metadata``), so the batches suit Hugging Face ``Trainer`` under any
    ``remove_unused_columns``; :meth:`to_hf_dataset` gives the same items as a ``datasets.Dataset`` for TRL.

    With several answers per key (``num_return_sequences > 1``), ``sequences`` chooses: ``"first"`` (the first
    answer kept), ``"random"`` (one kept answer per sample, drawn from ``seed`` and the item index, so
    reproducible and the same in every worker) or ``"all"`` (one item per kept answer: sample-major).

    Selections (the defaults keep everything and refuse a missing key): ``data_configs`` (indices) keeps those
    data configs' samples; ``finish_reasons`` (for example ``["eos"]``) keeps the answers with those finish reasons
    and ``max_answer_tokens`` those of at most that many tokens, a sample with no answer left being left out;
    ``missing="skip"`` leaves out the samples whose key no cache holds instead of raising
    :class:`~gencache.core.errors.MissingEntriesError`; ``min_score`` (for example ``{"f1": 0.5}``) keeps the
    answers whose metrics (:mod:`gencache.data.metrics`, against the sample's reference) are all at or above their
    bar, scored on the fly from the answers and the rebuilt samples, or read from ``scores`` (a file ``gencache
    score --out`` wrote, what :func:`gencache.score` returned, or its ``by_answer``); a sample without a reference
    has no score and is left out under a bar. :attr:`left_out` counts what was left out, by reason
    (:class:`~gencache.training.LeftOut`); :class:`~gencache.training.DistillationTrainer` logs it once. A
    selection that keeps nothing is a :class:`ConfigError` naming it and the counts.

    ``max_length`` bounds ``len(input_ids)``. ``truncation="refuse"`` raises :class:`ConfigError` on a longer
    sample; ``"left"`` drops prompt tokens from the left until it fits. The answer is never cut: a sample whose
    answer alone exceeds ``max_length`` is refused under either policy (leave it out with ``max_answer_tokens``).

    ``index_cache`` is passed to :func:`gencache.artifact.mixture.open_caches` (see :class:`CacheReader`): with it,
    every rank and spawned worker after the first maps the checked index instead of re-checking the manifests.
    """

    def __init__(
        self,
        artifact: CachePaths,
        tokenizer: Any,
        *,
        config: DataConfigs | None = None,
        model_path: str | None = None,
        tokenizer_path: str | None = None,
        dtype: str | torch.dtype | None = None,
        sequences: SequenceChoice = "first",
        seed: int = 0,
        max_length: int | None = None,
        truncation: Truncation = "refuse",
        index_cache: str | os.PathLike[str] | bool | None = None,
        finish_reasons: Iterable[str] | None = None,
        max_answer_tokens: int | None = None,
        data_configs: Iterable[int] | None = None,
        missing: Missing = "error",
        min_score: Mapping[str, float] | None = None,
        scores: ScoreSource | None = None,
    ) -> None:
        if sequences not in SEQUENCE_CHOICES:
            raise ConfigError(f"sequences must be one of {', '.join(SEQUENCE_CHOICES)}, got {sequences!r}.")
        if truncation not in TRUNCATION_POLICIES:
            raise ConfigError(f"truncation must be one of {', '.join(TRUNCATION_POLICIES)}, got {truncation!r}.")
        if max_length is not None and (type(max_length) is not int or max_length < 1):
            raise ConfigError(f"max_length must be a positive integer or None, got {max_length!r}.")
        self.cache: GenerationCache = open_caches(
            artifact if isinstance(artifact, (str, os.PathLike)) else [Path(p) for p in artifact],
            index_cache=index_cache,
        )
        provenance = self.cache.provenance
        self.cache.check_compatible(
            model_path=provenance["model_path"] if model_path is None else model_path,
            tokenizer_path=provenance["tokenizer_path"] if tokenizer_path is None else tokenizer_path,
            dtype=provenance["dtype"] if dtype is None else dtype,
            tokenizer=tokenizer,
        )
        self._owns: Callable[[Sample], bool] | None = None
        if config is None:
            self.samples, self._owns = recorded_samples(self.cache, tokenizer)
        else:
            configs = load_config(config) if isinstance(config, (str, os.PathLike)) else config
            self.samples = build_samples(configs, tokenizer)
        self.sequences: SequenceChoice = sequences
        self.seed = seed
        self.max_length = max_length
        self.truncation: Truncation = truncation
        self._scores_source = scores
        self._scores: Mapping[tuple[str, int], Mapping[str, float] | None] | None = None
        self._select(
            Selection.make(
                finish_reasons=finish_reasons,
                max_answer_tokens=max_answer_tokens,
                data_configs=data_configs,
                missing=missing,
                data_config_count=len(self.samples.summaries),
                min_score=min_score,
            )
        )

    def _score_lookup(self) -> Mapping[tuple[str, int], Mapping[str, float] | None]:
        """Every answer's metrics: from ``scores`` when given, else scored once from the answers and samples."""
        if self._scores is None:
            source = self._scores_source
            if isinstance(source, (str, os.PathLike)):
                from gencache.data.scores import read_scores

                self._scores = read_scores(source)
            elif isinstance(getattr(source, "by_answer", None), Mapping):  # what gencache.score returned
                self._scores = source.by_answer  # type: ignore[union-attr]
            elif isinstance(source, Mapping):
                self._scores = source
            elif source is not None:
                raise ConfigError(
                    "scores must be a score file, what gencache.score returned or a mapping, not "
                    f"{type(source).__name__}."
                )
            else:
                from gencache.data.scores import rules_of, score_cache

                scored = score_cache(self.samples, self.cache, rules_of(self.samples), every_entry=False)
                self._scores = {(answer.key, answer.sequence_index): answer.metrics for answer in scored}
        return self._scores

    def _select(self, selection: Selection) -> None:
        """Choose the items under ``selection`` (reading the manifest's finish reasons and shapes only when a
        filter, ``sequences='all'`` or ``max_length`` needs them) and check that each fits ``max_length``."""

        def check(position: int, lengths: list[int]) -> None:
            sample = self.samples[position]
            assert sample.input_ids is not None  # build_samples tokenizes with the tokenizer given
            for answer_length in lengths:
                self._check_fit(sample, len(sample.input_ids), answer_length)

        self.selection = selection
        fits = check if self.max_length is not None else None
        scores = None if selection.min_score is None else self._score_lookup()
        items = select_items(
            self.samples,
            self.cache,
            selection,
            self.sequences,
            owns=self._owns,
            check=fits,
            lengths_needed=bool(fits),
            scores=scores,
        )
        check_not_empty(items, selection)
        self._items: Items = items

    @property
    def left_out(self) -> LeftOut:
        """What the selection left out, by reason (all zeros under the defaults)."""
        return self._items.left_out

    def select(
        self,
        *,
        finish_reasons: Iterable[str] | None = KEEP,
        max_answer_tokens: int | None = KEEP,
        data_configs: Iterable[int] | None = KEEP,
        missing: Missing = KEEP,
        min_score: Mapping[str, float] | None = KEEP,
    ) -> DistillationDataset:
        """A copy of this dataset (the same samples and caches, nothing reopened or rebuilt) under another
        selection: each argument given replaces this dataset's, those not given are kept."""
        import copy

        ours = self.selection
        chosen = copy.copy(self)
        chosen._select(
            Selection.make(
                finish_reasons=ours.finish_reasons if finish_reasons is KEEP else finish_reasons,
                max_answer_tokens=ours.max_answer_tokens if max_answer_tokens is KEEP else max_answer_tokens,
                data_configs=ours.data_configs if data_configs is KEEP else data_configs,
                missing=ours.missing if missing is KEEP else missing,
                data_config_count=len(self.samples.summaries),
                min_score=(None if ours.min_score is None else dict(ours.min_score))
                if min_score is KEEP
                else min_score,
            )
        )
        return chosen

    def __len__(self) -> int:
        return len(self._items.sample)

    def sample(self, index: int) -> Sample:
        """The sample item ``index`` comes from."""
        return self.samples[int(self._items.sample[index])]

    def _choice(self, index: int, count: int) -> int:
        choice = int(self._items.answer[index])
        if choice >= 0:
            return choice
        kept = self._items.allowed.get(int(self._items.sample[index]))
        options: Sequence[int] = range(count) if kept is None else kept
        return options[random.Random(self.seed * 1_000_003 + index).randrange(len(options))]

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"item {index} is out of range for {len(self)} items")
        index %= len(self)
        sample = self.sample(index)
        generation = self.cache[sample.key]
        choice = self._choice(index, len(generation.sequences))
        answer = generation.sequences[choice]
        assert sample.input_ids is not None  # build_samples tokenizes with the tokenizer given
        prompt = torch.tensor(sample.input_ids, dtype=torch.int64)
        prompt = self._fit(sample, prompt, len(answer))
        input_ids = torch.cat([prompt, answer])
        labels = torch.cat([torch.full((len(prompt),), IGNORE_INDEX, dtype=torch.int64), answer])
        source_id = sample.source_id
        return {
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "labels": labels,
            "key": sample.key,
            "finish_reason": generation.finish_reasons[choice],
            "sequence_index": choice,
            "prompt_length": len(prompt),
            "data_config_index": sample.data_config_index,
            "row_id": None if source_id is None else str(source_id),
            "row_index": sample.row,
            "reference": sample.reference,
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

    def to_hf_dataset(
        self,
        *,
        path: str | os.PathLike[str] | None = None,
        metadata: bool = True,
        finish_reasons: Iterable[str] | None = KEEP,
        max_answer_tokens: int | None = KEEP,
        data_configs: Iterable[int] | None = KEEP,
        missing: Missing = KEEP,
        min_score: Mapping[str, float] | None = KEEP,
    ) -> Any:
        """These items (under the selection arguments given, as :meth:`select`) as a ``datasets.Dataset`` of the
        exact stored ids, with TRL's ``completion_mask``: see :func:`to_hf_dataset`."""
        from gencache.training.hf import build_hf_dataset

        chosen = self.select(
            finish_reasons=finish_reasons,
            max_answer_tokens=max_answer_tokens,
            data_configs=data_configs,
            missing=missing,
            min_score=min_score,
        )
        return build_hf_dataset(chosen, path=path, metadata=metadata)

    def __repr__(self) -> str:
        return f"DistillationDataset(items={len(self)}, sequences={self.sequences!r}, cache={self.cache!r})"


def to_hf_dataset(
    data: DistillationDataset | CachePaths,
    tokenizer: Any = None,
    *,
    path: str | os.PathLike[str] | None = None,
    metadata: bool = True,
    **options: Any,
) -> Any:
    """``data``'s items as a ``datasets.Dataset`` of the exact stored ids with TRL's ``completion_mask`` (columns:
    :mod:`gencache.training.hf`), in ``data``'s order.

    ``data`` is a :class:`DistillationDataset`, or what one takes (an artifact, a shard base, a list of them) with
    the ``tokenizer``: ``to_hf_dataset("artifact", tokenizer)`` rebuilds the samples from the artifact alone.
    ``options`` are the dataset's arguments (``finish_reasons``, ``max_answer_tokens``, ``data_configs``,
    ``missing``, ``max_length``, ...); given a dataset, its selection arguments only (as
    :meth:`DistillationDataset.select`). ``path`` streams the rows into an Arrow file that the dataset
    memory-maps (for caches too large to hold twice in memory); it must not exist.
    """
    if not isinstance(data, DistillationDataset):
        if tokenizer is None:
            raise ConfigError("to_hf_dataset of an artifact needs the tokenizer: to_hf_dataset(artifact, tokenizer).")
        return DistillationDataset(data, tokenizer, **options).to_hf_dataset(path=path, metadata=metadata)
    return data.to_hf_dataset(path=path, metadata=metadata, **options)
