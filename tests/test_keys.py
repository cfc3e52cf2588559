"""The semantic key: pinned values, exact fields, invariances."""

from __future__ import annotations

import copy
import hashlib
import json
import unicodedata
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gencache.config.kwargs import TEMPLATE_KWARGS
from gencache.core.errors import DatasetError, GencacheError
from gencache.data.keys import SEMANTIC_FIELDS, semantic_key
from gencache.data.prompts import TEMPLATES, tokenize_prompt
from gencache.data.recipes import get_recipe
from support.dataset_helpers import GOLDEN, DataConfig

# Pinned: computed from the key's definition (docs/datasets.md) with json.dumps + hashlib, not with gencache.
# Changing one is a breaking change.
PINNED: list[tuple[dict[str, Any], str]] = [
    (
        {"documents": [], "query": "", "shots": [], "task": {}},
        "d7d641a3021148e9d6a9d8b6e34ad4f4c40e750a24e6b7653a6b8ed049f5b558",
    ),
    (
        {
            "documents": ["Paris is the capital of France."],
            "query": "What is the capital of France?",
            "shots": [],
            "task": {},
        },
        "95299d2ae9e9fd28169ccc9043bea74afade2517ae7ddf38715133e83cea3d0f",
    ),
    (
        {
            "documents": ["Doc one.", "Doc two."],
            "query": "Which doc?",
            "shots": [{"documents": ["Shot doc."], "query": "Shot q?", "answer": "a", "task": {}}],
            "task": {},
        },
        "61603a1256e4ee80e57264b157981ccaffa132593cfe2784c67a6d92917120d0",
    ),
    (
        {
            "documents": ["Amara Okafor was born in Lagos."],
            "query": "Where was Amara Okafor born?",
            "shots": [],
            "task": {"attribute": "birth_place"},
        },
        "eb667c415d89c52ff821959e13c1f1e4093d89b88f492ced313d850ab6aa6df9",
    ),
    (
        {
            "documents": ["北京 🙂 Ünïcödé café"],
            "query": 'naïve “quotes” \\ " \n\t',
            "shots": [],
            "task": {"n": 1, "f": 0.5, "b": True, "z": None},
        },
        "67f63f2897d3fd6578794f26e8ee116d8f51a4145fec87571d3f41d068d31857",
    ),
]


@pytest.mark.parametrize(("payload", "key"), PINNED)
def test_pinned_keys(payload: dict[str, Any], key: str) -> None:
    assert semantic_key(payload) == key


def test_fields_constant() -> None:
    assert SEMANTIC_FIELDS == ("documents", "query", "shots", "task")


@pytest.mark.parametrize("extra", ["token_ids", "tokenizer", "template", "think", "teacher", "generation", "answer"])
def test_rendering_and_generation_metadata_is_rejected(extra: str) -> None:
    payload = {**PINNED[1][0], extra: "x"}
    with pytest.raises(DatasetError, match="exactly these fields: documents, query, shots, task") as info:
        semantic_key(payload)
    assert extra in str(info.value)
    assert isinstance(info.value, GencacheError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("missing", SEMANTIC_FIELDS)
def test_missing_field_is_rejected(missing: str) -> None:
    payload = {k: v for k, v in PINNED[2][0].items() if k != missing}
    with pytest.raises(DatasetError, match="exactly these fields") as info:
        semantic_key(payload)
    assert missing not in str(info.value).partition("it has:")[2]


@pytest.mark.parametrize(
    ("field", "value"),
    [("documents", "one doc"), ("documents", [1]), ("query", None), ("shots", ["x"]), ("task", [])],
)
def test_field_types_are_checked(field: str, value: Any) -> None:
    with pytest.raises(DatasetError, match=field):
        semantic_key({**PINNED[1][0], field: value})


def test_dict_order_never_matters() -> None:
    payload = PINNED[2][0]
    reordered = {
        "task": {},
        "shots": [{"task": {}, "answer": "a", "query": "Shot q?", "documents": ["Shot doc."]}],
        "query": "Which doc?",
        "documents": ["Doc one.", "Doc two."],
    }
    assert semantic_key(reordered) == semantic_key(payload) == PINNED[2][1]
    nested = {**PINNED[4][0], "task": {"z": None, "b": True, "f": 0.5, "n": 1}}
    assert semantic_key(nested) == PINNED[4][1]


def test_list_order_matters() -> None:
    payload = PINNED[2][0]
    swapped_docs = {**payload, "documents": list(reversed(payload["documents"]))}
    assert semantic_key(swapped_docs) != semantic_key(payload)
    shot2 = {"documents": ["Other."], "query": "Other?", "answer": "b", "task": {}}
    two = {**payload, "shots": [payload["shots"][0], shot2]}
    two_swapped = {**payload, "shots": [shot2, payload["shots"][0]]}
    assert semantic_key(two) != semantic_key(two_swapped)


def test_every_field_changes_the_key() -> None:
    base = PINNED[3][0]
    keys = {
        semantic_key(base),
        semantic_key({**base, "query": base["query"] + " "}),
        semantic_key({**base, "documents": [*base["documents"], ""]}),
        semantic_key({**base, "task": {"attribute": "company"}}),
        semantic_key({**base, "shots": [{"documents": [], "query": "", "answer": "", "task": {}}]}),
    }
    assert len(keys) == 5


def test_no_unicode_normalisation() -> None:
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    a = semantic_key({**PINNED[1][0], "query": nfc})
    b = semantic_key({**PINNED[1][0], "query": nfd})
    assert a != b


def test_lone_surrogate_and_nan_are_dataset_errors() -> None:
    with pytest.raises(DatasetError, match="surrogate"):
        semantic_key({**PINNED[1][0], "query": "bad \ud800"})
    with pytest.raises(DatasetError, match="canonical JSON"):
        semantic_key({**PINNED[1][0], "task": {"x": float("nan")}})


def test_key_is_lowercase_hex_and_payload_is_not_mutated() -> None:
    payload = copy.deepcopy(PINNED[4][0])
    key = semantic_key(payload)
    assert len(key) == 64 and key == key.lower() and int(key, 16) >= 0
    assert payload == PINNED[4][0]


_text = st.text(max_size=12)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), _text)
_shots = st.lists(
    st.fixed_dictionaries(
        {
            "documents": st.lists(_text, max_size=3),
            "query": _text,
            "answer": _text,
            "task": st.dictionaries(_text, _scalars, max_size=2),
        }
    ),
    max_size=2,
)
_payloads = st.fixed_dictionaries(
    {
        "documents": st.lists(_text, max_size=4),
        "query": _text,
        "shots": _shots,
        "task": st.dictionaries(_text, _scalars, max_size=3),
    }
)


