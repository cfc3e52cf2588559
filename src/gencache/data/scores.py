"""Every stored answer scored against its sample's reference (reading the manifest only, never the payload),
the score files ``gencache score --out`` writes, and the bars a selection by score takes.

The answer as scored: the thinking block goes first (an unclosed ``<think>`` means no answer), then the recipe's cut
(``first_line`` for the short-answer recipes, whose prompts ask for the answer only) or the data config's
``answer_pattern``. The metrics use SQuAD's normalization; a reference that normalizes to nothing is no reference
(an empty answer would match it). docs/quality.md gives the rules in full.
"""

from __future__ import annotations

import json
import os
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gencache.config.models import answer_pattern_problem
from gencache.core.errors import ConfigError, DatasetError
from gencache.data.samples import Sample, SampleSet

#: Every metric an answer gets, in the order reports show them.
METRICS: tuple[str, ...] = ("exact_match", "f1", "contains")

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


@dataclass(frozen=True)
class AnswerRule:
    """How one data config's answers are cut (``first_line``, the whole text or ``pattern``) and scored: whether the
    reference holds several values (``split_values``: the needles of ``niah``), and the ``headline`` metric."""

    first_line: bool = False
    pattern: re.Pattern[str] | None = None
    split_values: bool = False
    headline: str = "f1"

    @property
    def description(self) -> str:
        if self.pattern is not None:
            return f"answer_pattern {self.pattern.pattern!r}"
        return "the first non-empty line" if self.first_line else "the whole text"


def answer_rule(dataset_name: str, answer_pattern: str | None = None) -> AnswerRule:
    """The rule of a data config of ``dataset_name`` (its ``answer_pattern``, checked by :mod:`gencache.config`,
    replaces the recipe's cut)."""
    return AnswerRule(
        first_line=dataset_name in ("hotpot_qa", "musique", "biography", "niah", "table"),
        pattern=None if answer_pattern is None else re.compile(answer_pattern),
        split_values=dataset_name == "niah",
        headline="contains" if dataset_name in ("niah", "biography") else "f1",
    )


def prompt_opens_thinking(parts: Sequence[str]) -> bool:
    """Whether the texts of a prompt's parts end inside a thinking block (a last ``<think>`` never closed)."""
    text = "".join(parts)
    return text.rfind(THINK_OPEN) > text.rfind(THINK_CLOSE)


def extract_answer(text: str, rule: AnswerRule, *, opened: bool = False) -> str:
    """The answer as scored: ``text`` after its last ``</think>`` (none when a ``<think>``, or the one the prompt
    ``opened``, is never closed), cut by ``rule`` (see the module docstring)."""
    closed = text.rfind(THINK_CLOSE)
    if closed < 0 and (opened or THINK_OPEN in text):
        return ""
    rest = text[closed + len(THINK_CLOSE) :] if closed >= 0 else text
    if rule.pattern is not None:
        found = rule.pattern.search(rest)
        if found is None:
            return ""
        group: str | int = "answer" if "answer" in rule.pattern.groupindex else min(rule.pattern.groups, 1)
        return (found.group(group) or "").strip()
    if rule.first_line:
        return next((line.strip() for line in rest.splitlines() if line.strip()), "")
    return rest.strip()


