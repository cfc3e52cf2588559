"""The checks of a run's data: each data config on its own from its files, before any model library is imported
(:func:`data_config_steps`), and, once the tokenizer loads, the tokenized samples and what derives from them: the
context length, the prompt ids, the paged cache and the header budget (:func:`sample_steps`). The order is
:mod:`gencache.run.checks`'s. Nothing is printed here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gencache.core.errors import ConfigError, GencacheError, ShardError, reworded
from gencache.run import check_kinds as kinds

if TYPE_CHECKING:
    from gencache.config import CacheConfig, DataConfig
    from gencache.data.samples import SampleSet
    from gencache.run.findings import Preflight, Runner
    from gencache.run.sharding import ShardSpec


def _named(index: int, error: GencacheError) -> GencacheError:
    """``error`` naming ``data_configs[index]`` once, with the config field it is about as its location."""
    text = str(error)
    prefix = f"data_configs[{index}]"
    named = reworded(error, text if text.startswith(prefix) else f"{prefix}: {text}")
    field = getattr(error, "field", None)
    named.location = f"{prefix}.{field}" if field else prefix  # type: ignore[attr-defined]
    return named


def _one_data_config(index: int, dc: DataConfig) -> tuple[list[str] | None, str]:
    """The keys of data config ``index`` read from its source (its prompts rendered when the template needs no
    tokenizer), or None when the recipe counts tokens and is checked once the tokenizer loads."""
    from gencache.data.keys import semantic_key
    from gencache.data.prompts import get_template
    from gencache.data.recipes import get_recipe
    from gencache.data.samples import build_samples

    recipe = get_recipe(dc.dataset_name)
    if recipe.needs_tokenizer(dc.data_kwargs):
        return None, f"{dc.dataset_name} counts teacher tokens: checked once the tokenizer loads"
    try:
        if dc.num_samples and not get_template(dc.template).needs_tokenizer:
            built = build_samples([dc], first_index=index)  # the prompts too: the template renders without a tokenizer
            keys, source = [sample.key for sample in built], built.summaries[0].source
        else:
            raw, source = recipe.load(dc, dc.data_kwargs, None)
            if len(raw) != dc.num_samples:
                raise ConfigError(f"dataset {dc.dataset_name!r} returned {len(raw)} samples, not {dc.num_samples}.")
            keys = [semantic_key(sample.semantic) for sample in raw]
    except GencacheError as error:
        raise _named(index, error) from None
    where = f"{source.kind} {source.location}" if source.location else source.kind
    return keys, f"{dc.dataset_name}: {len(keys)} samples, {len(set(keys))} unique keys, from {where}"


def _bind(index: int, dc: DataConfig) -> Callable[[], tuple[list[str] | None, str]]:
    return lambda: _one_data_config(index, dc)


def data_config_steps(
    run: Runner, result: Preflight, data_configs: Sequence[tuple[int, DataConfig]], shard: ShardSpec | None
) -> None:
    """Each data config on its own (one check each), then the run's sample count and the ``--shards`` count."""
    counts: list[int] = []
    keys: list[str] = []
    complete = True
    with warnings.catch_warnings():  # a recipe's warnings come once, with the samples of phase 2
        warnings.simplefilter("ignore")
        for index, dc in data_configs:
            found = run.step(kinds.data_config_check(index), _bind(index, dc))
            counts.append(-1 if found is None else len(found))
            complete = complete and found is not None
            keys.extend(found or ())
    result.sample_counts = counts
    if data_configs and all(dc.num_samples == 0 for _, dc in data_configs):
        result.add_problem(
            kinds.DATASETS,
            ConfigError(
                "No samples: every data config has num_samples 0; raise num_samples of at least one data config."
            ),
        )
    if complete:
        result.keys = keys
        _shard_count_step(run, len(dict.fromkeys(keys)), shard)


def _shard_count_step(run: Runner, unique: int, shard: ShardSpec | None) -> None:
    """``--shards N`` with more shards than the run has unique keys is refused (some shards would be empty). One
    shard of a launched or ``--shard I/N`` run that owns no key is still published empty, so that the set of shards
    is complete (generate says so)."""
    if shard is None or shard.origin != "--shards":
        return

    def count() -> tuple[None, str]:
        if shard.count > max(unique, 1):
            raise ShardError(
                f"{shard.origin} asks for {shard.count} shards but the run has {unique} unique key(s): some shards "
                f"would be empty; use at most {max(unique, 1)} shards."
            )
        return None, f"{shard.count} shards over {unique} unique keys"

    run.step(kinds.SHARDS, count)


# -- phase 2: the tokenized samples ------------------------------------------------------------------------
def _largest_prompt_id(found: Preflight, vocab_size: int) -> str:
    from gencache.generation.teacher_files import check_prompt_ids

    samples = found.samples
    assert samples is not None
    largest, where = -1, "-"
    for sample in samples.unique:
        if sample.input_ids and max(sample.input_ids) > largest:
            largest = max(sample.input_ids)
            where = f"data_configs[{sample.data_config_index}] sample {sample.sample_index}"
    return check_prompt_ids(largest, where, vocab_size)


