"""The base of every ``data_kwargs`` and ``template_kwargs`` model, and each template's ``template_kwargs``. The
recipe and the template receive the validated instance, never a dict to validate again."""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict, StrictBool, StrictStr

from gencache.config.messages import ConfigObject


class KwargsModel(ConfigObject):
    """The options of one dataset or template (lax: a field that takes no other type is ``Strict*``)."""

    model_config = ConfigDict(strict=False)


class TemplateKwargs(KwargsModel):
    template_name: ClassVar[str]


class DefaultKwargs(TemplateKwargs):
    template_name = "default"


class TokenizerChatKwargs(TemplateKwargs):
    template_name = "tokenizer_chat"
    system_prompt: StrictStr = ""
    enable_thinking: StrictBool = False


class LlamaChatKwargs(TemplateKwargs):
    template_name = "llama_chat"
    system_prompt: StrictStr = ""


class Qwen3ChatKwargs(TemplateKwargs):
    template_name = "qwen_3_chat"
    system_prompt: StrictStr = ""


#: The one list of template names, with each one's model (:data:`gencache.data.prompts.TEMPLATES` follows it).
TEMPLATE_KWARGS: dict[str, type[TemplateKwargs]] = {
    kind.template_name: kind for kind in (DefaultKwargs, TokenizerChatKwargs, LlamaChatKwargs, Qwen3ChatKwargs)
}
