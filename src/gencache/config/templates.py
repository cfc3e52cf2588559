"""The ``template_kwargs`` of every prompt template: strict pydantic models, one per template (no I/O)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import StrictBool, StrictStr

from gencache.config.kwargs import KwargsModel


class TemplateKwargs(KwargsModel):
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


#: The one list of template names, with each one's model (:data:`gencache.data.prompts.TEMPLATES` follows it).
TEMPLATE_KWARGS: dict[str, type[TemplateKwargs]] = {
    kind.template_name: kind for kind in (DefaultKwargs, TokenizerChatKwargs, LlamaChatKwargs, Qwen3ChatKwargs)
}
