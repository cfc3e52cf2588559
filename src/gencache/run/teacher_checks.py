"""The second phase of the checks before a run (:mod:`gencache.run.preflight`): the teacher and the tokenized
samples, each check a function returning its value and one line for the report, or raising the
:class:`ConfigError` that names what to fix."""

from __future__ import annotations

import warnings
from typing import Any

from gencache.artifact.header import header_capacity
from gencache.artifact.store import Location
from gencache.config.engines import ContinuousOptions
from gencache.config.models import CacheConfig, ModelConfig
from gencache.config.names import DTYPE_BYTES
from gencache.core.errors import ConfigError, GencacheError, first_line
from gencache.data.samples import DuplicatePromptWarning, SampleSet, build_samples
from gencache.generation import teacher as checks
from gencache.generation.effective import EffectiveGeneration, resolve_generation
from gencache.generation.engines import GIB
from gencache.generation.engines.transformers import size_paged_cache
from gencache.run.plan import Target


def torch_device(device: str) -> tuple[None, str]:
    """The device exists on this machine as torch sees it (the config admits only devices torch can name)."""
    if not device.startswith("cuda"):
        return None, device
    import torch

    index = torch.device(device).index
    if not torch.cuda.is_available():
        raise ConfigError(
            f"model.device {device!r}: CUDA is not available on this machine (torch {torch.__version__}); "
            'set model.device to "cpu" or run on a machine with a GPU.'
        )
    count = torch.cuda.device_count()
    if index is not None and index >= count:
        raise ConfigError(
            f"model.device {device!r}: this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1}); "
            "choose one of them."
        )
    return None, f"{device} ({torch.cuda.get_device_name(index or 0)})"


def tokenizer(model: ModelConfig) -> tuple[Any, str]:
    got = checks.load_tokenizer(model.effective_tokenizer_path, revision=model.revision)
    return got, f"{type(got).__name__}, pad id {got.pad_token_id}, eos id {got.eos_token_id}"


def generation(model: ModelConfig, tokenizer: Any) -> tuple[EffectiveGeneration, str]:
    effective = resolve_generation(
        model.generation_kwargs, model_path=model.model_path, revision=model.revision, tokenizer=tokenizer
    )
    shown = f"max_new_tokens {effective.max_new_tokens}, {effective.num_return_sequences} sequence(s) per prompt"
    return effective, shown


def teacher_config(model: ModelConfig) -> tuple[Any, str]:
    """The teacher's ``config.json`` (no weights; phase 1 parsed it, naming invalid JSON's line and column)."""
    from transformers import AutoConfig

    try:
        teacher = AutoConfig.from_pretrained(model.model_path, revision=model.revision)
    except Exception as error:
        raise ConfigError(
            f"Cannot read the teacher's config.json from {model.model_path!r}: {first_line(error)}"
        ) from None
    positions = max_positions(teacher)
    return teacher, f"{positions} positions" if positions else "config.json records no maximum positions"


def max_positions(config: Any) -> int | None:
    """The first field of the teacher's ``config.json`` that gives its maximum number of positions."""
    for candidate in (config, getattr(config, "text_config", None)):
        for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx"):
            value = getattr(candidate, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def samples(config: CacheConfig, tokenizer: Any) -> tuple[SampleSet, str]:
    with warnings.catch_warnings():  # reported by the caller, from samples.conflicting_prompts
        warnings.simplefilter("ignore", DuplicatePromptWarning)
        built = build_samples(config, tokenizer=tokenizer)
    return built, f"{len(built)} samples, {len(built.unique)} unique keys, {built.duplicates} duplicates"


def context(samples: SampleSet, generation: EffectiveGeneration, teacher: Any) -> tuple[None, str]:
    """The longest prompt plus ``max_new_tokens`` within the teacher's positions."""
    lengths = [(s.prompt_tokens[2], f"data_configs[{s.index}]") for s in samples.summaries if s.prompt_tokens]
    longest, where = max(lengths, key=lambda length: length[0], default=(0, "-"))
    max_new_tokens = generation.max_new_tokens
    if (positions := max_positions(teacher)) is None:
        return None, "not checked: the teacher's config.json records no maximum positions"
    if longest + max_new_tokens > positions:
        room = positions - longest
        advice = f"lower max_new_tokens to at most {room}" if room > 0 else "shorten the prompts"
        raise ConfigError(
            f"model.generation_kwargs.max_new_tokens {max_new_tokens} plus the longest prompt ({longest} tokens, "
            f"{where}) is {longest + max_new_tokens} tokens, beyond the teacher's {positions} positions "
            f"(config.json); {advice}."
        )
    return None, f"longest prompt {longest} + max_new_tokens {max_new_tokens} <= {positions} positions"


def prompt_ids(samples: SampleSet, vocab_size: int) -> tuple[None, str]:
    largest, where = -1, "-"
    for sample in samples.unique:
        if sample.input_ids and max(sample.input_ids) > largest:
            largest = max(sample.input_ids)
            where = f"data_configs[{sample.data_config_index}] sample {sample.sample_index}"
    return None, checks.check_prompt_ids(largest, where, vocab_size)


def paged_cache(
    config: CacheConfig, samples: SampleSet, generation: EffectiveGeneration, teacher: Any
) -> tuple[None, str]:
    """The continuous engine's ``kv_cache_memory_gib`` holds one request of the longest prompt plus
    ``max_new_tokens`` (the engine's own sizing)."""
    options = config.engine_options
    assert isinstance(options, ContinuousOptions) and options.kv_cache_memory_gib is not None
    lengths = [len(sample.input_ids or ()) for sample in samples.unique]
    try:
        sizing = size_paged_cache(
            lengths,
            generation.max_new_tokens,
            len(lengths) * generation.num_return_sequences,
            options,
            model_config=teacher,
            dtype_bytes=DTYPE_BYTES[config.model.dtype],
            budget=(int(options.kv_cache_memory_gib * GIB), "engine_options.kv_cache_memory_gib"),
        )
    except GencacheError as error:  # a failure of the run, refused here as bad input
        raise ConfigError(str(error)) from None
    except Exception as error:  # a config.json without the attention sizes
        raise ConfigError(
            f"engine_options.kv_cache_memory_gib: cannot size the paged cache: {first_line(error)}"
        ) from None
    return None, f"{sizing.num_blocks} blocks of {sizing.page_size} tokens, {sizing.concurrency} requests at once"


def budget(targets: list[Target], generation: EffectiveGeneration) -> tuple[dict[Location, int], str]:
    capacities = {
        target.output_dir: header_capacity(len(target.keys), generation.num_return_sequences, generation.max_new_tokens)
        for target in targets
    }
    return capacities, f"{max(capacities.values(), default=0):,} bytes reserved for the largest artifact"
