"""The base of every ``data_kwargs`` and ``template_kwargs`` model, and each template's ``template_kwargs``. The
recipe and the template receive the validated instance, never a dict to validate again; it reads like the JSON object
it records, so ``kwargs["difficulty"]`` and ``kwargs == {...}`` compare effective values, defaults included.
"""

from __future__ import annotations

from collections.abc import ItemsView, KeysView, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr


class KwargsModel(BaseModel):
    """Strict, frozen options of one dataset or template; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def as_json(self) -> dict[str, Any]:
        """The effective values as plain JSON (what ``resolved_config.json`` records)."""
        return self.model_dump(mode="json")

    def __getitem__(self, name: str) -> Any:
        return self.as_json()[name]

    def keys(self) -> KeysView[str]:
        return self.as_json().keys()

    def items(self) -> ItemsView[str, Any]:
        return self.as_json().items()

    def __contains__(self, name: object) -> bool:
        return name in type(self).model_fields

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self.as_json() == dict(other)
        return super().__eq__(other)

    __hash__ = BaseModel.__hash__


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
