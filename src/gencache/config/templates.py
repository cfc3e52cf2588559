"""The ``template_kwargs`` of every prompt template: strict pydantic models, one per template (no I/O).

A data config validates its ``template_kwargs`` with the model of its ``template`` (:data:`TEMPLATE_KWARGS`) and
keeps the validated instance; the template receives it as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import StrictBool, StrictStr, model_validator

from gencache.config.kwargs import KwargsModel

__all__ = [
    "TEMPLATE_KWARGS",
    "DefaultKwargs",
    "LlamaChatKwargs",
    "Qwen3ChatKwargs",
    "TemplateKwargs",
    "TokenizerChatKwargs",
]


class TemplateKwargs(KwargsModel):
    """Base of the template kwargs models: strict, frozen, and the old ``think`` kwarg explained."""

    template_name: ClassVar[str]

    @model_validator(mode="before")
    @classmethod
    def _no_think(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "think" in data:
            if cls.template_name == "tokenizer_chat":
                raise ValueError("the 'think' kwarg was renamed: use enable_thinking (true or false)")
            raise ValueError(
                f"{cls.template_name} has no thinking switch: use template tokenizer_chat with enable_thinking "
                "instead of think"
            )
        return data


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