def normalize(text: str) -> str:
    """``text`` lowercased, without ASCII punctuation or the articles a/an/the, whitespace collapsed."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def score_answer(answer: str, reference: str, rule: AnswerRule) -> dict[str, float] | None:
    """Every metric of ``answer`` (already extracted) against ``reference``; None when ``reference`` normalizes to
    nothing (no reference, so the answer is unscored)."""
    predicted, gold = normalize(answer), normalize(reference)
    if not gold:
        return None
    common = sum((Counter(predicted.split()) & Counter(gold.split())).values())
    f1 = 0.0
    if common:
        precision, recall = common / len(predicted.split()), common / len(gold.split())
        f1 = 2 * precision * recall / (precision + recall)
    wanted = [value for value in map(normalize, reference.split() if rule.split_values else [reference]) if value]
    found = sum(f" {value} " in f" {predicted} " for value in wanted) / len(wanted)
    return {"exact_match": float(predicted == gold), "f1": f1, "contains": found}


#: The fields that join an answer back to its source row, with their pyarrow types.
JOIN_COLUMNS: dict[str, str] = {
    "key": "string",
    "dataset_name": "string",
    "data_config_index": "int64",
    "sample_index": "int64",
    "row_id": "string",
    "row_index": "int64",
    "sequence_index": "int64",
}
#: The columns of a score file, in order, with their pyarrow types (metrics are null for an answer without a
#: reference).
SCORE_COLUMNS: dict[str, str] = (
    {"key": "string", "sequence_index": "int64", "data_config_index": "int64"}
    | JOIN_COLUMNS
    | {"finish_reason": "string", "token_length": "int64", "answer": "string", "reference": "string"}
    | dict.fromkeys(METRICS, "float64")
)


@dataclass(frozen=True)
class ScoredAnswer:
    """One stored answer scored: where it comes from, how it ended, the answer as scored, reference and metrics."""

    key: str
    sequence_index: int
    data_config_index: int
    dataset_name: str
    sample_index: int
    row_id: str | None
    row_index: int | None
    finish_reason: str
    token_length: int
    answer: str
    reference: str | None
    metrics: Mapping[str, float] | None

    def row(self) -> dict[str, Any]:
        row = asdict(self)
        metrics = row.pop("metrics") or {}
        return {**row, **{name: metrics.get(name) for name in METRICS}}


def join_fields(sample: Sample, names: Mapping[int, str]) -> dict[str, Any]:
    """:data:`JOIN_COLUMNS` of ``sample`` but its key (``names``: each data config's dataset name)."""
    return {
        "dataset_name": names[sample.data_config_index],
        "data_config_index": sample.data_config_index,
        "sample_index": sample.sample_index,
        "row_id": None if sample.source_id is None else str(sample.source_id),
        "row_index": sample.row,
    }


def rules_of(samples: SampleSet, patterns: Mapping[int, str] | None = None) -> dict[int, AnswerRule]:
    """Each data config's answer rule: its recipe's, or its ``answer_pattern``, or the one ``patterns`` gives for
    its index (``gencache score --answer-pattern I=REGEX``, checked here: a :class:`ConfigError` naming it)."""
    chosen = dict(patterns or {})
    count = len(samples.summaries)
    for index, pattern in chosen.items():
        if not 0 <= index < count:
            raise ConfigError(f"--answer-pattern {index}=...: the run has data configs 0..{count - 1}.")
        problem = answer_pattern_problem(pattern)
        if problem is not None:
            raise ConfigError(f"--answer-pattern {index}={pattern!r} {problem}.")
    return {
        summary.index: answer_rule(summary.dataset_name, chosen.get(summary.index, summary.answer_pattern))
        for summary in samples.summaries
    }


def score_cache(
    samples: SampleSet, cache: Any, rules: Mapping[int, AnswerRule], *, every_entry: bool = True
) -> list[ScoredAnswer]:
    """Every answer of ``samples``' keys that ``cache`` holds, scored against the reference of its key's first
    sample, in run order; with ``every_entry`` (a run's own artifact) every key the cache holds must be one of them."""
    scored: list[ScoredAnswer] = []
    names = {summary.index: summary.dataset_name for summary in samples.summaries}
    matched = 0
    for sample in samples.unique:
        entry = cache.metadata(sample.key)
        if entry is None:
            continue
        matched += 1
        rule, reference = rules[sample.data_config_index], sample.reference
        opened = prompt_opens_thinking([part.text for part in sample.parts])
        sequences = zip(entry["text"], entry["finish_reasons"], entry["sequences"], strict=True)
        for index, (text, reason, ref) in enumerate(sequences):
            answer = extract_answer(text, rule, opened=opened)
            scored.append(
                ScoredAnswer(
                    key=sample.key,
                    sequence_index=index,
                    **join_fields(sample, names),
                    finish_reason=reason,
                    token_length=int(ref["shape"][0]),
                    answer=answer,
                    reference=reference,
                    metrics=None if reference is None else score_answer(answer, reference, rule),
                )
            )
    unmatched = len(cache) - matched
    if unmatched and every_entry:
        raise DatasetError(
            f"{unmatched} cache entries match no rebuilt sample: the datasets changed since the run; use the old data."
        )
    return scored


def score_format(path: str | os.PathLike[str]) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in (".jsonl", ".parquet"):
        raise ConfigError(f"{path}: a score file ends in .jsonl or .parquet (JSON Lines or parquet).")
    return suffix[1:]


def read_scores(path: str | os.PathLike[str]) -> dict[tuple[str, int], dict[str, float] | None]:
    """The metrics of every answer of a score file (``gencache score --out``), by (key, sequence index)."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{file}: no such score file; write one with gencache score ARTIFACT --out {file.name}.")
    try:
        if score_format(file) == "parquet":
            import pyarrow.parquet as pq

            rows = pq.read_table(file, columns=["key", "sequence_index", *METRICS]).to_pylist()
        else:
            with open(file, encoding="utf-8") as handle:
                rows = [json.loads(line) for line in handle]
        scores = {
            (row["key"], row["sequence_index"]): None if row["f1"] is None else {name: row[name] for name in METRICS}
            for row in rows
        }
    except (OSError, ValueError, KeyError, TypeError) as error:  # pyarrow's and json's errors derive from these
        raise ConfigError(f"{file}: not a score file written by gencache score ({error!r}).") from None
    return scores


def check_min_score(value: Mapping[str, float] | None) -> tuple[tuple[str, float], ...] | None:
    """A score bar (``{"f1": 0.5}``: every metric named at least its value) as sorted pairs, checked: metrics of
    :data:`METRICS`, values between 0 and 1 (a :class:`ConfigError` otherwise)."""
    if value is None:
        return None
    bars = dict(value) if isinstance(value, Mapping) else {}
    numbers = all(isinstance(bar, int | float) and not isinstance(bar, bool) for bar in bars.values())
    if not bars or not numbers or not all(name in METRICS and 0 <= bar <= 1 for name, bar in bars.items()):
        raise ConfigError(f"min_score must map metrics ({', '.join(METRICS)}) to numbers from 0 to 1, got {value!r}.")
    return tuple(sorted((name, float(bar)) for name, bar in bars.items()))


def parse_min_score(texts: Iterable[str]) -> dict[str, float]:
    """``--min-score METRIC=VALUE`` options (repeatable) as a bar for :func:`check_min_score`."""
    bar: dict[str, float] = {}
    for text in texts:
        name, _, value = text.partition("=")
        try:
            bar[name.strip()] = float(value)  # no "=": float("") fails too
        except ValueError:
            raise ConfigError(f"--min-score must look like METRIC=VALUE (e.g. f1=0.5), got {text!r}.") from None
    check_min_score(bar)
    return bar
