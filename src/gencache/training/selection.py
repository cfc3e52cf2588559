"""Which items a :class:`~gencache.training.DistillationDataset` serves, and what it left out, counted by reason.

A :class:`Selection` keeps some data configs (``data_configs``, indices), some answers (``finish_reasons``, a
``max_answer_tokens`` cap, a ``min_score`` bar such as ``{"f1": 0.5}``) and says what a sample whose key no cache
holds does (``missing="error"``, the default, raises before the first item; ``"skip"`` leaves it out).
:func:`select_items` applies it to the samples in run order and returns the items with a :class:`LeftOut`: how
many samples each reason left out, and how many answers of the samples kept were refused. The answer filters read
the manifest's finish reasons and shapes only, never the payload; the score bar reads the answers' metrics from a
score lookup (:mod:`gencache.data.scores`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import numpy as np

from gencache.artifact.names import FINISH_REASONS
from gencache.core.errors import ConfigError
from gencache.data.scores import Scores, check_min_score

Missing = Literal["error", "skip"]
MISSING_POLICIES: tuple[str, ...] = ("error", "skip")


def _names(value: Iterable[str] | None) -> frozenset[str] | None:
    if value is None:
        return None
    chosen = frozenset(() if isinstance(value, str) else value)
    if not chosen or not chosen <= set(FINISH_REASONS):
        raise ConfigError(f"finish_reasons takes a list of {', '.join(FINISH_REASONS)} (at least one), got {value!r}.")
    return chosen


def _indices(value: Iterable[int] | None, count: int) -> frozenset[int] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, int) else list(value)
    if not items or any(type(i) is not int or not 0 <= i < count for i in items):
        raise ConfigError(f"data_configs must list data config indices from 0 to {count - 1}, got {value!r}.")
    return frozenset(items)


@dataclass(frozen=True)
class Selection:
    """What a dataset keeps: data configs by index (None: all), answers by finish reason (None: all), by length
    (``max_answer_tokens``: at most that many answer tokens; None: any) and by score (``min_score``: every metric
    named at least its bar; None: any), and what a missing key does."""

    data_configs: frozenset[int] | None = None
    finish_reasons: frozenset[str] | None = None
    max_answer_tokens: int | None = None
    missing: Missing = "error"
    min_score: tuple[tuple[str, float], ...] | None = None

    @classmethod
    def make(
        cls,
        *,
        data_configs: Iterable[int] | None,
        finish_reasons: Iterable[str] | None,
        max_answer_tokens: int | None,
        missing: str,
        data_config_count: int,
        min_score: Mapping[str, float] | None = None,
    ) -> Selection:
        """A checked selection (a :class:`ConfigError` naming the argument that is wrong)."""
        if missing not in MISSING_POLICIES:
            raise ConfigError(f"missing must be one of {', '.join(MISSING_POLICIES)}, got {missing!r}.")
        if max_answer_tokens is not None and (type(max_answer_tokens) is not int or max_answer_tokens < 1):
            raise ConfigError(f"max_answer_tokens must be a positive integer or None, got {max_answer_tokens!r}.")
        return cls(
            _indices(data_configs, data_config_count),
            _names(finish_reasons),
            max_answer_tokens,
            missing,  # type: ignore[arg-type]
            check_min_score(min_score),
        )

    def describe(self) -> str:
        """The selection's arguments that narrow it, as they are passed (or ``the default selection``)."""
        parts = []
        if self.data_configs is not None:
            parts.append(f"data_configs={sorted(self.data_configs)}")
        if self.finish_reasons is not None:
            parts.append(f"finish_reasons={sorted(self.finish_reasons)}")
        if self.max_answer_tokens is not None:
            parts.append(f"max_answer_tokens={self.max_answer_tokens}")
        if self.min_score is not None:
            parts.append(f"min_score={dict(self.min_score)}")
        if self.missing != "error":
            parts.append(f"missing={self.missing!r}")
        return ", ".join(parts) or "the default selection"

    def answers(
        self, reasons: list[str], lengths: list[int], metrics: list[Mapping[str, float] | None] | None = None
    ) -> tuple[tuple[int, ...], str | None]:
        """The answers this selection keeps, and when it keeps none the reason (``finish_reason`` when no answer
        has a kept finish reason, else ``max_answer_tokens`` when none of those fits, else ``unscored`` when they
        have no reference to score against, else ``min_score``). ``metrics``: each answer's, with a score bar."""
        by_reason = [
            i for i, reason in enumerate(reasons) if self.finish_reasons is None or reason in self.finish_reasons
        ]
        by_length = [i for i in by_reason if self.max_answer_tokens is None or lengths[i] <= self.max_answer_tokens]
        scored = metrics if metrics is not None else [None] * len(reasons)
        bar = self.min_score or ()  # an answer without a reference is below every bar
        kept = tuple(i for i in by_length if not bar or all((scored[i] or {}).get(n, -1.0) >= v for n, v in bar))
        if kept:
            return kept, None
        if not by_reason:
            return kept, "finish_reason"
        if not by_length:
            return kept, "max_answer_tokens"
        return kept, "unscored" if all(scored[i] is None for i in by_length) else "min_score"


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
    """What a selection left out. The counts of :data:`REASONS` count samples (run order, duplicates included):
    those of data configs not kept, those whose key no cache holds (``missing="skip"``), those none of whose
    answers has a kept finish reason or fits ``max_answer_tokens``, those whose answers are all below
    ``min_score`` and those without a reference to score against (``unscored``, with a score bar). ``answers``
    counts the answers of kept samples that the answer filters refused."""

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


