"""Chat rows (``messages: [{role, content}, ...]``): their key is the conversation without its final assistant
turn, in order; chat templates render the whole conversation, and templates that cannot are refused in one line."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from gencache.core.errors import DatasetError, PromptError
from gencache.data.prompts import ContextBlock, Inline
from gencache.data.samples import build_samples


def turn(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


CONVERSATIONS = [
    [
        turn("system", "Be brief."),
        turn("user", "Hi"),
        turn("assistant", "Hello"),
        turn("user", "2+2?"),
        turn("assistant", "4"),
    ],
    [turn("user", "Name a colour.")],
    [turn("user", "Capital of Norway?"), turn("assistant", "Oslo")],
    [turn("user", "A"), turn("assistant", "B"), turn("user", "C")],
]
DOCS = [["Doc zero."], ["Doc one a.", "Doc one b."], [], ["Doc three."]]


def key(payload: dict[str, Any]) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def expected_payload(messages: list[dict[str, str]], documents: list[str]) -> dict[str, Any]:
    turns = messages[:-1] if messages[-1]["role"] == "assistant" else messages
    return {"documents": documents, "query": turns[-1]["content"], "shots": [], "task": {"history": turns[:-1]}}


@pytest.fixture()
def chats(tmp_path: Path) -> Path:
    path = tmp_path / "chats.jsonl"
    pairs = enumerate(zip(CONVERSATIONS, DOCS, strict=True))
    rows = [{"id": i, "messages": m, "docs": d, "lang": "en"} for i, (m, d) in pairs]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def data_config(source: Path, template: str = "qwen_3_chat", **fields: Any) -> dict[str, Any]:
    config = {
        "dataset_name": "chat",
        "num_samples": 4,
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "default",
        "seed": 5,
        "source": str(source),
        "template": template,
        "data_kwargs": {"shuffle": False},
    }
    config.update(fields)
    return config


def test_keys_are_the_conversation_without_its_final_assistant_turn(chats: Path) -> None:
    samples = build_samples([data_config(chats)])
    assert [s.key for s in samples] == [key(expected_payload(m, [])) for m in CONVERSATIONS]
    assert [s.answer for s in samples] == ["4", "", "Oslo", ""]
    assert samples[0].semantic["task"]["history"] == CONVERSATIONS[0][:3]
    with_docs = build_samples(
        [data_config(chats, data_kwargs={"shuffle": False, "documents": "docs", "task": ["lang"]})]
    )
    expected = [
        key({**expected_payload(m, d), "task": {**expected_payload(m, d)["task"], "lang": "en"}})
        for m, d in zip(CONVERSATIONS, DOCS, strict=True)
    ]
    assert [s.key for s in with_docs] == expected


def test_selection_is_seeded_and_keys_do_not_depend_on_the_template(chats: Path, tokenizer: Any) -> None:
    shuffled = build_samples([data_config(chats, data_kwargs={})])
    order = list(range(4))
    random.Random(5).shuffle(order)
    assert [s.key for s in shuffled] == [key(expected_payload(CONVERSATIONS[i], [])) for i in order]
    keys = {
        template: build_samples([data_config(chats, template)], tokenizer).keys()
        for template in ("qwen_3_chat", "llama_chat", "tokenizer_chat")
    }
    assert len({tuple(k) for k in keys.values()}) == 1


def test_qwen_and_llama_markup_render_every_turn(chats: Path) -> None:
    config = data_config(chats, data_kwargs={"shuffle": False, "documents": "docs"})
    qwen = build_samples([config])[0]
    assert qwen.prompt_text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello"
        "<|im_end|>\n<|im_start|>user\nDoc zero. 2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert ContextBlock("Doc zero.") in qwen.parts
    llama = build_samples([{**config, "template": "llama_chat"}])[0]
    assert llama.prompt_text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>user<|end_header_id|>"
        "\n\nDoc zero. 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    only = {"shuffle": False, "documents": "docs", "filters": {"id": 1}}
    with_system = {"template_kwargs": {"system_prompt": "S."}, "num_samples": 1, "data_kwargs": only}
    (single,) = build_samples([{**config, **with_system}])
    assert single.prompt_text == (
        "<|im_start|>system\nS.<|im_end|>\n<|im_start|>user\nDoc one a. Doc one b. Name a colour.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_tokenizer_chat_renders_the_messages_and_keeps_documents_intact(chats: Path, tokenizer: Any) -> None:
    config = data_config(chats, "tokenizer_chat", data_kwargs={"shuffle": False, "documents": "docs"})
    sample = build_samples([config], tokenizer)[0]
    messages = [*CONVERSATIONS[0][:3], turn("user", "Doc zero. 2+2?")]
    rendered = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert sample.prompt_text == rendered
    assert [p for p in sample.parts if isinstance(p, ContextBlock)] == [ContextBlock("Doc zero.")]
    assert isinstance(sample.parts[-1], Inline) and sample.input_ids is not None


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (
            {"template": "default"},
            PromptError,
            "template 'default' cannot render a conversation (a chat row); use tokenizer_chat, llama_chat, qwen_3_chat",
        ),
        (
            {"template_kwargs": {"system_prompt": "Other."}},
            PromptError,
            "qwen_3_chat: the chat row has its own system turn and template_kwargs.system_prompt is set too",
        ),
        ({"num_shots": 1}, DatasetError, "chat has no few-shot examples"),
        ({"num_samples": 5}, DatasetError, "chat split 'train' holds 4 usable samples (4 rows)"),
    ],
)
def test_what_cannot_apply_is_refused_in_one_line(
    chats: Path, change: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        build_samples([{**data_config(chats), **change}])
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([turn("user", "A"), turn("assistant", "B"), turn("assistant", "C")], "must end with a user turn"),
        ([turn("assistant", "Hi")], "must end with a user turn"),
        ([turn("user", "A"), turn("system", "S")], "messages[1] is a system turn; only the first turn may be one"),
        ([turn("tool", "x"), turn("user", "A")], "messages[0].role is 'tool'; chat rows take system, user, assistant"),
        ([{"role": "user"}], "'messages[0].content' is missing or null (messages[0] has: role)"),
        ([turn("user", "")], "the final user turn is empty"),
    ],
)
def test_malformed_conversations_name_the_file_and_line(
    tmp_path: Path, messages: list[dict[str, str]], message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    good = {"messages": [turn("user", "fine"), turn("assistant", "ok")]}
    path.write_text(json.dumps(good) + "\n" + json.dumps({"messages": messages}) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        build_samples([data_config(path, num_samples=2)])
    assert f"chat: {path} line 2: " in str(info.value) and message in str(info.value)


def test_a_missing_messages_column_names_the_columns_there(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"conversation": [turn("user", "x")]}) + "\n", encoding="utf-8")
    with pytest.raises(
        DatasetError, match=r"chat: column 'messages' is missing from .*rows\.jsonl \(its columns: conv"
    ):
        build_samples([data_config(path, num_samples=1)])
    got = build_samples([data_config(path, num_samples=1, data_kwargs={"messages": "conversation"})])
    assert got[0].semantic["query"] == "x"


SHAREGPT_FROM = {"user": "human", "assistant": "gpt", "system": "system"}


def sharegpt(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{"from": SHAREGPT_FROM[m["role"]], "value": m["content"]} for m in messages]


def test_sharegpt_conversations_give_the_keys_of_the_same_messages(chats: Path, tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.jsonl"
    pairs = enumerate(zip(CONVERSATIONS, DOCS, strict=True))
    rows = [{"id": f"q{i}", "conversations": sharegpt(m), "docs": d} for i, (m, d) in pairs]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    kwargs = {"shuffle": False, "documents": "docs"}
    openai = build_samples([data_config(chats, data_kwargs=kwargs)])
    shared = build_samples([data_config(path, data_kwargs=kwargs)])  # the default messages column is absent
    assert shared.keys() == openai.keys() and [s.answer for s in shared] == [s.answer for s in openai]
    assert [s.prompt_text for s in shared] == [s.prompt_text for s in openai]
    named = build_samples([data_config(path, data_kwargs={**kwargs, "messages": "conversations", "id": "id"})])
    assert named.keys() == openai.keys() and [s.row_id for s in named] == ["q0", "q1", "q2", "q3"]
    assert [s.source_id for s in openai] == [0, 1, 2, 3] and [s.reference for s in openai] == ["4", None, "Oslo", None]


@pytest.mark.parametrize(
    ("turns", "message"),
    [
        ([{"from": "bot", "value": "x"}], "conversations[0].from is 'bot'; ShareGPT rows take human, gpt, system"),
        ([{"from": "human"}], "'conversations[0].value' is missing or null (conversations[0] has: from)"),
        ([{"from": "human", "value": "A"}, {"value": "B"}], "'conversations[1].from' is missing or null"),
        ([{"from": "human", "value": "A"}, {"from": "system", "value": "S"}], "conversations[1] is a system turn"),
    ],
)
def test_malformed_sharegpt_rows_name_the_file_and_line(tmp_path: Path, turns: list[Any], message: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = {"conversations": [{"from": "human", "value": "fine"}]}
    path.write_text(json.dumps(good) + "\n" + json.dumps({"conversations": turns}) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        build_samples([data_config(path, num_samples=2)])
    assert f"chat: {path} line 2: " in str(info.value) and message in str(info.value)


def test_an_id_column_must_hold_strings_or_integers(chats: Path, tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="column 'ident' is missing"):
        build_samples([data_config(chats, data_kwargs={"id": "ident"})])
    path = tmp_path / "ids.jsonl"
    path.write_text(json.dumps({"id": True, "messages": [turn("user", "x")]}) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"'id' must be a string or integer \(got true\)"):
        build_samples([data_config(path, num_samples=1, data_kwargs={"id": "id"})])
