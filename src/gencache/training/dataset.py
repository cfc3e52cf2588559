"""A torch ``Dataset`` of distillation samples (prompt ids then the teacher's answer ids, labels masked over the
prompt), and its Hugging Face ``datasets`` view: the exact stored token ids (never re-tokenized text) in the
pre-tokenized form TRL's ``SFTTrainer`` takes, with ``completion_mask`` (1 on the answer tokens).
"""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from gencache.artifact.cache import GenerationCache
from gencache.artifact.mixture import MultiCacheReader, open_caches
from gencache.artifact.names import FINISH_REASONS
from gencache.artifact.publish import publish_file
from gencache.config import CacheConfig, DataConfig, load_config
from gencache.core.errors import ConfigError, OutputExistsError, WriteError
from gencache.data.recorded import rebuild_samples, run_of_readers
from gencache.data.samples import Sample, SampleSet, build_samples, concat_sample_sets
from gencache.data.scores import check_min_score, read_scores, rules_of, score_cache
from gencache.training.collate import IGNORE_INDEX, METADATA_COLUMNS

SequenceChoice = Literal["first", "random", "all"]
Truncation = Literal["refuse", "left"]
SEQUENCE_CHOICES: tuple[str, ...] = ("first", "random", "all")
TRUNCATION_POLICIES: tuple[str, ...] = ("refuse", "left")

Missing = Literal["error", "skip"]
MISSING_POLICIES: tuple[str, ...] = ("error", "skip")

#: Why a sample was left out, each reason in words (the :class:`LeftOut` counts of samples).
REASONS: dict[str, str] = {
    "data_configs": "of data configs not selected",
    "missing": "whose key no cache holds (missing='skip')",
    "finish_reason": "with no answer of a selected finish reason",
    "max_answer_tokens": "whose answers all exceed max_answer_tokens",
    "min_score": "whose answers all score below min_score",
    "unscored": "without a reference to score against (min_score)",
}


@dataclass(frozen=True)
class LeftOut:
    """What a selection left out: samples counted by :data:`REASONS`, and ``answers``, the answers of kept samples
    that the answer filters refused."""

    data_configs: int = 0
    missing: int = 0
    finish_reason: int = 0
    max_answer_tokens: int = 0
    answers: int = 0
    min_score: int = 0
    unscored: int = 0
    #: The samples the selection looked at (those the artifacts hold: a lone shard's own).
    considered: int = field(default=0, compare=False)

    @property
    def samples(self) -> int:
        """Samples left out, for every reason."""
        return sum(getattr(self, name) for name in REASONS)

    def __bool__(self) -> bool:
        return bool(self.samples or self.answers)

    def as_dict(self) -> dict[str, int]:
        """The counts by reason, every reason present."""
        return {item.name: getattr(self, item.name) for item in fields(self) if item.name != "considered"}

    def describe(self) -> str:
        """One line: how many of the samples considered were left out and why (or that nothing was)."""
        parts = [f"{getattr(self, name)} {text}" for name, text in REASONS.items() if getattr(self, name)]
        if self.answers:
            parts.append(f"and {self.answers} answers of the samples kept were refused by the answer filters")
        if not parts:
            return f"nothing left out: all {self.considered} samples selected"
        return f"left out {self.samples} of {self.considered} samples: {'; '.join(parts)}"


def _check(name: str, value: Any, ok: bool, wanted: str) -> None:
    if not ok:
        raise ConfigError(f"{name} must be {wanted}, got {value!r}.")


def _positive(value: Any) -> bool:
    return value is None or (type(value) is int and value > 0)


DataConfigs = CacheConfig | Sequence[DataConfig | Mapping[str, Any]] | str | os.PathLike[str]
CachePaths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def recorded_samples(cache: GenerationCache, tokenizer: Any) -> tuple[SampleSet, list[bool] | None]:
    """The samples of the runs ``cache`` was opened on, rebuilt from their checked records, one run after another,
    and whether the artifacts hold each (None: all; a lone shard holds only its own keys)."""
    readers: list[Any] = list(cache.readers) if isinstance(cache, MultiCacheReader) else [cache]
    groups: dict[str, list[Any]] = {}
    for position, reader in enumerate(readers):
        shard = reader.summary.get("shard")
        groups.setdefault(f"run {shard['run_digest']}" if shard else f"artifact {position}", []).append(reader)
    runs = [run_of_readers(group) for group in groups.values()]
    parts = [rebuild_samples(run, tokenizer) for run in runs]
    samples = concat_sample_sets(parts)
    if all(run.shards is None for run in runs):
        return samples, None
    return samples, [run.owns(sample.key) for run, part in zip(runs, parts, strict=True) for sample in part]