@dataclass(frozen=True)
class Items:
    """The items of a dataset: ``sample[i]`` is item ``i``'s position among the samples and ``answer[i]`` its
    answer index, or -1 for an answer drawn when read (``sequences="random"``) among ``allowed`` (the kept answers
    of a sample whose answers were filtered; any answer otherwise)."""

    sample: np.ndarray[Any, np.dtype[np.int64]]
    answer: np.ndarray[Any, np.dtype[np.int64]]
    left_out: LeftOut
    allowed: dict[int, tuple[int, ...]] = field(default_factory=dict)


def _metrics_of(scores: Scores, key: str, count: int) -> list[Mapping[str, float] | None]:
    """The metrics of ``key``'s ``count`` answers from ``scores`` (every one must be there)."""
    if any((key, index) not in scores for index in range(count)):
        raise ConfigError(
            f"the scores lack answers of key {key[:12]}... ({count} stored); they were computed for another "
            "artifact: score this one (gencache score ARTIFACT --out FILE) and pass that file."
        )
    return [scores[(key, index)] for index in range(count)]


def select_items(
    samples: Any,
    cache: Any,
    selection: Selection,
    sequences: str,
    *,
    owns: Callable[[Any], bool] | None = None,
    check: Callable[[int, list[int]], None] | None = None,
    scores: Scores | None = None,
) -> Items:
    """The items of ``samples`` (a :class:`~gencache.data.samples.SampleSet`) read from ``cache`` under
    ``selection`` and ``sequences`` (``first``, ``random`` or ``all``). Samples ``owns(sample)`` rejects (another
    shard's) are not items and not counted. ``check(position, answer_lengths)`` sees each kept sample with the
    lengths of the answers it may serve. ``scores`` holds every answer's metrics when the selection has a score bar
    (an answer it lacks is a :class:`ConfigError`). A selection that keeps no item is a :class:`ConfigError`
    naming it and what it left out."""
    owned = [p for p, s in enumerate(samples) if owns is None or owns(s)]
    chosen = [
        p for p in owned if selection.data_configs is None or samples[p].data_config_index in selection.data_configs
    ]
    counts = dict.fromkeys(("missing", "finish_reason", "max_answer_tokens", "min_score", "unscored"), 0)
    counts["data_configs"] = len(owned) - len(chosen)
    if selection.missing == "error":
        cache.require(sorted({samples[p].key for p in chosen}))
    filters = (selection.finish_reasons, selection.max_answer_tokens, selection.min_score)
    read_answers = any(f is not None for f in filters) or sequences == "all" or check is not None
    item_sample: list[int] = []
    item_answer: list[int] = []
    allowed: dict[int, tuple[int, ...]] = {}
    refused = 0
    for position in chosen:
        key = samples[position].key
        if key not in cache:
            counts["missing"] += 1
            continue
        if not read_answers:
            item_sample.append(position)
            item_answer.append(0 if sequences == "first" else -1)
            continue
        entry = cache.metadata(key)
        reasons, lengths = list(entry["finish_reasons"]), [int(ref["shape"][0]) for ref in entry["sequences"]]
        metrics = None if scores is None else _metrics_of(scores, key, len(reasons))
        kept, why = selection.answers(reasons, lengths, metrics)
        if why is not None:
            counts[why] += 1
            continue
        refused += len(reasons) - len(kept)
        served = kept[:1] if sequences == "first" else kept
        if check is not None:
            check(position, [lengths[i] for i in served])
        if sequences == "random":
            item_sample.append(position)
            item_answer.append(-1)
            if len(kept) < len(reasons):
                allowed[position] = kept
        else:
            item_sample.extend([position] * len(served))
            item_answer.extend(served)
    left_out = LeftOut(**counts, answers=refused, considered=len(owned))
    if not item_sample:
        raise ConfigError(f"the selection ({selection.describe()}) keeps no item: {left_out.describe()}; widen it.")
    return Items(np.asarray(item_sample, dtype=np.int64), np.asarray(item_answer, dtype=np.int64), left_out, allowed)
