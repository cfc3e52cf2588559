"""How an answer compares with its reference: normalized exact match, token F1 and containment.

Pure and I/O-free: strings in, floats out. The normalization is the usual one of SQuAD's evaluation script:
lowercase, every ASCII punctuation character removed, the articles ``a``, ``an`` and ``the`` removed as whole
words, and whitespace collapsed to single spaces.

- :func:`exact_match`: 1.0 when the normalized answer equals the normalized reference, else 0.0.
- :func:`token_f1`: the harmonic mean of precision and recall over the normalized tokens (a multiset: a token
  counts as often as it appears in both), 0.0 when either side has no token.
- :func:`contains`: the share of ``values`` (each normalized) found in the normalized answer as a run of whole
  words; the needle-in-a-haystack rule when ``values`` are the needles, and "the gold answer appears in the
  answer" when ``values`` is the one reference.

A reference that normalizes to nothing (``"?"``, ``"-"``, ``"the"``) is no reference (:func:`scorable` is false):
an empty answer would match it exactly, so it is not scored against.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize(text: str) -> str:
    """``text`` lowercased, without ASCII punctuation or the articles a/an/the, whitespace collapsed."""
    without_punctuation = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", without_punctuation).split())


def scorable(reference: str) -> bool:
    """Whether ``reference`` can be scored against: something is left of it once normalized."""
    return bool(normalize(reference))


def tokens(text: str) -> list[str]:
    """The normalized tokens of ``text`` (:func:`normalize`, split on whitespace)."""
    return normalize(text).split()


def exact_match(answer: str, reference: str) -> float:
    """1.0 when ``answer`` and ``reference`` are equal once normalized, else 0.0."""
    return 1.0 if normalize(answer) == normalize(reference) else 0.0


def token_f1(answer: str, reference: str) -> float:
    """Token F1 of ``answer`` against ``reference`` over their normalized tokens (0.0 when either has none)."""
    return _f1(tokens(answer), tokens(reference))


def _f1(predicted: list[str], gold: list[str]) -> float:
    if not predicted or not gold:
        return 0.0
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision = common / len(predicted)
    recall = common / len(gold)
    return 2 * precision * recall / (precision + recall)


def contains(answer: str, values: Sequence[str]) -> float:
    """The share of ``values`` whose normalized text appears in the normalized ``answer`` as whole words (values
    that normalize to nothing are not counted; 0.0 when none is left)."""
    return _contains(normalize(answer), values)


def _contains(normalized: str, values: Sequence[str]) -> float:
    wanted = [normalize(value) for value in values]
    wanted = [value for value in wanted if value]
    if not wanted:
        return 0.0
    padded = f" {normalized} "
    return sum(f" {value} " in padded for value in wanted) / len(wanted)


def compare(answer: str, reference: str, values: Sequence[str] | None = None) -> tuple[float, float, float]:
    """:func:`exact_match`, :func:`token_f1` and :func:`contains` of ``answer`` against ``reference`` (``contains``
    over ``values``, by default the reference itself), each text normalized once."""
    predicted, gold = normalize(answer), normalize(reference)
    found = _contains(predicted, [reference] if values is None else values)
    return (1.0 if predicted == gold else 0.0), _f1(predicted.split(), gold.split()), found
