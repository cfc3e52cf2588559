"""Every golden case of the reference implementation reproduced exactly (tests/data/golden, see its README).

The expected values were produced by the reference code, never by gencache; do not regenerate them.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from typing import Any

import pytest

from gencache.config.kwargs import TEMPLATE_KWARGS
from gencache.data.keys import semantic_key
from gencache.data.prompts import TEMPLATES, normalize, prompt_text
from gencache.data.recipes import get_recipe
from support.dataset_helpers import GOLDEN, DataConfig

CASES: list[dict[str, Any]] = json.loads((GOLDEN / "cases.json").read_text(encoding="utf-8"))


def _run(case: dict[str, Any]) -> tuple[list[Any], list[str]]:
    recipe = get_recipe(case["dataset_name"])
    dc = DataConfig(
        dataset_name=case["dataset_name"],
        num_samples=case["num_samples"],
        num_data_strs=case["num_data_strs"],
        num_shots=case["num_shots"],
        subset=case["subset"],
        split=case["split"],
        seed=case["seed"],
        source=str(GOLDEN / case["fixture"]),
    )
    kwargs = recipe.kwargs_model.model_validate(case["data_kwargs"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        samples, _ = recipe.load(dc, kwargs, None)
    # Only the recipe's own warnings count: a ResourceWarning from another test's garbage can fire here too.
    return samples, [
        f"{w.category.__name__}: {w.message}" for w in caught if not issubclass(w.category, ResourceWarning)
    ]


def test_there_are_seventeen_cases_covering_every_dataset_and_template() -> None:
    assert len(CASES) == 17
    assert {c["dataset_name"] for c in CASES} == {"biography", "hotpot_qa", "musique", "niah"}
    assert {c["template"] for c in CASES} == {"default", "tokenizer_chat"}


def test_golden_keys_follow_the_spec_recipe() -> None:
    """The golden keys are the SHA-256 of the canonical JSON docs/datasets.md defines (checked with json+hashlib)."""
    for case in CASES:
        for sample in case["samples"]:
            text = json.dumps(sample["semantic"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            assert hashlib.sha256(text.encode("utf-8")).hexdigest() == sample["key"]
            assert semantic_key(sample["semantic"]) == sample["key"]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_golden_case(case: dict[str, Any], golden_tokenizer: Any) -> None:
    samples, caught = _run(case)
    assert caught == case["warnings"]
    assert len(samples) == len(case["samples"]) == case["num_samples"]
    for index, (got, expected) in enumerate(zip(samples, case["samples"], strict=True)):
        where = f"{case['id']} sample {index}"
        assert got.semantic == expected["semantic"], where
        assert semantic_key(got.semantic) == expected["key"], where
        assert got.query == expected["query"], where
        assert got.answer == expected["answer"], where
        if "prompt_parts" not in expected:
            assert case["dataset_name"] == "niah"
            continue
        tokenizer = golden_tokenizer if case["template"] == "tokenizer_chat" else None
        template_kwargs = TEMPLATE_KWARGS[case["template"]].model_validate(case["template_kwargs"])
        parts = TEMPLATES[case["template"]].render(got.parts, template_kwargs, tokenizer)
        assert [{"kind": p.kind, "text": p.text} for p in parts] == expected["prompt_parts"], where
        assert normalize(parts) == parts
        if "prompt_text" in expected:
            assert case["template"] == "default"
            assert prompt_text(parts) == expected["prompt_text"], where


def test_chat_cases_share_keys_queries_and_answers_with_default_runs() -> None:
    by_id = {c["id"]: c for c in CASES}
    for chat_id, base_id in [
        ("hotpot_qa-1-chat", "hotpot_qa-1"),
        ("hotpot_qa-1-chat-sys", "hotpot_qa-1"),
        ("biography-2-chat", "biography-2"),
        ("biography-2-chat-sys", "biography-2"),
    ]:
        chat, _ = _run(by_id[chat_id])
        base, _ = _run(by_id[base_id])
        assert [semantic_key(s.semantic) for s in chat] == [semantic_key(s.semantic) for s in base]
        assert [(s.query, s.answer) for s in chat] == [(s.query, s.answer) for s in base]


def test_golden_niah_documents_are_the_raw_context_and_prompt_blocks_are_chunks() -> None:
    for case in (c for c in CASES if c["dataset_name"] == "niah"):
        samples, _ = _run(case)
        for sample in samples:
            (context,) = sample.semantic["documents"]
            blocks = [p.text for p in sample.parts if p.kind == "context"]
            assert blocks, "a non-empty context gives at least one document block"
            assert " ".join(blocks).split() == context.split()
