"""The ``template_kwargs`` of every prompt template: strict pydantic models, one per template (no I/O).

A data config validates its ``template_kwargs`` with the model of its ``template`` (:data:`TEMPLATE_KWARGS`) and
keeps the validated instance; the template receives it as it is.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import StrictBool, StrictStr

from gencache.config.kwargs import KwargsModel


class TemplateKwargs(KwargsModel):
    """Base of the template kwargs models: strict and frozen."""

    template_name: ClassVar[str]


class DefaultKwargs(TemplateKwargs):
    """The ``default`` template takes no kwargs."""

    template_name = "default"


class TokenizerChatKwargs(TemplateKwargs):
    """Kwargs of ``tokenizer_chat``."""

    template_name = "tokenizer_chat"
    system_prompt: StrictStr = ""
    enable_thinking: StrictBool = False


class LlamaChatKwargs(TemplateKwargs):
    """Kwargs of ``llama_chat``."""

    template_name = "llama_chat"
    system_prompt: StrictStr = ""


class Qwen3ChatKwargs(TemplateKwargs):
    """Kwargs of ``qwen_3_chat``."""

    template_name = "qwen_3_chat"
    system_prompt: StrictStr = ""


#: The ``template_kwargs`` model of every template, by name: the one list of template names, which
#: :data:`gencache.data.prompts.TEMPLATES` follows (each name's spec is the ``TemplateSpec`` taking its model).
TEMPLATE_KWARGS: dict[str, type[TemplateKwargs]] = {
    kind.template_name: kind for kind in (DefaultKwargs, TokenizerChatKwargs, LlamaChatKwargs, Qwen3ChatKwargs)
}