@settings(deadline=None, max_examples=150)
@given(payload=_payloads, data=st.data())
def test_key_equals_spec_recipe_and_ignores_dict_order(payload: dict[str, Any], data: st.DataObject) -> None:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    expected = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert semantic_key(payload) == expected
    order = data.draw(st.permutations(list(payload)))
    shuffled = {name: payload[name] for name in order}
    shuffled["task"] = dict(reversed(list(payload["task"].items())))
    assert semantic_key(shuffled) == expected


# -- keys through the recipes: rendering, flags and tokenizer never change them ----------------------------------


def _load(name: str, fixture: str, subset: str, split: str, seed: int, n: int, kwargs: dict[str, Any]) -> list[Any]:
    recipe = get_recipe(name)
    dc = DataConfig(name, n, 0, 0, subset, split, seed, str(GOLDEN / fixture))
    samples, _ = recipe.load(dc, recipe.kwargs_model.model_validate(kwargs), None)
    return samples


@pytest.mark.parametrize(
    ("name", "fixture", "subset", "split"),
    [
        ("hotpot_qa", "fixtures/hotpot_qa.jsonl", "fullwiki", "validation"),
        ("musique", "fixtures/musique.jsonl", "default", "validation"),
    ],
)
def test_instruction_and_cot_flags_do_not_change_keys(name: str, fixture: str, subset: str, split: str) -> None:
    runs = [
        _load(name, fixture, subset, split, 5, 4, {"add_inst": inst, "add_cot": cot})
        for inst in (True, False)
        for cot in (True, False)
    ]
    keys = [[semantic_key(s.semantic) for s in run] for run in runs]
    assert all(k == keys[0] for k in keys)
    prompts = {tuple(p.text for p in run[0].parts) for run in runs}
    assert len(prompts) == 4


def test_niah_chunk_size_does_not_change_keys() -> None:
    small = _load("niah", "fixtures/niah.jsonl", "4096", "train", 1, 5, {"chunk_size": 64})
    large = _load("niah", "fixtures/niah.jsonl", "4096", "train", 1, 5, {"chunk_size": 100000})
    assert [semantic_key(s.semantic) for s in small] == [semantic_key(s.semantic) for s in large]
    assert [len(s.parts) for s in small] != [len(s.parts) for s in large]


def test_templates_think_markup_and_tokenizer_do_not_change_keys() -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(GOLDEN / "tokenizer"))
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% if not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
    )
    samples = _load("hotpot_qa", "fixtures/hotpot_qa.jsonl", "fullwiki", "validation", 0, 3, {})
    before = [semantic_key(s.semantic) for s in samples]
    renders = set()
    for template, kwargs in [
        ("default", {}),
        ("llama_chat", {"system_prompt": "x"}),
        ("qwen_3_chat", {}),
        ("tokenizer_chat", {"enable_thinking": False}),
        ("tokenizer_chat", {"enable_thinking": True, "system_prompt": "Think."}),
    ]:
        for sample in samples:
            validated = TEMPLATE_KWARGS[template].model_validate(kwargs)
            parts = TEMPLATES[template].render(sample.parts, validated, tokenizer)
            tokenize_prompt(parts, tokenizer)
            renders.add(parts)
    assert len(renders) == 5 * len(samples)
    assert [semantic_key(s.semantic) for s in samples] == before