class DistillationDataset(Dataset[dict[str, Any]]):
    """The samples of an artifact (run order, duplicates included) with the teacher's answers from the caches;
    docs/training.md describes every argument.

    ``artifact`` is anything :func:`gencache.artifact.mixture.open_caches` takes. With no ``config`` the samples are
    rebuilt from each artifact's own checked ``resolved_config.json`` (a lone shard serves the samples it holds);
    with ``config`` they are the config's and every one must be in the caches. ``tokenizer`` is the student's,
    prepared as for generation; it must match the caches' tokenizer state.

    Item ``i`` is a dict of ``input_ids`` (prompt ids then answer ids), ``attention_mask``, ``labels`` (``-100``
    over the prompt) and the fields of :data:`~gencache.training.collate.METADATA_COLUMNS`. ``sequences="random"``
    draws from ``seed`` and the item index, so the same in every worker. What the selection left out is counted by
    reason in :attr:`left_out`. The answer is never cut to fit ``max_length``.
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
        finish_reasons: Iterable[str] | None = None,
        max_answer_tokens: int | None = None,
        data_configs: Iterable[int] | None = None,
        missing: Missing = "error",
        min_score: Mapping[str, float] | None = None,
        scores: Any = None,
    ) -> None:
        _check("sequences", sequences, sequences in SEQUENCE_CHOICES, f"one of {', '.join(SEQUENCE_CHOICES)}")
        _check("truncation", truncation, truncation in TRUNCATION_POLICIES, f"one of {', '.join(TRUNCATION_POLICIES)}")
        _check("max_length", max_length, _positive(max_length), "a positive integer or None")
        self.cache: GenerationCache = open_caches(artifact)
        given: dict[str, Any] = {"model_path": model_path, "tokenizer_path": tokenizer_path, "dtype": dtype}
        provenance = self.cache.provenance
        self.cache.check_compatible(
            **{k: provenance[k] if v is None else v for k, v in given.items()}, tokenizer=tokenizer
        )
        if config is None:
            self.samples, self._held = recorded_samples(self.cache, tokenizer)
        else:
            configs = load_config(config) if isinstance(config, (str, os.PathLike)) else config
            self.samples, self._held = build_samples(configs, tokenizer), None
        self.sequences: SequenceChoice = sequences
        self.seed = seed
        self.max_length = max_length
        self.truncation: Truncation = truncation
        self._scores_source = scores
        self._scores: Mapping[tuple[str, int], Mapping[str, float] | None] | None = None
        self._choose(
            finish_reasons=finish_reasons,
            max_answer_tokens=max_answer_tokens,
            data_configs=data_configs,
            missing=missing,
            min_score=min_score,
        )

    def _choose(self, **arguments: Any) -> None:
        """Choose the items under the selection ``arguments``. The answer filters read the manifest's finish reasons
        and shapes only, never the payload, and only when a filter, ``sequences='all'`` or ``max_length`` needs
        them. Samples of another shard are not items and not counted."""
        self._arguments = arguments
        configs, reasons, cap, missing = (
            arguments[name] for name in ("data_configs", "finish_reasons", "max_answer_tokens", "missing")
        )
        _check("missing", missing, missing in MISSING_POLICIES, f"one of {', '.join(MISSING_POLICIES)}")
        _check("max_answer_tokens", cap, _positive(cap), "a positive integer or None")
        kept_reasons = frozenset(() if reasons is None or isinstance(reasons, str) else reasons)
        ok = reasons is None or (bool(kept_reasons) and kept_reasons <= set(FINISH_REASONS))
        _check("finish_reasons", reasons, ok, f"a list of {', '.join(FINISH_REASONS)} (at least one)")
        chosen_configs = [configs] if isinstance(configs, int) else list(configs or ())
        count = len(self.samples.summaries)
        ok = configs is None or (
            bool(chosen_configs) and all(type(i) is int and 0 <= i < count for i in chosen_configs)
        )
        _check("data_configs", configs, ok, f"a list of data config indices from 0 to {count - 1}")
        bar = check_min_score(arguments["min_score"])
        if bar is not None and self._scores is None:  # every answer's metrics, from ``scores`` or scored once
            source = self._scores_source
            if isinstance(source, (str, os.PathLike)):
                self._scores = read_scores(source)
            elif source is not None:
                self._scores = getattr(source, "by_answer", source)  # what gencache.score returned, or a mapping
            else:
                scored = score_cache(self.samples, self.cache, rules_of(self.samples), every_entry=False)
                self._scores = {(answer.key, answer.sequence_index): answer.metrics for answer in scored}
        metrics_of = self._scores if bar is not None else None
        samples, cache, sequences, held = self.samples, self.cache, self.sequences, self._held
        owned = [p for p in range(len(samples)) if held is None or held[p]]
        chosen = [p for p in owned if configs is None or samples[p].data_config_index in chosen_configs]
        counts = dict.fromkeys(REASONS, 0)
        counts["data_configs"] = len(owned) - len(chosen)
        if missing == "error":
            cache.require(sorted({samples[p].key for p in chosen}))
        read_answers = sequences == "all" or any(value is not None for value in (reasons, cap, bar, self.max_length))
        items: list[tuple[int, int]] = []  # (sample position, answer index; -1: drawn when read)
        allowed: dict[int, tuple[int, ...]] = {}
        refused = 0
        for position in chosen:
            key = samples[position].key
            if key not in cache:
                counts["missing"] += 1
                continue
            if not read_answers:
                items.append((position, 0 if sequences == "first" else -1))
                continue
            entry: Any = cache.metadata(key)  # the key is in the cache
            finished, lengths = entry["finish_reasons"], [int(ref["shape"][0]) for ref in entry["sequences"]]
            by_reason = [i for i, reason in enumerate(finished) if reasons is None or reason in kept_reasons]
            by_length = [i for i in by_reason if cap is None or lengths[i] <= cap]
            try:
                metrics = [None if metrics_of is None else metrics_of[(key, i)] for i in range(len(finished))]
            except KeyError:
                raise ConfigError(
                    f"the scores lack answers of key {key[:12]}... ({len(finished)} stored); they were computed "
                    "for another artifact: score this one (gencache score ARTIFACT --out FILE) and pass that file."
                ) from None
            # an answer without a reference is below every bar
            kept = tuple(i for i in by_length if not bar or all((metrics[i] or {}).get(n, -1.0) >= v for n, v in bar))
            if not kept:
                why = "finish_reason" if not by_reason else "max_answer_tokens" if not by_length else None
                counts[why or ("unscored" if all(metrics[i] is None for i in by_length) else "min_score")] += 1
                continue
            refused += len(finished) - len(kept)
            served = kept[:1] if sequences == "first" else kept
            for i in served:  # each served answer fits max_length
                self._prompt_room(samples[position], len(samples[position].input_ids or ()), lengths[i])
            if sequences == "random":
                items.append((position, -1))
                if len(kept) < len(finished):
                    allowed[position] = kept
            else:
                items.extend((position, i) for i in served)
        self.left_out = LeftOut(**counts, answers=refused, considered=len(owned))
        if not items:
            narrowing = [f"{k}={v!r}" for k, v in arguments.items() if v is not None and (k, v) != ("missing", "error")]
            raise ConfigError(
                f"the selection ({', '.join(narrowing) or 'the default selection'}) keeps no item: "
                f"{self.left_out.describe()}; widen it."
            )
        self._sample, self._answer = np.asarray(items, dtype=np.int64).T
        self._allowed = allowed

    def select(self, **selection: Any) -> DistillationDataset:
        """A copy of this dataset (nothing reopened or rebuilt) under another selection: each selection argument
        given replaces this dataset's."""
        chosen = copy.copy(self)
        chosen._choose(**{**self._arguments, **selection})
        return chosen

    def __len__(self) -> int:
        return len(self._sample)

    def sample(self, index: int) -> Sample:
        """The sample item ``index`` comes from."""
        return self.samples[int(self._sample[index])]

    def __getitem__(self, index: int) -> dict[str, Any]:
        index = range(len(self))[index]  # an IndexError past either end
        sample = self.sample(index)
        generation = self.cache[sample.key]
        choice = int(self._answer[index])
        if choice < 0:  # drawn when read, among the kept answers
            options = self._allowed.get(int(self._sample[index]), range(len(generation.sequences)))
            choice = options[random.Random(self.seed * 1_000_003 + index).randrange(len(options))]
        answer = generation.sequences[choice]
        prompt = torch.tensor(sample.input_ids, dtype=torch.int64)
        prompt = prompt[self._prompt_room(sample, len(prompt), len(answer)) :]
        input_ids = torch.cat([prompt, answer])
        return {
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "labels": torch.cat([torch.full((len(prompt),), IGNORE_INDEX, dtype=torch.int64), answer]),
            "key": sample.key,
            "finish_reason": generation.finish_reasons[choice],
            "sequence_index": choice,
            "prompt_length": len(prompt),
            "data_config_index": sample.data_config_index,
            "row_id": None if sample.source_id is None else str(sample.source_id),
            "row_index": sample.row,
            "reference": sample.reference,
        }

    def _prompt_room(self, sample: Sample, prompt_length: int, answer_length: int) -> int:
        """How many prompt tokens to drop from the left so that the item fits ``max_length`` (a
        :class:`ConfigError` where it cannot or must not)."""
        limit = self.max_length
        if limit is None or prompt_length + answer_length <= limit:
            return 0
        if answer_length >= limit or self.truncation == "refuse":  # the answer is never cut
            fix = "leave this sample out" if answer_length >= limit else "pass truncation='left' to cut the prompt"
            raise ConfigError(
                f"sample {sample.sample_index} of data_configs[{sample.data_config_index}] (key {sample.key[:12]}...) "
                f"has {prompt_length} prompt + {answer_length} answer tokens, over max_length {limit} (the answer is "
                f"never cut); raise max_length or {fix}."
            )
        return prompt_length + answer_length - limit

    def to_hf_dataset(
        self, *, path: str | os.PathLike[str] | None = None, metadata: bool = True, **selection: Any
    ) -> Any:
        """These items (under the ``selection`` arguments given, as :meth:`select`) as a ``datasets.Dataset``, in
        this order. With ``path`` (a file that must not exist) the rows are streamed into an Arrow file there and
        the dataset memory-maps it: use it for caches too large to hold twice in memory."""
        import datasets
        import pyarrow as pa

        data = self.select(**selection) if selection else self
        tokens = pa.list_(pa.int64())
        schema = pa.schema(
            [(name, tokens) for name in ("input_ids", "attention_mask", "labels", "completion_mask")]
            + ([(name, getattr(pa, kind)()) for name, kind in METADATA_COLUMNS.items()] if metadata else [])
        )

        def batches() -> Iterator[Any]:
            for start in range(0, len(data), 1024):  # items per Arrow record batch
                rows = [data[index] for index in range(start, min(start + 1024, len(data)))]
                for row in rows:
                    row.update((name, row[name].numpy()) for name in ("input_ids", "attention_mask", "labels"))
                    row["completion_mask"] = (row["labels"] != IGNORE_INDEX).astype(np.int64)
                columns = [pa.array([row[field.name] for row in rows], field.type) for field in schema]
                yield pa.RecordBatch.from_arrays(columns, schema=schema)

        if path is None:
            return datasets.Dataset(datasets.table.InMemoryTable(pa.Table.from_batches(list(batches()), schema)))
        target = Path(os.path.abspath(path))
        if os.path.lexists(target):
            raise OutputExistsError(f"{target} already exists; choose another path for the datasets view.")

        def write(handle: IO[bytes]) -> None:
            with pa.ipc.new_stream(handle, schema) as writer:
                for batch in batches():
                    writer.write_batch(batch)

        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            publish_file(target, write, replace=False)  # never half a view
        except OSError as exc:
            raise WriteError(f"Cannot write the datasets view to {target}: {exc}") from exc
        return datasets.Dataset.from_file(str(target))


def to_hf_dataset(
    data: DistillationDataset | CachePaths,
    tokenizer: Any = None,
    *,
    path: str | os.PathLike[str] | None = None,
    metadata: bool = True,
    **options: Any,
) -> Any:
    """``data``'s items as a ``datasets.Dataset`` (:meth:`DistillationDataset.to_hf_dataset`). ``data`` is a
    :class:`DistillationDataset`, or what one takes with the ``tokenizer``; ``options`` are the dataset's arguments
    (given a dataset, its selection arguments only)."""
    if isinstance(data, DistillationDataset):
        return data.to_hf_dataset(path=path, metadata=metadata, **options)
    if tokenizer is None:
        raise ConfigError("to_hf_dataset of an artifact needs the tokenizer: to_hf_dataset(artifact, tokenizer).")
    return DistillationDataset(data, tokenizer, **options).to_hf_dataset(path=path, metadata=metadata)
