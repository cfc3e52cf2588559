"""``gencache score``: every stored answer scored against its sample's reference, from the artifact alone.

The references are the samples' gold answers, so the samples are rebuilt from the artifact's checked record: the
recorded sources must be there and unchanged, or pointed at with ``data_root``/``sources`` as for ``export``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gencache.artifact.store import Location, location
from gencache.core.errors import ConfigError, DatasetError, first_line
from gencache.data.answers import METRICS
from gencache.data.recorded import load_recorded_tokenizer, open_recorded_run, rebuild_samples
from gencache.data.samples import needs_tokenizer
from gencache.data.scores import SCORE_COLUMNS, ScoredAnswer, rules_of, score_cache, score_format
from gencache.run.export import check_out, write_atomic, write_rows

#: The verdict's levels, the worst first.
LEVELS = ("bad", "warn", "good")
NO_GOLD = "No answer has a gold reference: nothing is scored against the gold."


@dataclass(frozen=True)
class ScoreGroup:
    """Counts and means over some answers (a mean is None when no answer is scored), and the same per finish
    reason."""

    label: str
    answers: int
    scored: int
    means: Mapping[str, float | None]
    by_finish_reason: Mapping[str, ScoreGroup] = field(default_factory=dict)
    data_config_index: int | None = None
    dataset_name: str | None = None
    headline: str = "f1"
    rule: str = ""

    @property
    def unscored(self) -> int:
        return self.answers - self.scored

    def as_json(self) -> dict[str, Any]:
        data = {"answers": self.answers, "scored": self.scored, "unscored": self.unscored, "means": dict(self.means)}
        if self.data_config_index is not None:
            data |= {"data_config_index": self.data_config_index, "dataset_name": self.dataset_name}
            data |= {"headline": self.headline, "answer_rule": self.rule}
        if self.by_finish_reason:
            data["by_finish_reason"] = {name: group.as_json() for name, group in self.by_finish_reason.items()}
        return data


def _group(label: str, answers: Sequence[ScoredAnswer], *, split: bool = True, **details: Any) -> ScoreGroup:
    scored = [answer.metrics for answer in answers if answer.metrics is not None]
    means = {name: (sum(m[name] for m in scored) / len(scored) if scored else None) for name in METRICS}
    reasons = sorted({answer.finish_reason for answer in answers}) if split else []
    by_reason = {r: _group(r, [a for a in answers if a.finish_reason == r], split=False) for r in reasons}
    return ScoreGroup(label, len(answers), len(scored), means, by_reason, **details)


def _share(part: int, whole: int) -> str:
    return f"{part} of {whole} answers ({part / whole:.0%})"


@dataclass(frozen=True)
class ScoreReport:
    """What :func:`score` found: every answer in run order, the overall group and one per data config; and what
    scoring opened (the reader, the checked record, the rebuilt samples), for ``gencache report``."""

    artifact: Location
    answers: tuple[ScoredAnswer, ...]
    overall: ScoreGroup
    groups: tuple[ScoreGroup, ...]
    max_new_tokens: int | None = None
    out: Path | None = None
    reader: Any = field(default=None, repr=False, compare=False)
    resolved: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    samples: Any = field(default=None, repr=False, compare=False)

    @property
    def by_answer(self) -> dict[tuple[str, int], Mapping[str, float] | None]:
        """Each answer's metrics by (key, sequence index): what ``DistillationDataset(..., scores=)`` takes."""
        return {(answer.key, answer.sequence_index): answer.metrics for answer in self.answers}

    @property
    def verdict(self) -> list[tuple[str, str]]:
        """What matters first, as (level, sentence) pairs, the worst first."""
        total = self.overall.answers
        if not total:
            return [("bad", "The artifact holds no answer.")]
        cut = sum(answer.finish_reason == "length" for answer in self.answers)
        limit = f"max_new_tokens ({self.max_new_tokens})" if self.max_new_tokens else "max_new_tokens"
        empty = sum(not answer.answer for answer in self.answers)
        signs = [
            (_level(cut / total), f"{_share(cut, total)} were cut at {limit}."),
            (_level(empty / total), f"{_share(empty, total)} are empty as scored."),
        ]
        means = [(group, group.means[group.headline] or 0.0) for group in self.groups if group.scored]
        if means:
            worst = min(mean for _, mean in means)
            scores = ", ".join(f"{group.headline} {mean:.2f} ({group.dataset_name})" for group, mean in means)
            signs.append(("bad" if worst < 0.2 else "warn" if worst < 0.5 else "good", f"Against the gold: {scores}."))
            unscored = self.overall.unscored
            signs.append(
                ("warn" if unscored * 2 >= total else "good", f"{_share(unscored, total)} have no gold reference.")
            )
        else:
            signs.append(("warn", NO_GOLD))
        return sorted(signs, key=lambda sign: LEVELS.index(sign[0]))

    def as_json(self) -> dict[str, Any]:
        return {
            "artifact": str(self.artifact),
            "metrics": list(METRICS),
            "overall": self.overall.as_json(),
            "data_configs": [group.as_json() for group in self.groups],
            "verdict": [{"level": level, "text": text} for level, text in self.verdict],
            "out": None if self.out is None else str(self.out),
        }


def _level(share: float) -> str:
    return "bad" if share >= 0.5 else "warn" if share else "good"


def score(
    artifact: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    answer_patterns: Mapping[int, str] | None = None,
    data_root: str | os.PathLike[str] | None = None,
    sources: Mapping[int, str] | None = None,
) -> ScoreReport:
    """Score every answer of ``artifact`` (an artifact, one shard or a shard base) against its sample's reference.
    ``answer_patterns`` replaces data configs' answer rules by index; ``out`` (``.jsonl`` or ``.parquet``; must not
    exist) receives one row per answer."""
    parquet = out is not None and score_format(out) == "parquet"
    out_path = None if out is None else check_out(out)
    try:
        reader, run = open_recorded_run(artifact)
        tokenizer = load_recorded_tokenizer(run) if needs_tokenizer(run.config) else None
        samples = rebuild_samples(run, tokenizer, sources=sources, data_root=data_root)
    except (ConfigError, DatasetError) as error:  # no run recorded, sources gone or changed
        raise type(error)(
            f"Cannot score {artifact}: the references come from its samples, rebuilt from the recorded sources, "
            f"and {first_line(error)}"
        ) from None
    rules = rules_of(samples, answer_patterns)
    answers = tuple(score_cache(samples, reader, rules))
    groups = tuple(
        _group(
            f"data_configs[{summary.index}] {summary.dataset_name}",
            [answer for answer in answers if answer.data_config_index == summary.index],
            data_config_index=summary.index,
            dataset_name=summary.dataset_name,
            headline=rules[summary.index].headline,
            rule=rules[summary.index].description,
        )
        for summary in samples.summaries
    )
    absolute = location(artifact)
    if out_path is not None:
        metadata = {"artifact": str(absolute), "run_digest": run.resolved["run_digest"]}
        rows = (answer.row() for answer in answers)
        write_atomic(out_path, lambda handle: write_rows(rows, handle, parquet, metadata, SCORE_COLUMNS))
    overall = _group("overall", answers)
    return ScoreReport(
        absolute, answers, overall, groups, run.generation["max_new_tokens"], out_path, reader, run.resolved, samples
    )
