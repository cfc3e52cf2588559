"""Typed prompts, chat templates and per-part tokenization.

A prompt is a tuple of parts: :class:`Inline` text (instructions, few-shot preambles, chat markup) and
:class:`ContextBlock` documents. Templates only ever change inline text; a document is never altered, and a
template that would alter one is an error. Tokenization encodes every part separately (no special tokens added)
and concatenates the ids, so document boundaries survive as token spans.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from gencache.config.kwargs import DefaultKwargs, LlamaChatKwargs, Qwen3ChatKwargs, TemplateKwargs, TokenizerChatKwargs
from gencache.core.canonical import json_digest, sha256_hex
from gencache.core.errors import PromptError


@dataclass(frozen=True, slots=True)
class Inline:
    """Inline prompt text that templates may wrap or extend."""

    text: str
    kind: ClassVar[Literal["inline"]] = "inline"


@dataclass(frozen=True, slots=True)
class ContextBlock:
    """One document; its text is reproduced verbatim by every template."""

    text: str
    kind: ClassVar[Literal["context"]] = "context"


Part = Inline | ContextBlock
Prompt = tuple[Part, ...]
#: The turns of a conversation before its final user turn, as ``(role, content)``.
History = tuple[tuple[str, str], ...]


def normalize(parts: Iterable[Part]) -> Prompt:
    """Drop empty inline parts, merge adjacent inline parts, keep every document; the result ends with inline text."""
    out: list[Part] = []
    for part in parts:
        if not isinstance(part, Inline | ContextBlock):
            raise PromptError(f"Prompt parts must be Inline or ContextBlock, got {type(part).__name__}.")
        if isinstance(part, Inline) and part.text and out and isinstance(out[-1], Inline):
            out[-1] = Inline(out[-1].text + part.text)
        elif isinstance(part, ContextBlock) or part.text:
            out.append(part)
    if not out or not isinstance(out[-1], Inline):
        raise PromptError("A prompt must end with a non-empty Inline part (the task text); give the sample a query.")
    return tuple(out)


def compose_default(preamble: str, documents: Sequence[str], task_prompt: str) -> Prompt:
    """``preamble``, the documents separated by single spaces, one space, then the task prompt (normalised)."""
    parts: list[Part] = [Inline(preamble)]
    for document in documents:
        parts += [ContextBlock(document), Inline(" ")]
    return normalize([*parts, Inline("" if documents else " "), Inline(task_prompt)])


def prompt_text(parts: Prompt) -> str:
    return "".join(part.text for part in parts)


# -- templates ---------------------------------------------------------------------------------------------------


def _system_of(history: History, system_prompt: str, template: str) -> tuple[str, History]:
    """The system message (the conversation's own system turn, or ``system_prompt``) and the other turns."""
    if history and history[0][0] == "system":
        if system_prompt:
            raise PromptError(
                f"{template}: the chat row has its own system turn and template_kwargs.system_prompt is set too; "
                "drop system_prompt or the row's system turn."
            )
        return history[0][1], history[1:]
    return system_prompt, history


def _wrap(parts: Prompt, prefix: str, suffix: str) -> Prompt:
    body = normalize(parts)
    return normalize((Inline(prefix), *body[:-1], Inline(body[-1].text + suffix)))


_LLAMA_SYSTEM = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
)
_LLAMA_ASSISTANT = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"


def _llama_chat(history: History, parts: Prompt, kwargs: Any, tokenizer: Any | None) -> Prompt:
    system, turns = _system_of(history, kwargs.system_prompt, "llama_chat")
    earlier = "".join(f"<|start_header_id|>{role}<|end_header_id|>\n\n{text}<|eot_id|>" for role, text in turns)
    user = "<|start_header_id|>user<|end_header_id|>\n\n"
    return _wrap(parts, _LLAMA_SYSTEM + system + "<|eot_id|>" + earlier + user, _LLAMA_ASSISTANT)


def _qwen_3_chat(history: History, parts: Prompt, kwargs: Any, tokenizer: Any | None) -> Prompt:
    system, turns = _system_of(history, kwargs.system_prompt, "qwen_3_chat")
    turns = ((("system", system),) if system else ()) + turns
    earlier = "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in turns)
    return _wrap(parts, earlier + "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")


SENTINEL = "<|gencache_part_boundary|>"


