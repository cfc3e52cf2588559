"""The answer as scored, and how it compares with its reference: pure and I/O-free.

The thinking block goes first (an unclosed ``<think>`` means no answer), then the recipe's cut (``first_line`` for
the short-answer recipes, whose prompts ask for the answer only) or the data config's ``answer_pattern``. The
metrics use SQuAD's normalization; a reference that normalizes to nothing is no reference (an empty answer would
match it). docs/quality.md gives the rules in full.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

#: Every metric an answer gets, in the order reports show them.
METRICS: tuple[str, ...] = ("exact_match", "f1", "contains")

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


@dataclass(frozen=True)
class AnswerRule:
    """How one data config's answers are cut and scored: the recipe's cut (``first_line`` or the whole text) or a
    compiled ``pattern``, whether the reference holds several values (``split_values``: the needles of ``niah``)
    and the ``headline`` metric."""

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
    """Whether a prompt, given as the texts of its parts, ends inside a thinking block: its last ``<think>`` has no
    ``</think>`` after it."""
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
