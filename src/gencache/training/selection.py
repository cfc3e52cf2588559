"""Which items a :class:`~gencache.training.DistillationDataset` serves, and what it left out, counted by reason.

A selection keeps some data configs (``data_configs``, indices), some answers (``finish_reasons``, a
``max_answer_tokens`` cap, a ``min_score`` bar such as ``{"f1": 0.5}``) and says what a sample whose key no cache
holds does (``missing="error"``, the default, raises before the first item; ``"skip"`` leaves it out). The answer
filters read the manifest's finish reasons and shapes only, never the payload; the score bar reads the answers'
metrics from a score lookup (:mod:`gencache.data.scores`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import numpy as np

from gencache.artifact.names import FINISH_REASONS
from gencache.core.errors import ConfigError
from gencache.data.scores import Scores, check_min_score

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
    """What a selection left out: samples counted by :data:`REASONS` (run order, duplicates included), and
    ``answers``, the answers of kept samples that the answer filters refused."""

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


def select_items(
    samples: Any,
    cache: Any,
    arguments: Mapping[str, Any],
    sequences: str,
    *,
    owns: Callable[[Any], bool] | None = None,
    check: Callable[[int, list[int]], None] | None = None,
    scores: Callable[[], Scores] | None = None,
) -> Items:
    """The items of ``samples`` (a :class:`~gencache.data.samples.SampleSet`) read from ``cache`` under the
    selection ``arguments`` (``data_configs``, ``finish_reasons``, ``max_answer_tokens``, ``missing``,
    ``min_score``: each checked, a :class:`ConfigError` naming the one that is wrong) and ``sequences`` (``first``,
    ``random`` or ``all``). Samples ``owns(sample)`` rejects (another shard's) are not items and not counted.
    ``check(position, answer_lengths)`` sees each kept sample with the lengths of the answers it may serve;
    ``scores()`` gives every answer's metrics when there is a score bar. A selection that keeps no item is a
    :class:`ConfigError` naming it and what it left out."""
    configs, reasons, cap, missing = (
        arguments[name] for name in ("data_configs", "finish_reasons", "max_answer_tokens", "missing")
    )
    if missing not in MISSING_POLICIES:
        raise ConfigError(f"missing must be one of {', '.join(MISSING_POLICIES)}, got {missing!r}.")
    if cap is not None and (type(cap) is not int or cap < 1):
        raise ConfigError(f"max_answer_tokens must be a positive integer or None, got {cap!r}.")
    if reasons is not None:
        kept_reasons = frozenset(() if isinstance(reasons, str) else reasons)
        if not kept_reasons or not kept_reasons <= set(FINISH_REASONS):
            raise ConfigError(
                f"finish_reasons takes a list of {', '.join(FINISH_REASONS)} (at least one), got {reasons!r}."
            )
    if configs is not None:
        chosen_configs = [configs] if isinstance(configs, int) else list(configs)
        count = len(samples.summaries)
        if not chosen_configs or any(type(i) is not int or not 0 <= i < count for i in chosen_configs):
            raise ConfigError(f"data_configs must list data config indices from 0 to {count - 1}, got {configs!r}.")
    bar = check_min_score(arguments["min_score"])
    metrics_of = scores() if bar is not None and scores is not None else None
    owned = [p for p, s in enumerate(samples) if owns is None or owns(s)]
    chosen = [p for p in owned if configs is None or samples[p].data_config_index in chosen_configs]
    counts = dict.fromkeys(REASONS, 0)
    counts["data_configs"] = len(owned) - len(chosen)
    if missing == "error":
        cache.require(sorted({samples[p].key for p in chosen}))
    read_answers = reasons is not None or cap is not None or bar is not None or sequences == "all" or check is not None
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
        finished, lengths = entry["finish_reasons"], [int(ref["shape"][0]) for ref in entry["sequences"]]
        by_reason = [i for i, reason in enumerate(finished) if reasons is None or reason in kept_reasons]
        by_length = [i for i in by_reason if cap is None or lengths[i] <= cap]
        metrics: list[Mapping[str, float] | None] = [None] * len(finished)
        if metrics_of is not None:
            if any((key, index) not in metrics_of for index in range(len(finished))):
                raise ConfigError(
                    f"the scores lack answers of key {key[:12]}... ({len(finished)} stored); they were computed for "
                    "another artifact: score this one (gencache score ARTIFACT --out FILE) and pass that file."
                )
            metrics = [metrics_of[(key, index)] for index in range(len(finished))]
        # an answer without a reference is below every bar
        kept = tuple(i for i in by_length if not bar or all((metrics[i] or {}).get(n, -1.0) >= v for n, v in bar))
        if not kept:
            why = "finish_reason" if not by_reason else "max_answer_tokens" if not by_length else None
            counts[why or ("unscored" if all(metrics[i] is None for i in by_length) else "min_score")] += 1
            continue
        refused += len(finished) - len(kept)
        served = kept[:1] if sequences == "first" else kept
        if check is not None:
            check(position, [lengths[i] for i in served])
        if sequences == "random":
            item_sample.append(position)
            item_answer.append(-1)
            if len(kept) < len(finished):
                allowed[position] = kept
        else:
            item_sample.extend([position] * len(served))
            item_answer.extend(served)
    left_out = LeftOut(**counts, answers=refused, considered=len(owned))
    if not item_sample:
        narrowing = [
            f"{name}={value!r}"
            for name, value in arguments.items()
            if value is not None and not (name == "missing" and value == "error")
        ]
        raise ConfigError(
            f"the selection ({', '.join(narrowing) or 'the default selection'}) keeps no item: "
            f"{left_out.describe()}; widen it."
        )
    return Items(np.asarray(item_sample, dtype=np.int64), np.asarray(item_answer, dtype=np.int64), left_out, allowed)
