"""The metrics and the answer rule, pinned on hand-written cases: SQuAD's normalization (case, punctuation, articles,
whitespace), exact match, token F1 on partial overlap, the needle rule, the thinking block, an empty answer, a
sample without a reference, an answer_pattern, and the score bars a selection takes."""

from __future__ import annotations

import pytest

from gencache.core.errors import ConfigError
from gencache.data.scores import (
    AnswerRule,
    answer_rule,
    check_min_score,
    extract_answer,
    normalize,
    parse_min_score,
    prompt_opens_thinking,
    score_answer,
)


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an   apple,  a PEAR; the fig. ", "apple pear fig"),
        ("Theatre and anthem", "theatre and anthem"),  # articles only as whole words
        ("U.S.A.", "usa"),
        ("", ""),
        ("the a an", ""),
    ],
)
def test_normalization_is_squads(text: str, normalized: str) -> None:
    assert normalize(text) == normalized


def metrics(answer: str, reference: str, recipe: str = "chat") -> dict[str, float] | None:
    return score_answer(answer, reference, answer_rule(recipe))


def test_exact_match_ignores_case_articles_and_punctuation() -> None:
    assert metrics("The Beatles.", "beatles")["exact_match"] == 1.0  # type: ignore[index]
    assert metrics("Beatles band", "The Beatles")["exact_match"] == 0.0  # type: ignore[index]
    assert metrics("", "Paris")["exact_match"] == 0.0  # type: ignore[index]


def test_token_f1_on_partial_overlap() -> None:
    def f1(answer: str, reference: str) -> float:
        return metrics(answer, reference)["f1"]  # type: ignore[index]

    # answer tokens: {new, york, city} (3), reference: {new, york} (2); 2 in common
    assert f1("New York City", "new york") == pytest.approx(2 * (2 / 3) * 1.0 / (2 / 3 + 1.0))  # 0.8
    assert f1("the the cat", "cat cat") == pytest.approx(2 * 1.0 * 0.5 / 1.5)  # multiset: one cat in common
    assert f1("Paris", "Paris") == 1.0
    assert f1("London", "Paris") == 0.0
    assert f1("", "Paris") == 0.0


def test_contains_counts_whole_words_of_each_value() -> None:
    assert metrics("The special magic number is 7281946.", "7281946", "niah")["contains"] == 1.0  # type: ignore[index]
    assert metrics("The number is 72819460", "7281946", "niah")["contains"] == 0.0  # type: ignore[index]
    assert metrics("values: 11 and 33", "11 22 33 44", "niah")["contains"] == 0.5  # type: ignore[index]
    assert metrics("values: 11 and 33", "11 ? 33", "niah")["contains"] == 1.0  # type: ignore[index]
    assert metrics("Born in New York City", "new york")["contains"] == 1.0  # type: ignore[index]


def test_the_thinking_block_is_removed() -> None:
    whole = AnswerRule()  # the whole text
    assert extract_answer("<think>maybe Lyon</think>\nParis", whole) == "Paris"
    assert extract_answer("<think>a</think><think>b</think> Rome", whole) == "Rome"  # after the last one
    assert extract_answer("<think>still thinking about Lyon", whole) == ""  # never closed: no answer
    assert extract_answer("Paris", whole) == "Paris"
    qa = answer_rule("hotpot_qa")
    assert extract_answer("<think>Lyon? no.</think>\n\n Paris \nbecause it is the capital", qa) == "Paris"
    assert score_answer(extract_answer("<think>Paris</think>Lyon", qa), "Paris", qa)["f1"] == 0.0


def test_a_think_block_the_prompt_opened_is_not_the_answer() -> None:
    """Templates that end the prompt with ``<think>\\n`` (DeepSeek-R1 distills, Qwen3 *-Thinking): the stored text
    is still thinking up to its ``</think>``, and a text cut short before one has no answer."""
    r1 = ("<|User|>Where is the needle?", "<|Assistant|><think>\n")
    assert prompt_opens_thinking(r1)
    assert prompt_opens_thinking(("<|User|>Where?<|Assistant|><thi", "nk>\n"))  # a tag across two parts
    assert not prompt_opens_thinking(("<|im_start|>assistant\n<think>\n\n</think>\n\n",))  # closed: Qwen3 off
    assert prompt_opens_thinking(("Say </think> then", "<think>"))
    assert not prompt_opens_thinking(("Where is the needle?",))
    niah = answer_rule("niah")
    thought = "The needle is 5 7 9, I should say so"  # cut by max_new_tokens while thinking
    opened = prompt_opens_thinking(r1)
    assert extract_answer(thought, niah, opened=opened) == ""
    assert score_answer(extract_answer(thought, niah, opened=opened), "5 7 9", niah) == {
        "exact_match": 0.0,
        "f1": 0.0,
        "contains": 0.0,
    }
    assert extract_answer("Maybe 1 2 3.\n</think>\n\n5 7 9", niah, opened=opened) == "5 7 9"
    assert extract_answer("a</think>b</think> c", AnswerRule(), opened=True) == "c"
    assert extract_answer(thought, niah) == thought  # without the prompt's block it is the answer


