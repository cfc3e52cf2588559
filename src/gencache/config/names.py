"""The fixed choices a config names, each written once: the weights dtypes, the engines, which fields are
checked against a sibling and the logit fields refused everywhere."""

from __future__ import annotations

from typing import Literal, TypeAlias, get_args

#: The weights dtypes a teacher loads in (``model.dtype``), recorded in an artifact's provenance as this string.
Dtype: TypeAlias = Literal["bfloat16", "float16", "float32"]
DTYPES: tuple[str, ...] = get_args(Dtype)
#: Bytes per element of each dtype (what KV-cache sizing multiplies by).
DTYPE_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2, "float32": 4}

#: The engines a config may name (the top-level ``engine`` field).
EngineName: TypeAlias = Literal["transformers", "transformers-continuous", "vllm"]
ALL_ENGINES: tuple[str, ...] = get_args(EngineName)
ENGINE_STATIC, ENGINE_CONTINUOUS, ENGINE_VLLM = ALL_ENGINES

#: Fields whose rule reads a sibling field of the same object, and that sibling (a problem in such a field is traced
#: to a ``--set`` of its sibling).
READS_SIBLING: dict[str, str] = {
    "data_kwargs": "dataset_name",
    "template_kwargs": "template",
    "engine_options": "engine",
}

NO_LOGITS_MESSAGE = (
    "format 3 never collects or stores logits or scores; KL training computes teacher logits online. "
    "Delete this field from the config (the SemPIC research code's _default.json files shipped `store_logits: true`)"
)

#: Fields that ask for logits, scores or other per-step tensors: refused wherever they appear with NO_LOGITS_MESSAGE.
LOGIT_FIELDS: frozenset[str] = frozenset(
    {
        "store_logits",
        "output_scores",
        "output_logits",
        "return_dict_in_generate",
        "output_attentions",
        "output_hidden_states",
        "return_legacy_cache",
        "logits_to_keep",
        "num_logits_to_keep",
        "store_scores",
    }
)
