"""The one place a run's engine is built from the checked inputs: the config, the effective generation settings,
the tokenizer and the device. The pre-run check (:mod:`gencache.run.teacher_checks`) and ``gencache audit``
(:mod:`gencache.run.audit`) both build theirs here, so both meet the same refusals of settings an engine cannot
honour (raised by :func:`gencache.generation.engines.create_engine` before any weights load)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gencache.config.names import ENGINE_VLLM

if TYPE_CHECKING:
    from gencache.config import CacheConfig
    from gencache.generation.effective import EffectiveGeneration
    from gencache.generation.engines import Engine


def build_engine(
    config: CacheConfig,
    *,
    generation: EffectiveGeneration,
    tokenizer: Any,
    device: str,
    name: str | None = None,
    model_path: str | None = None,
    dtype: str | None = None,
    one_prompt: bool = False,
) -> Engine:
    """The engine ``name`` (the config's ``engine`` when None) for ``config``'s teacher, ``model_path`` and
    ``dtype`` overriding the config's. It takes the config's ``gen_batch_size`` and, when it is the config's own
    engine, its ``engine_options``. ``one_prompt``: the engine generates one prompt per call (the audit), so its batch
    size is one and the transformers engines run with their default options (vLLM keeps the run's)."""
    from gencache.generation.engines import EngineContext, create_engine

    model = config.model
    chosen = name or config.engine
    options = config.engine_options if chosen == config.engine else None
    if one_prompt and chosen != ENGINE_VLLM:
        options = None
    return create_engine(
        chosen,
        EngineContext(
            generation=generation,
            tokenizer=tokenizer,
            model_path=model_path or model.model_path,
            dtype=dtype or model.dtype,
            device=device,
            revision=model.revision,
            attn_implementation=model.attn_implementation,
            batch_size=1 if one_prompt else config.gen_batch_size,
            seed=config.seed,
            options=options,
        ),
    )