def _tokenizer_chat(history: History, parts: Prompt, kwargs: Any, tokenizer: Any | None) -> Prompt:
    """The tokenizer's own chat template, rendered once with boundary sentinels so part boundaries survive.

    The user message is every part's text with a numbered sentinel between consecutive parts. After rendering,
    each sentinel must occur exactly once and in order; the render is cut there, inline parts take their
    rendered segment (so chat markup lands in the first and last inline part) and every document segment must
    equal the document exactly.
    """
    system, turns = _system_of(history, kwargs.system_prompt, "tokenizer_chat")
    apply = getattr(tokenizer, "apply_chat_template", None)
    if not callable(apply):
        raise PromptError(
            "Template tokenizer_chat needs a tokenizer with a chat template; pass the teacher's or use another one."
        )
    body = list(normalize(parts))
    if isinstance(body[0], ContextBlock):
        body.insert(0, Inline(""))
    texts = [("system_prompt", kwargs.system_prompt), ("an earlier chat turn", system)]
    texts += [("an earlier chat turn", text) for _, text in turns]
    for where, text in texts + [(f"prompt.parts[{index}]", part.text) for index, part in enumerate(body)]:
        if SENTINEL in text:
            raise PromptError(f"tokenizer_chat sentinel collision: {where} contains {SENTINEL!r}; remove it.")
    user = "".join(
        part.text + (f"{SENTINEL}[{index}]" if index < len(body) - 1 else "") for index, part in enumerate(body)
    )
    messages = [{"role": "system", "content": system}] if system else []
    messages += [{"role": role, "content": text} for role, text in turns]
    messages.append({"role": "user", "content": user})
    rendered = apply(messages, tokenize=False, add_generation_prompt=True, enable_thinking=kwargs.enable_thinking)
    pieces = re.split(re.escape(SENTINEL) + r"\[(\d+)\]", rendered)  # segments and boundary numbers, alternating
    if [int(number) for number in pieces[1::2]] != list(range(len(body) - 1)):
        raise PromptError(
            "tokenizer_chat: the rendered part boundaries are missing, repeated or out of order; use another template."
        )
    out: list[Part] = []
    for index, (part, segment) in enumerate(zip(body, pieces[0::2], strict=True)):
        if isinstance(part, ContextBlock) and segment != part.text:
            raise PromptError(
                f"tokenizer_chat template modified ContextBlock content at prompt.parts[{index}]; use another template."
            )
        out.append(part if isinstance(part, ContextBlock) else Inline(segment))
    return normalize(out)


@dataclass(frozen=True)
class TemplateSpec:
    """A named prompt template (its name is its kwargs model's): ``chat`` renders a conversation, the earlier
    ``(role, content)`` turns then the prompt as the final user turn (None: plain text, no conversation)."""

    kwargs_model: type[TemplateKwargs]
    description: str
    chat: Callable[[History, Prompt, Any, Any], Prompt] | None = None
    needs_tokenizer: bool = False

    @property
    def name(self) -> str:
        return self.kwargs_model.template_name

    def render(self, parts: Prompt, kwargs: BaseModel, tokenizer: Any | None, history: History | None = None) -> Prompt:
        """The rendered, normalised prompt; only chat templates render a conversation's earlier turns."""
        if self.chat is not None:
            return self.chat(history or (), parts, kwargs, tokenizer)
        if history is not None:
            raise PromptError(
                f"template {self.name!r} cannot render a conversation (a chat row); use {', '.join(CHAT_TEMPLATES)}."
            )
        return normalize(parts)


#: Every template, by name, in the order of :data:`gencache.config.kwargs.TEMPLATE_KWARGS`.
TEMPLATES: dict[str, TemplateSpec] = {
    spec.name: spec
    for spec in (
        TemplateSpec(DefaultKwargs, "Plain text: the prompt as composed by the dataset."),
        TemplateSpec(TokenizerChatKwargs, _tokenizer_chat.__doc__ or "", _tokenizer_chat, needs_tokenizer=True),
        TemplateSpec(
            LlamaChatKwargs,
            "Hard-coded Llama-3.1 chat markup (the SemPIC research code's dated system header).",
            _llama_chat,
        ),
        TemplateSpec(Qwen3ChatKwargs, "Hard-coded Qwen3 ChatML markup (no think block).", _qwen_3_chat),
    )
}
#: The templates that render a conversation (a chat row).
CHAT_TEMPLATES: tuple[str, ...] = tuple(name for name, spec in TEMPLATES.items() if spec.chat is not None)


# -- tokenization ------------------------------------------------------------------------------------------------


#: The concatenated ids of every part, and the ``(kind, start, end)`` span of each part.
TokenizedPrompt = tuple[tuple[int, ...], tuple[tuple[str, int, int], ...]]


def tokenize_prompt(parts: Prompt, tokenizer: Any) -> TokenizedPrompt:
    """Tokenize each part on its own (no special tokens, one batched call) and concatenate the ids."""
    body = normalize(parts)
    encoded = tokenizer([part.text for part in body], add_special_tokens=False, padding=False)
    ids: list[int] = []
    spans: list[tuple[str, int, int]] = []
    for index, (part, part_ids) in enumerate(zip(body, encoded["input_ids"], strict=True)):
        start = len(ids)
        ids.extend(int(token) for token in part_ids)
        end = len(ids)
        if start == end and isinstance(part, ContextBlock):
            raise PromptError(
                f"ContextBlock spans must be non-empty: prompt.parts[{index}] is blank; drop it from the source."
            )
        if start == end and index == len(body) - 1:
            raise PromptError("The terminal Inline span must be non-empty: the task text tokenizes to no tokens.")
        spans.append((part.kind, start, end))
    return tuple(ids), tuple(spans)


def chat_template_digest(tokenizer: Any) -> str | None:
    """SHA-256 of the tokenizer's chat template (canonical JSON when it holds several named templates)."""
    template = getattr(tokenizer, "chat_template", None)
    if template is None:
        return None
    if isinstance(template, str):
        return sha256_hex(template.encode("utf-8"))
    return json_digest(template)