def check_paged_cache(found: Preflight, teacher_config: Any) -> str:
    """The continuous engine's ``engine_options.kv_cache_memory_gib`` holds at least one request of the longest
    prompt plus ``max_new_tokens`` (the same sizing the engine makes when it starts), for the teacher whose
    ``config.json`` is ``teacher_config``."""
    from gencache.config.engines import ContinuousOptions
    from gencache.config.names import DTYPE_BYTES
    from gencache.generation.engines.continuous import size_paged_cache
    from gencache.generation.engines.memory import GIB

    config, samples, generation = found.config, found.samples, found.generation
    assert config is not None and samples is not None and generation is not None
    options = config.engine_options
    assert isinstance(options, ContinuousOptions) and options.kv_cache_memory_gib is not None
    lengths = [len(sample.input_ids or ()) for sample in samples.unique]
    try:
        sizing = size_paged_cache(
            lengths,
            generation.max_new_tokens,
            len(lengths) * generation.num_return_sequences,
            options,
            model_config=teacher_config,
            dtype_bytes=DTYPE_BYTES[config.model.dtype],
            budget=(int(options.kv_cache_memory_gib * GIB), "engine_options.kv_cache_memory_gib"),
        )
    except GencacheError as error:
        raise ConfigError(str(error)) from None
    except Exception as error:  # a config.json without the attention sizes
        from gencache.core.errors import first_line

        raise ConfigError(
            f"engine_options.kv_cache_memory_gib: cannot size the paged cache: {first_line(error)}"
        ) from None
    return f"{sizing.num_blocks} blocks of {sizing.page_size} tokens, {sizing.concurrency} requests at once"


def _samples_step(run: Runner, result: Preflight, config: CacheConfig) -> None:
    from gencache.data.samples import DuplicatePromptWarning, build_samples

    if result.tokenizer is None:
        run.skip(kinds.SAMPLES, "not checked: the tokenizer failed")
        result.not_computed.append("prompt renderings, unique keys and prompt token counts (no tokenizer)")
        return

    def samples() -> tuple[SampleSet, str]:
        with warnings.catch_warnings():  # reported by the caller, from samples.conflicting_prompts
            warnings.simplefilter("ignore", DuplicatePromptWarning)
            built = build_samples(config, tokenizer=result.tokenizer)
        result.sample_counts = [s.samples for s in built.summaries]
        return built, f"{len(built)} samples, {len(built.unique)} unique keys, {built.duplicates} duplicates"

    result.samples = run.step(kinds.SAMPLES, samples)


def _context_step(run: Runner, result: Preflight) -> None:
    from gencache.run.check_steps import check_context

    def context() -> tuple[None, str]:
        samples, generation = result.samples, result.generation
        assert samples is not None and generation is not None
        longest, where = 0, "-"
        for summary in samples.summaries:
            if summary.prompt_tokens and summary.prompt_tokens[2] > longest:
                longest, where = summary.prompt_tokens[2], f"data_configs[{summary.index}]"
        max_positions = run.teacher.max_positions
        if max_positions is None:
            return None, "not checked: the teacher's config.json records no maximum positions"
        return None, check_context(longest, where, generation.max_new_tokens, max_positions)

    run.step(kinds.CONTEXT_LENGTH, context)


def sample_steps(run: Runner, result: Preflight, config: CacheConfig, shard: ShardSpec | None) -> None:
    """The samples built with the tokenizer (and each target's keys from them), the context length, the prompt
    ids, the paged cache and the header budget (and the ``--shards`` count when a data config could not be read
    without the tokenizer)."""
    from gencache.config.engines import ContinuousOptions
    from gencache.run.sharding import with_keys

    _samples_step(run, result, config)
    if result.samples is not None:
        result.targets = with_keys(result.targets, result.samples)
    if result.samples is None or result.generation is None:
        for kind in (kinds.CONTEXT_LENGTH, kinds.HEADER_BUDGET):
            run.skip(kind, "not computed: needs the samples and generation config")
        result.not_computed += ["the context-length check", "the header budget"]
        return
    if result.keys is None:
        _shard_count_step(run, len(result.samples.unique), shard)
    _context_step(run, result)
    vocab_size = run.teacher.vocab_size
    if vocab_size is not None:
        run.step(kinds.PROMPT_IDS, lambda: (None, _largest_prompt_id(result, vocab_size)))
    options = config.engine_options
    if isinstance(options, ContinuousOptions) and options.kv_cache_memory_gib is not None:
        teacher_config = run.teacher.config
        run.step(kinds.PAGED_CACHE, lambda: (None, check_paged_cache(result, teacher_config)))
    result.capacity = run.step(kinds.HEADER_BUDGET, lambda: _budget(result)) or {}


def _budget(result: Preflight) -> tuple[dict[Path, int], str]:
    from gencache.artifact.header import header_capacity

    generation = result.generation
    assert generation is not None
    capacities = {
        target.output_dir: header_capacity(len(target.keys), generation.num_return_sequences, generation.max_new_tokens)
        for target in result.targets
    }
    largest = max(capacities.values(), default=0)
    return capacities, f"{largest:,} bytes reserved for the largest artifact"
