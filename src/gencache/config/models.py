"""The generation-cache config: the pydantic models and loading (every field is described in docs/config.md).
``data_kwargs``, ``template_kwargs`` and ``engine_options`` are kept as the validated models of their dataset,
template and engine, so ``config_to_json`` dumps the *effective* values, defaults included: it reproduces exactly
the samples a run used."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from gencache.config.datasets import dataset_kwargs_model, dataset_names
from gencache.config.documents import read_merged_config
from gencache.config.engines import ENGINE_OPTIONS, GEN_BATCH_SIZE_USE, EngineOptions
from gencache.config.generation import generation_problems
from gencache.config.kwargs import TEMPLATE_KWARGS, KwargsModel, TemplateKwargs
from gencache.config.messages import ConfigObject, format_validation_error, nested_error, show, unknown_name
from gencache.config.names import READS_SIBLING, Dtype, EngineName
from gencache.config.paths import output_name_problem, url_problem
from gencache.core.errors import ConfigError

MAX_SEED = 2**32 - 1
"""The largest seed: numpy's range, which transformers' and vLLM's seeding hand on (torch and ``random`` take
more, but a seed that fails at numpy would fail the run after the weights load)."""


def _rule(problem_of: Callable[[str], str | None]) -> AfterValidator:
    """A string's rule, given as the function that says what is wrong with a value (None: nothing)."""

    def check(value: str) -> str:
        if (problem := problem_of(value)) is not None:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


