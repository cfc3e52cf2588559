"""Typed prompts, templates and per-part tokenization."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest

from gencache.config import parse_data_configs
from gencache.core.errors import ConfigError, PromptError
from gencache.data.prompts import (
    TEMPLATES,
    ContextBlock,
    Inline,
    Prompt,
    chat_template_digest,
    compose_default,
    normalize,
    prompt_text,
    tokenize_prompt,
)

QWEN3_LIKE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
LLAMA_LIKE_TRIM = (
    "<|begin_of_text|>{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def render(template: str, parts: Prompt, kwargs: dict[str, Any], tokenizer: Any | None = None) -> Prompt:
    """The template's render with ``kwargs`` validated the way a data config validates its ``template_kwargs``."""
    config = {"dataset_name": "musique", "num_samples": 1, "num_data_strs": 0, "num_shots": 0, "subset": "default"}
    validated = parse_data_configs([{**config, "template": template, "template_kwargs": kwargs}])[0]
    return TEMPLATES[template].render(parts, validated.template_kwargs, tokenizer)


@pytest.fixture()
def qwen_like(tokenizer: Any) -> Any:
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = QWEN3_LIKE
    return tok


class CharTokenizer:
    """One id per character; records the keyword arguments of every call."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, texts: list[str], **kwargs: Any) -> dict[str, list[list[int]]]:
        self.calls.append({"texts": list(texts), **kwargs})
        return {"input_ids": [[ord(c) for c in text] for text in texts]}


class FakeChat:
    """A tokenizer-like object whose chat template is a Python function (to produce faulty renders)."""

    def __init__(self, render: Any) -> None:
        self.render = render
        self.calls: list[tuple[list[dict[str, str]], dict[str, Any]]] = []

    def apply_chat_template(self, messages: list[dict[str, str]], **kwargs: Any) -> Any:
        self.calls.append((messages, kwargs))
        return self.render(messages)


def _chatml(messages: list[dict[str, str]]) -> str:
    body = "".join(f"<chat:{m['role']}>{m['content']}</chat>" for m in messages)
    return body + "<chat:assistant>"


# -- typed parts, normalisation, composition -----------------------------------------------------------------


def test_parts_are_frozen_values_with_kinds() -> None:
    assert Inline("a").kind == "inline" and ContextBlock("a").kind == "context"
    assert Inline("a") == Inline("a") and Inline("a") != ContextBlock("a")
    with pytest.raises(AttributeError):
        Inline("a").text = "b"  # type: ignore[misc]


def test_normalize_drops_empty_inline_merges_inline_keeps_context_boundaries() -> None:
    parts = [
        Inline(""),
        Inline("a"),
        Inline("b"),
        ContextBlock("d1"),
        ContextBlock("d2"),
        ContextBlock(""),
        Inline("x"),
    ]
    assert normalize(parts) == (Inline("ab"), ContextBlock("d1"), ContextBlock("d2"), ContextBlock(""), Inline("x"))
    assert normalize(normalize(parts)) == normalize(parts)


@pytest.mark.parametrize(
    "parts", [[], [Inline("")], [ContextBlock("d")], [Inline("a"), ContextBlock("d")], [ContextBlock("d"), Inline("")]]
)
def test_normalize_requires_terminal_non_empty_inline(parts: list[Any]) -> None:
    with pytest.raises(PromptError, match="must end with a non-empty Inline"):
        normalize(parts)


def test_normalize_rejects_foreign_parts() -> None:
    with pytest.raises(PromptError, match="Inline or ContextBlock"):
        normalize([Inline("a "), "text", Inline("b")])  # type: ignore[list-item]


def test_default_composition_uses_typed_parts_and_explicit_separators() -> None:
    assert compose_default("preamble", ["doc0", "doc1"], "task") == (
        Inline("preamble"),
        ContextBlock("doc0"),
        Inline(" "),
        ContextBlock("doc1"),
        Inline(" task"),
    )
    assert compose_default("", ["d"], "t") == (ContextBlock("d"), Inline(" t"))
    assert compose_default("", [], "t") == (Inline(" t"),)
    assert compose_default("p\n", [], "t") == (Inline("p\n t"),)
    assert prompt_text(compose_default("P", ["a", "b"], "q")) == "Pa b q"


def test_default_composition_keeps_identical_and_empty_documents() -> None:
    parts = compose_default("", ["same", "same", ""], "q")
    assert [p.text for p in parts if isinstance(p, ContextBlock)] == ["same", "same", ""]


# -- tokenization --------------------------------------------------------------------------------------------


def test_default_composition_compiles_to_canonical_spans() -> None:
    fake = CharTokenizer()
    input_ids, spans = tokenize_prompt(compose_default("", ["ab", "cde"], "xy"), fake)
    assert spans == (("context", 0, 2), ("inline", 2, 3), ("context", 3, 6), ("inline", 6, 9))
    assert input_ids == tuple(ord(c) for c in "ab cde xy")
    assert len(fake.calls) == 1
    assert fake.calls[0]["add_special_tokens"] is False and fake.calls[0]["padding"] is False
    assert fake.calls[0]["texts"] == ["ab", " ", "cde", " xy"]


def test_tokenize_with_real_tokenizer_is_per_part_concatenation(tokenizer: Any) -> None:
    parts = (
        Inline("<|im_start|>user\n"),
        ContextBlock(" Paris is big."),
        Inline(" "),
        ContextBlock("北京 🙂"),
        Inline(" Q?"),
    )
    input_ids, spans = tokenize_prompt(parts, tokenizer)
    expected: list[int] = []
    for part in parts:
        expected.extend(tokenizer(part.text, add_special_tokens=False)["input_ids"])
    assert input_ids == tuple(expected)
    assert input_ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    starts = [s for _, s, _ in spans]
    ends = [e for _, _, e in spans]
    assert starts[0] == 0 and ends[-1] == len(input_ids) and starts[1:] == ends[:-1]
    assert [k for k, _, _ in spans] == ["inline", "context", "inline", "context", "inline"]
    for (kind, start, end), part in zip(spans, parts, strict=True):
        assert tokenizer.decode(list(input_ids[start:end])) == part.text
        assert kind == part.kind


def test_empty_document_span_is_an_error() -> None:
    with pytest.raises(PromptError, match=r"ContextBlock spans must be non-empty: prompt.parts\[0\]"):
        tokenize_prompt((ContextBlock(""), Inline("q")), CharTokenizer())


def test_terminal_inline_span_must_be_non_empty() -> None:
    class Dropper(CharTokenizer):
        def __call__(self, texts: list[str], **kwargs: Any) -> dict[str, list[list[int]]]:
            return {"input_ids": [[] if t == "q" else [1] for t in texts]}

    with pytest.raises(PromptError, match="terminal Inline span must be non-empty"):
        tokenize_prompt((ContextBlock("d"), Inline("q")), Dropper())


# -- registry and kwargs -------------------------------------------------------------------------------------


def test_template_registry() -> None:
    assert set(TEMPLATES) == {"default", "tokenizer_chat", "llama_chat", "qwen_3_chat"}
    for name, spec in TEMPLATES.items():
        assert spec.name == name
        assert spec.kwargs_model.model_config.get("extra") == "forbid"
    assert TEMPLATES["tokenizer_chat"].needs_tokenizer
    assert not any(TEMPLATES[n].needs_tokenizer for n in ("default", "llama_chat", "qwen_3_chat"))


def test_template_kwarg_defaults() -> None:
    assert TEMPLATES["tokenizer_chat"].kwargs_model().model_dump() == {"system_prompt": "", "enable_thinking": False}
    assert TEMPLATES["llama_chat"].kwargs_model().model_dump() == {"system_prompt": ""}
    assert TEMPLATES["qwen_3_chat"].kwargs_model().model_dump() == {"system_prompt": ""}
    assert TEMPLATES["default"].kwargs_model().model_dump() == {}


@pytest.mark.parametrize(
    ("template", "kwargs", "fragment"),
    [
        ("default", {"system_prompt": "x"}, "template_kwargs.system_prompt"),
        ("llama_chat", {"enable_thinking": True}, "template_kwargs.enable_thinking"),
        ("qwen_3_chat", {"sistem_prompt": "x"}, "template_kwargs.sistem_prompt"),
        ("tokenizer_chat", {"enable_thinking": 1}, "template_kwargs.enable_thinking"),
        ("tokenizer_chat", {"enable_thinking": "false"}, "template_kwargs.enable_thinking"),
        ("tokenizer_chat", {"system_prompt": 3}, "template_kwargs.system_prompt"),
        ("tokenizer_chat", {"a": 1, "b": 2}, "template_kwargs.a"),
    ],
)
def test_bad_template_kwargs_name_the_kwarg(template: str, kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"data_configs[0].{fragment}")):
        render(template, (Inline("q"),), kwargs, CharTokenizer())


# -- default, llama_chat, qwen_3_chat ------------------------------------------------------------------------


def test_default_returns_the_prompt_unchanged() -> None:
    parts = compose_default("p", ["d"], "q")
    assert render("default", parts, {}) == parts


def test_llama_chat_exact_strings() -> None:
    parts = compose_default("", ["doc"], "task")
    out = render("llama_chat", parts, {"system_prompt": "Be brief."})
    assert out == (
        Inline(
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
            "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        ),
        ContextBlock("doc"),
        Inline(" task<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    )
    plain = render("llama_chat", parts, {})
    assert plain[0].text.endswith("Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n")


def test_qwen_3_chat_exact_strings() -> None:
    parts = compose_default("pre ", ["doc"], "task")
    assert render("qwen_3_chat", parts, {}) == (
        Inline("<|im_start|>user\npre "),
        ContextBlock("doc"),
        Inline(" task<|im_end|>\n<|im_start|>assistant\n"),
    )
    with_system = render("qwen_3_chat", parts, {"system_prompt": "S"})
    assert with_system[0] == Inline("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\npre ")


@pytest.mark.parametrize("template", ["default", "llama_chat", "qwen_3_chat", "tokenizer_chat"])
def test_templates_preserve_documents(template: str, tokenizer: Any) -> None:
    docs = [" lead space", "trail space ", "multi\nline", "北京 🙂"]
    parts = compose_default("Shots:\n", docs, "Q?\n")
    out = render(template, parts, {}, tokenizer)
    assert [p.text for p in out if isinstance(p, ContextBlock)] == docs
    assert isinstance(out[-1], Inline) and out == normalize(out)


# -- tokenizer_chat ------------------------------------------------------------------------------------------


def test_tokenizer_chat_preserves_context_and_defaults_enable_thinking() -> None:
    fake = FakeChat(_chatml)
    out = render("tokenizer_chat", compose_default("pre", ["d0", "d1"], "task"), {}, fake)
    assert out == (
        Inline("<chat:user>pre"),
        ContextBlock("d0"),
        Inline(" "),
        ContextBlock("d1"),
        Inline(" task</chat><chat:assistant>"),
    )
    assert len(fake.calls) == 1
    messages, kwargs = fake.calls[0]
    assert kwargs == {"tokenize": False, "add_generation_prompt": True, "enable_thinking": False}
    assert [m["role"] for m in messages] == ["user"]


def test_tokenizer_chat_passes_enable_thinking_true_and_system_prompt_first() -> None:
    fake = FakeChat(_chatml)
    out = render(
        "tokenizer_chat", compose_default("", ["d"], "t"), {"enable_thinking": True, "system_prompt": "S"}, fake
    )
    messages, kwargs = fake.calls[0]
    assert kwargs["enable_thinking"] is True
    assert messages[0] == {"role": "system", "content": "S"} and messages[1]["role"] == "user"
    assert out[0] == Inline("<chat:system>S</chat><chat:user>")


def test_tokenizer_chat_with_real_qwen3_like_template_puts_think_block_in_terminal_inline(qwen_like: Any) -> None:
    parts = compose_default("", ["doc one", "doc two"], "Q?")
    off = render("tokenizer_chat", parts, {}, qwen_like)
    on = render("tokenizer_chat", parts, {"enable_thinking": True}, qwen_like)
    assert off[-1] == Inline(" Q?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on[-1] == Inline(" Q?<|im_end|>\n<|im_start|>assistant\n")
    assert off[0] == on[0] == Inline("<|im_start|>user\n")
    assert off[1:-1] == on[1:-1] == parts[:-1]
    assert prompt_text(off) == qwen_like.apply_chat_template(
        [{"role": "user", "content": prompt_text(parts)}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=False,
    )


def test_tokenizer_chat_accepts_trailing_terminal_whitespace_trim(tokenizer: Any) -> None:
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = LLAMA_LIKE_TRIM
    parts = compose_default("Read:\n", ["doc"], "Q?\n")
    out = render("tokenizer_chat", parts, {}, tok)
    assert out == (
        Inline("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nRead:\n"),
        ContextBlock("doc"),
        Inline(" Q?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    )


def test_tokenizer_chat_keeps_wrapper_owned_by_inline_with_empty_preamble() -> None:
    out = render("tokenizer_chat", compose_default("", ["doc"], "task"), {}, FakeChat(_chatml))
    assert out == (Inline("<chat:user>"), ContextBlock("doc"), Inline(" task</chat><chat:assistant>"))


def test_tokenizer_chat_preserves_interleaved_inline_parts() -> None:
    parts = (
        Inline("A"),
        ContextBlock("d0"),
        Inline(" [between] "),
        ContextBlock("d1"),
        ContextBlock("d2"),
        Inline("Z"),
    )
    out = render("tokenizer_chat", parts, {}, FakeChat(_chatml))
    assert out == (
        Inline("<chat:user>A"),
        ContextBlock("d0"),
        Inline(" [between] "),
        ContextBlock("d1"),
        ContextBlock("d2"),
        Inline("Z</chat><chat:assistant>"),
    )


def _sentinels(text: str) -> list[str]:
    return re.findall(r"<\|gencache_part_boundary\|>\[\d+\]", text)


def test_tokenizer_chat_rejects_modified_context_content() -> None:
    fake = FakeChat(lambda m: _chatml(m).replace("doc", "DOC"))
    with pytest.raises(PromptError, match=r"modified ContextBlock content at prompt.parts\[1\]"):
        render("tokenizer_chat", compose_default("", ["doc"], "task"), {}, fake)


def test_tokenizer_chat_requires_apply_chat_template() -> None:
    with pytest.raises(PromptError, match="needs a tokenizer with a chat template"):
        render("tokenizer_chat", (Inline("q"),), {}, CharTokenizer())
    with pytest.raises(PromptError, match="needs a tokenizer with a chat template"):
        render("tokenizer_chat", (Inline("q"),), {}, None)


def test_tokenizer_chat_rejects_sentinel_collision() -> None:
    sentinel = "<|gencache_part_boundary|>"
    with pytest.raises(PromptError, match=r"sentinel collision: prompt.parts\[1\]"):
        render("tokenizer_chat", compose_default("", [f"x{sentinel}"], "q"), {}, FakeChat(_chatml))
    with pytest.raises(PromptError, match="sentinel collision: system_prompt"):
        render("tokenizer_chat", (Inline("q"),), {"system_prompt": sentinel}, FakeChat(_chatml))


def test_tokenizer_chat_rejects_missing_sentinel_after_render() -> None:
    def drop(messages: list[dict[str, str]]) -> str:
        text = _chatml(messages)
        first = _sentinels(text)[0]
        return text.replace(first, "")

    with pytest.raises(PromptError, match="boundaries are missing, repeated or out of order"):
        render("tokenizer_chat", compose_default("p", ["d"], "q"), {}, FakeChat(drop))


def test_tokenizer_chat_rejects_repeated_sentinel_after_render() -> None:
    with pytest.raises(PromptError, match="boundaries are missing, repeated or out of order"):
        render("tokenizer_chat", compose_default("p", ["d"], "q"), {}, FakeChat(lambda m: _chatml(m) * 2))


def test_tokenizer_chat_rejects_out_of_order_segments_after_render() -> None:
    def swap(messages: list[dict[str, str]]) -> str:
        content = messages[-1]["content"]
        pieces = re.split(r"(<\|gencache_part_boundary\|>\[\d+\])", content)
        # pieces: text0, s0, text1, s1, text2 -> put the second boundary first
        reordered = pieces[0] + pieces[3] + pieces[2] + pieces[1] + pieces[4]
        return _chatml([{"role": "user", "content": reordered}])

    with pytest.raises(PromptError, match="boundaries are missing, repeated or out of order"):
        render("tokenizer_chat", compose_default("p", ["d"], "q"), {}, FakeChat(swap))


def test_chat_template_digest(tokenizer: Any) -> None:
    assert chat_template_digest(tokenizer) == hashlib.sha256(tokenizer.chat_template.encode("utf-8")).hexdigest()
    assert chat_template_digest(CharTokenizer()) is None
    a = FakeChat(_chatml)
    a.chat_template = {"default": "x", "tool_use": "y"}  # type: ignore[attr-defined]
    b = FakeChat(_chatml)
    b.chat_template = {"tool_use": "y", "default": "x"}  # type: ignore[attr-defined]
    assert chat_template_digest(a) == chat_template_digest(b) is not None
