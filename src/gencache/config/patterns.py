"""The rule of a data config's ``answer_pattern``: a regular expression that cuts the answer as scored out of a
stored answer (see :mod:`gencache.data.answers`), checked where configs are validated and where ``gencache score``
takes one on its command line."""

from __future__ import annotations

import re


def answer_pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be an ``answer_pattern`` (it does not compile, or it has several groups and none
    named ``answer``), or None when it can."""
    try:
        compiled = re.compile(pattern)
    except re.error as error:
        return f"is not a regular expression ({error})"
    if compiled.groups > 1 and "answer" not in compiled.groupindex:
        return (
            f"has {compiled.groups} groups: name the one that holds the answer (?P<answer>...), or use one group "
            "(non-capturing ones are written (?:...))"
        )
    return None