def answer_pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be an ``answer_pattern`` (a regular expression that cuts the answer as scored out of a
    stored answer, see :mod:`gencache.data.scores`), or None when it can; ``gencache score`` checks its own too."""
    try:
        compiled = re.compile(pattern)
    except re.error as error:
        return f"is not a regular expression ({error})"
    if compiled.groups > 1 and "answer" not in compiled.groupindex:
        return (
            f"has {compiled.groups} groups: name the one that holds the answer (?P<answer>...), or use one group "
            "(non-capturing ones are written (?:...))"
        )
    return None


LocalOrHub = Annotated[str, Field(min_length=1), _rule(url_problem)]


class ModelConfig(ConfigObject):
    """The teacher: where to load it from and how."""

    model_path: LocalOrHub = Field(
        description="Hub id or local directory of the teacher; stored verbatim in the artifact's provenance.",
    )
    tokenizer_path: LocalOrHub | None = Field(
        default=None,
        description="Hub id or local directory of the tokenizer; null means model_path (made explicit after "
        "validation). Training compares it with its own tokenizer path.",
    )
    revision: str | None = Field(
        default=None,
        min_length=1,
        description="Hub revision (branch, tag or commit) for model and tokenizer; recorded.",
    )
    dtype: Dtype = Field(default="bfloat16", description="Weights dtype; recorded in provenance as this string.")
    device: str = Field(
        default="cuda:0",
        description='"cpu", "cuda", "cuda:N" or "auto" (device_map="auto"). Under torchrun/SLURM "cuda" or '
        '"cuda:0" means this rank\'s cuda:LOCAL_RANK.',
    )
    attn_implementation: str | None = Field(
        default=None,
        min_length=1,
        description='Passed to from_pretrained (e.g. "sdpa", "eager", "flash_attention_2"); recorded.',
    )
    generation_kwargs: dict[str, Any] = Field(
        default={},
        description="Settings for model.generate (max_new_tokens, do_sample, temperature, stop_strings, ...). "
        "Effective config: these, then the teacher's generation_config.json, then transformers' defaults; "
        "do_sample is false unless asked. max_new_tokens must end up a positive int. Logit and score fields "
        "are rejected.",
    )

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not re.fullmatch(r"cpu|auto|cuda|cuda:\d+", value):
            raise ValueError(f'must be "cpu", "cuda", "cuda:N" or "auto" (got {show(value)})')
        return value

    @field_validator("generation_kwargs")
    @classmethod
    def _generation(cls, value: dict[str, Any]) -> dict[str, Any]:
        if problems := generation_problems(value):
            raise nested_error(problems)
        return copy.deepcopy(value)

    @model_validator(mode="after")
    def _explicit_tokenizer_path(self) -> ModelConfig:
        if self.tokenizer_path is None:
            object.__setattr__(self, "tokenizer_path", self.model_path)
        return self

    @property
    def effective_tokenizer_path(self) -> str:
        return self.tokenizer_path or self.model_path


#: Per field whose model its sibling names: the model of a name, and the value kept when the sibling itself failed
#: (that error is reported instead).
_CHOSEN: dict[str, tuple[Callable[[str], type[BaseModel]], type[BaseModel]]] = {
    "data_kwargs": (dataset_kwargs_model, KwargsModel),
    "template_kwargs": (TEMPLATE_KWARGS.__getitem__, TemplateKwargs),
    "engine_options": (ENGINE_OPTIONS.__getitem__, EngineOptions),
}


def _chosen(value: Any, info: ValidationInfo) -> Any:
    """``data_kwargs``, ``template_kwargs`` or ``engine_options`` validated with the model its sibling names (an
    instance of that model passes as it is)."""
    model_of, empty = _CHOSEN[str(info.field_name)]
    name = info.data.get(READS_SIBLING[str(info.field_name)])
    if name is None:
        return empty()
    model = model_of(name)  # a plug-in that cannot be loaded raises a DatasetError, reported at this field
    if isinstance(value, model):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return model.model_validate(value)


# A validated kwargs or options model, serialised with its own fields; the model is chosen by the sibling name field,
# so the schema here is an object and gencache.docgen adds the per-dataset, per-template and per-engine schemas.
_ANY_OBJECT = WithJsonSchema({"type": "object", "additionalProperties": True})


class DataConfig(ConfigObject):
    """One dataset selection: which samples, rendered with which template."""

    dataset_name: str = Field(
        description="Dataset recipe name: a built-in (gencache.data.recipes.BUILTIN_DATASETS) or an installed plug-in."
    )
    num_samples: int = Field(
        ge=0,
        description="Samples to take (an error if the split holds fewer). 0 is allowed for one data config, "
        "but a run whose data configs total 0 samples fails.",
    )
    num_data_strs: int = Field(ge=0, description="Biography: statements per person used as documents.")
    num_shots: int = Field(ge=0, description="Few-shot examples rendered before each sample (NIAH: must be 0).")
    subset: str = Field(min_length=1, description="Dataset config / subset (e.g. 10k, fullwiki, default, 4096).")
    split: str = Field(default="train", min_length=1, description="Split to draw samples from.")
    seed: int = Field(
        default=42, ge=0, le=MAX_SEED, description="Seed of this data config's own random.Random (selection order)."
    )
    source: LocalOrHub | None = Field(
        default=None,
        description="null: the canonical hub dataset. Otherwise a hub id, a local directory laid out like a hub "
        "dataset (files named by split, optionally under a subset folder), or a single JSON Lines, JSON, "
        "parquet, CSV or TSV file. Relative paths are relative to the working directory.",
    )
    data_kwargs: Annotated[SerializeAsAny[KwargsModel], _ANY_OBJECT] = Field(
        default={},
        validate_default=True,
        description="Per-dataset options (tables below); unknown keys are errors. After validation: the "
        "effective values, defaults included, as recorded in resolved_config.json.",
    )
    template: str = Field(
        default="default",
        min_length=1,
        description=f"Prompt template: {', '.join(list(TEMPLATE_KWARGS)[:-1])} or {list(TEMPLATE_KWARGS)[-1]}.",
    )
    template_kwargs: Annotated[SerializeAsAny[TemplateKwargs], _ANY_OBJECT] = Field(
        default={},
        validate_default=True,
        description="Per-template options (tables below); unknown keys are errors. After validation: the "
        "effective values, defaults included.",
    )
    answer_pattern: Annotated[str, Field(min_length=1), _rule(answer_pattern_problem)] | None = Field(
        default=None,
        description="gencache score: a regular expression that cuts the answer out of a stored answer (after the "
        "thinking block) instead of the recipe's rule; its group named answer, else its one group, else the whole "
        "match is the answer. null: the recipe's rule. See docs/quality.md.",
    )

    @field_validator("dataset_name", "template")
    @classmethod
    def _known(cls, value: str, info: ValidationInfo) -> str:
        kind, known = (
            ("dataset", dataset_names()) if info.field_name == "dataset_name" else ("template", list(TEMPLATE_KWARGS))
        )
        if value not in known:
            raise ValueError(unknown_name(kind, value, known))
        return value

    _kwargs = field_validator("data_kwargs", "template_kwargs", mode="before")(_chosen)


class CacheConfig(ConfigObject):
    """A whole generation-cache run: one teacher, its data configs, one output artifact."""

    model: ModelConfig = Field(description="The teacher.")
    data_configs: list[DataConfig] = Field(
        min_length=1,
        description="Data configs, generated in order; samples with equal keys are generated once "
        "(first occurrence wins).",
    )
    gen_batch_size: int = Field(
        default=1,
        ge=1,
        description="What it sets depends on the engine: "
        + "; ".join(f'"{name}": {use}' for name, use in GEN_BATCH_SIZE_USE.items())
        + ". resolved_config.json records it as batching.gen_batch_size, with what the engine did with it.",
    )
    engine: EngineName = Field(
        default="transformers",
        description='Generation engine: "transformers" (static length-sorted batches; honours every setting), '
        '"transformers-continuous" (transformers\' continuous batching, paged KV cache) or "vllm" (optional: CUDA '
        "GPUs, or a CPU with vLLM's CPU build). See docs/engines.md.",
    )
    engine_options: Annotated[SerializeAsAny[EngineOptions], _ANY_OBJECT] = Field(
        default={},
        validate_default=True,
        description="Options of the chosen engine (strict; see the engine_options tables). After validation they "
        "hold the effective values, defaults included.",
    )
    cache_device: Literal["cpu"] = Field(
        default="cpu",
        description='Where entries are staged before they are written; only "cpu" exists (entries stream to disk; '
        "training chooses where to put what it reads).",
    )
    seed: int = Field(
        default=42, ge=0, le=MAX_SEED, description="Seeds Python's random and torch before the teacher loads."
    )
    output_dir: Annotated[str, _rule(output_name_problem)] = Field(
        min_length=1,
        description="Artifact directory to publish: a local path, relative to the working directory, or an "
        "s3://BUCKET/PREFIX/NAME URL (other URL schemes are refused); must not exist, not even as a dangling symlink "
        "or as any object under the prefix, and must end in a name of its own (not /, . or ..).",
    )

    _engine_options = field_validator("engine_options", mode="before")(_chosen)


class _DataConfigList(ConfigObject):
    data_configs: list[DataConfig] = Field(min_length=1)


def load_config(path: str | os.PathLike[str]) -> CacheConfig:
    """Read a config file, deep-merge its sibling ``_default.json`` (if any) under it, and validate it; one
    :class:`ConfigError` line names the file and every problem."""
    raw, origin = read_merged_config(path)
    return parse_config(raw, origin=origin)


def parse_config(raw: Mapping[str, Any], *, origin: str = "<config>") -> CacheConfig:
    """Validate an already-merged config mapping; :class:`ConfigError` names ``origin`` and every bad field."""
    try:
        return CacheConfig.model_validate(dict(raw) if isinstance(raw, Mapping) else raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, origin=origin)) from None


def parse_data_configs(raw: Sequence[Any]) -> list[DataConfig]:
    """Validate a list of data configs (mappings or :class:`DataConfig`), as training has them; errors name
    ``data_configs[i]...`` like those of a whole config."""
    items = (
        [dict(item) if isinstance(item, Mapping) else item for item in raw] if isinstance(raw, (list, tuple)) else raw
    )
    try:
        return list(_DataConfigList.model_validate({"data_configs": items}).data_configs)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None


def config_to_json(cfg: BaseModel) -> dict[str, Any]:
    """The effective config as plain JSON, every default explicit (what ``resolved_config.json`` records; parsing
    it again gives an equal config)."""
    return cfg.model_dump(mode="json")