def test_a_reference_that_normalizes_to_nothing_is_no_reference() -> None:
    assert metrics("", "a 5") is not None
    for reference in ("?", "-", "the"):
        for rule in (answer_rule("hotpot_qa"), answer_rule("niah"), answer_rule("chat")):
            assert score_answer("", reference, rule) is None


def test_each_recipe_cuts_and_leads_with_its_own_rule() -> None:
    text = "  Paris\nThe capital of France.\n"
    assert extract_answer(text, answer_rule("musique")) == "Paris"
    assert extract_answer(text, answer_rule("table")) == "Paris"
    assert extract_answer(text, answer_rule("chat")) == "Paris\nThe capital of France."
    assert answer_rule("hotpot_qa").headline == "f1" and answer_rule("table").headline == "f1"
    assert answer_rule("niah").headline == "contains" and answer_rule("biography").headline == "contains"
    niah = answer_rule("niah")
    assert score_answer("The numbers are 5 and 9.", "5 7 9", niah)["contains"] == pytest.approx(2 / 3)
    assert score_answer("The numbers are 5 and 9.", "5 7 9", answer_rule("musique"))["contains"] == 0.0
    biography = answer_rule("biography")
    assert score_answer("She was born in Cape Town.", "Cape Town", biography) == {
        "exact_match": 0.0,
        "f1": pytest.approx(2 * (2 / 6) * 1.0 / (2 / 6 + 1.0)),
        "contains": 1.0,
    }


def test_an_empty_answer_scores_zero() -> None:
    assert score_answer("", "Paris", answer_rule("hotpot_qa")) == {"exact_match": 0.0, "f1": 0.0, "contains": 0.0}
    assert extract_answer("\n \n", answer_rule("hotpot_qa")) == ""


def test_an_answer_pattern_replaces_the_recipe_rule() -> None:
    named = answer_rule("hotpot_qa", r"Final answer:\s*(?P<answer>[^\n.]+)")
    assert extract_answer("Reasoning...\nFinal answer: Paris.\nDone", named) == "Paris"
    assert extract_answer("no marker here", named) == ""
    grouped = answer_rule("chat", r"\[(.*?)\]")
    assert extract_answer("<think>[Lyon]</think> it is [Paris]", grouped) == "Paris"
    whole = answer_rule("chat", r"\d+")
    assert extract_answer("about 42 of them", whole) == "42"
    assert "answer_pattern" in named.description and answer_rule("chat").description == "the whole text"


def test_answer_patterns_are_checked_where_configs_are() -> None:
    from gencache.config import parse_data_configs

    base = {"dataset_name": "hotpot_qa", "num_samples": 1, "num_data_strs": 0, "num_shots": 0, "subset": "fullwiki"}
    assert parse_data_configs([{**base, "answer_pattern": r"A: (.*)"}])[0].answer_pattern == r"A: (.*)"
    with pytest.raises(ConfigError, match=r"data_configs\[0\]\.answer_pattern.*not a regular expression"):
        parse_data_configs([{**base, "answer_pattern": "(unclosed"}])
    with pytest.raises(ConfigError, match="name the one that holds the answer"):
        parse_data_configs([{**base, "answer_pattern": "(a)(b)"}])


def test_score_bars() -> None:
    assert check_min_score({"f1": 0.5, "exact_match": 1}) == (("exact_match", 1.0), ("f1", 0.5))
    assert check_min_score(None) is None
    assert parse_min_score(["f1=0.5", "contains=1"]) == {"f1": 0.5, "contains": 1.0}
    for wrong in ({"f2": 0.5}, {"f1": 1.5}, {"f1": "high"}, {"f1": True}, {}):
        with pytest.raises(ConfigError, match="min_score"):
            check_min_score(wrong)  # type: ignore[arg-type]
    for text in ("f1", "f1=", "f1=x", "=0.5"):
        with pytest.raises(ConfigError, match=r"min-score|min_score"):
            parse_min_score([text])
