"""Every check a run makes before the teacher's weights load: the one code path of ``generate`` and ``--dry-run``.

:func:`preflight` runs, in order: paths that must be valid UTF-8, the output location (absent, a name no
temporary directory could have, lengths the file system takes, a writable parent, rename support), the device, the
local model and tokenizer directories (or the hub ids, quickly), the tokenizer, the effective generation config,
the engine's refusals, the teacher's config, attention implementation, weight files and vocabulary (every token id
inside the embedding), the datasets and sample counts, the context length (longest prompt plus
``max_new_tokens`` within the teacher's maximum positions), the prompt ids, the continuous engine's paged-cache
budget and the header budget (the run adds the ``--shards`` count against the keys). The individual checks are
in :mod:`gencache.run_checks`. ``generate`` stops at the first
problem (``collect=False``); the dry run collects every problem, skips what depends on a failed check and says
what it could not compute. Nothing is printed here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gencache.config.engines import ContinuousOptions
from gencache.config.names import DTYPE_BYTES
from gencache.errors import ConfigError, GencacheError, GenerationError
from gencache.run_checks import (
    check_context,
    check_device,
    check_model_location,
    check_output_location,
    check_utf8_paths,
    max_positions_of,
    read_teacher_config,
)
from gencache.sharding import ShardSpec

if TYPE_CHECKING:
    from gencache.config import CacheConfig
    from gencache.data.samples import SampleSet
    from gencache.generation.effective import EffectiveGeneration
    from gencache.generation.engines import Engine

T = TypeVar("T")


@dataclass(frozen=True)
class Check:
    """One line of the dry-run report: ``status`` is ``ok``, ``failed`` or ``skipped``."""

    name: str
    status: str
    detail: str


@dataclass(frozen=True)
class RunInputs:
    """What a run takes from the checks, every part present (:meth:`Preflight.run_inputs` builds it or raises)."""

    device: str
    tokenizer: Any
    generation: EffectiveGeneration
    engine: Engine
    samples: SampleSet
    capacity: Mapping[Path, int]
    rename_mode: str


@dataclass
class Preflight:
    """What the checks found, as the dry run reports it: each check's line, every problem, and the values the
    checks that passed produced (a value is None when its check failed or was skipped)."""

    config: CacheConfig
    outputs: list[Path]
    device: str | None = None
    tokenizer: Any | None = None
    generation: EffectiveGeneration | None = None
    engine: Engine | None = None
    samples: SampleSet | None = None
    sample_counts: list[int] | None = None
    max_positions: int | None = None
    longest_prompt: int | None = None
    vocab_size: int | None = None
    teacher_config: Any | None = None
    capacity: dict[Path, int] = field(default_factory=dict)
    rename_mode: str | None = None
    checks: list[Check] = field(default_factory=list)
    errors: list[GencacheError] = field(default_factory=list)
    not_computed: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """What ``generate`` would exit with: the first problem's code, 0 when there is none."""
        return self.errors[0].exit_code if self.errors else 0

    def failed(self, name: str) -> bool:
        return any(c.name == name and c.status != "ok" for c in self.checks)

    def run_inputs(self) -> RunInputs:
        """The complete inputs of a run that publishes :attr:`outputs`: the first problem is raised, and a value no
        check produced is a :class:`GenerationError` naming it."""
        if self.errors:
            raise self.errors[0]
        device, tokenizer, generation, engine = self.device, self.tokenizer, self.generation, self.engine
        samples, rename_mode = self.samples, self.rename_mode
        produced = {"device": device, "tokenizer": tokenizer, "generation": generation, "engine": engine}
        produced |= {"samples": samples, "output location": rename_mode}
        missing = [name for name, value in produced.items() if value is None]
        missing += [f"the header budget of {path}" for path in self.outputs if path not in self.capacity]
        # the None tests repeat ``missing`` for the type checker
        if missing or device is None or generation is None or engine is None or samples is None or not rename_mode:
            raise GenerationError(f"The checks before the run left {', '.join(missing)} unknown; nothing was loaded.")
        return RunInputs(device, tokenizer, generation, engine, samples, dict(self.capacity), rename_mode)


class _Runner:
    def __init__(self, result: Preflight, collect: bool) -> None:
        self.result = result
        self.collect = collect

    def step(self, name: str, action: Callable[[], tuple[T, str]], *, needs: Sequence[str] = ()) -> T | None:
        blocked = [n for n in needs if self.result.failed(n)]
        if blocked:
            self.result.checks.append(Check(name, "skipped", f"not checked: {', '.join(blocked)} failed"))
            return None
        try:
            value, detail = action()
        except GencacheError as error:
            if not self.collect:
                raise
            self.result.errors.append(error)
            self.result.checks.append(Check(name, "failed", str(error)))
            return None
        self.result.checks.append(Check(name, "ok", detail))
        return value


def _largest_prompt_id(found: Preflight) -> str:
    from gencache.generation.teacher_files import check_prompt_ids

    samples = found.samples
    assert samples is not None and found.vocab_size is not None
    largest, where = -1, "-"
    for sample in samples.unique:
        if sample.input_ids and max(sample.input_ids) > largest:
            largest = max(sample.input_ids)
            where = f"data_configs[{sample.data_config_index}] sample {sample.sample_index}"
    return check_prompt_ids(largest, where, found.vocab_size)


def check_paged_cache(found: Preflight) -> str:
    """The continuous engine's ``engine_options.kv_cache_memory_gib`` holds at least one request of the longest
    prompt plus ``max_new_tokens`` (the same sizing the engine makes when it starts)."""
    from gencache.generation.engines.continuous import size_paged_cache

    config, samples, generation = found.config, found.samples, found.generation
    assert samples is not None and generation is not None
    options = config.engine_options
    assert isinstance(options, ContinuousOptions) and options.kv_cache_memory_gib is not None
    model = config.model
    lengths = [len(sample.input_ids or ()) for sample in samples.unique]
    try:
        sizing = size_paged_cache(
            lengths, generation.max_new_tokens, len(lengths) * generation.num_return_sequences, options,
            model_config=found.teacher_config, dtype_bytes=DTYPE_BYTES[model.dtype],
            budget=(int(options.kv_cache_memory_gib * 2**30), "engine_options.kv_cache_memory_gib"),
        )  # fmt: skip
    except GencacheError as error:
        raise ConfigError(str(error)) from None
    except Exception as error:  # a config.json without the attention sizes
        from gencache.errors import first_line

        raise ConfigError(
            f"engine_options.kv_cache_memory_gib: cannot size the paged cache: {first_line(error)}"
        ) from None
    return f"{sizing.num_blocks} blocks of {sizing.page_size} tokens, {sizing.concurrency} requests at once"


def _count_without_tokenizer(config: CacheConfig) -> list[int]:
    """Load every data config that can be loaded without a tokenizer (its rows, not its prompts) and count them."""
    from gencache.data.recipes import get_recipe
    from gencache.data.sources import shared_tables

    counts: list[int] = []
    with shared_tables():
        for index, dc in enumerate(config.data_configs):
            recipe = get_recipe(dc.dataset_name)
            kwargs = dc.data_kwargs
            if recipe.needs_tokenizer(kwargs):
                counts.append(-1)
                continue
            try:
                raw, _ = recipe.load(dc, kwargs, None)
            except GencacheError as error:
                raise type(error)(f"data_configs[{index}]: {error}") from None
            counts.append(len(raw))
    return counts


def _teacher_steps(run: _Runner, result: Preflight) -> None:
    """The checks of the teacher itself: attention on the device, whole weight files, the vocabulary."""
    from gencache.generation.teacher_files import (
        check_attn_implementation,
        check_teacher_weights,
        check_vocabulary,
        vocab_size_of,
    )

    model = result.config.model

    def attention() -> tuple[None, str]:
        assert result.device is not None
        return None, check_attn_implementation(model.attn_implementation, result.device)

    def vocabulary() -> tuple[None, str]:
        vocab_size = vocab_size_of(result.teacher_config)
        if vocab_size is None:
            return None, "not checked: config.json records no vocab_size"
        result.vocab_size = vocab_size
        assert result.generation is not None
        settings = {**result.generation.kwargs, "eos_token_id": list(result.generation.eos_token_ids)}
        return None, check_vocabulary(result.tokenizer, vocab_size, settings)

    run.step("attention", attention, needs=("device",))
    run.step("teacher weights", lambda: (None, check_teacher_weights(model.model_path)), needs=("model",))
    run.step("vocabulary", vocabulary, needs=("tokenizer", "generation", "teacher config"))


def _location_steps(run: _Runner, result: Preflight, shard: ShardSpec | None, env: Mapping[str, str] | None) -> None:
    """Paths, the output location, the device and where the model and tokenizer are."""
    from gencache.sharding import device_for_rank

    outputs, model = result.outputs, result.config.model

    def paths() -> tuple[None, str]:
        named = {"working directory": os.getcwd(), "output path": str(outputs[0]) if outputs else ""}
        named |= {"model.model_path": model.model_path, "model.tokenizer_path": model.effective_tokenizer_path}
        check_utf8_paths(named)
        return None, "working directory and output path are valid UTF-8"

    run.step("paths", paths)

    def location() -> tuple[str | None, str]:
        if not outputs:
            return None, "every output is already published"
        mode = check_output_location(outputs)
        shown = str(outputs[0]) if len(outputs) == 1 else f"{len(outputs)} shard directories beside {outputs[0]}"
        return mode, f"{shown} is free; publish with {mode}"

    result.rename_mode = run.step("output path", location, needs=("paths",))

    def device() -> tuple[str, str]:
        chosen = device_for_rank(model.device, shard, env)
        return chosen, check_device(chosen)

    result.device = run.step("device", device)
    run.step("model", lambda: (None, check_model_location("model.model_path", model.model_path, model.revision)))
    if model.effective_tokenizer_path != model.model_path:
        run.step(
            "tokenizer path",
            lambda: (
                None,
                check_model_location("model.tokenizer_path", model.effective_tokenizer_path, model.revision),
            ),
        )


def _model_steps(run: _Runner, result: Preflight) -> None:
    """The tokenizer, the effective generation config, the engine, the teacher's config and files."""
    config = result.config
    model = config.model

    def tokenizer() -> tuple[Any, str]:
        from gencache.generation.teacher import load_tokenizer

        loaded = load_tokenizer(model.effective_tokenizer_path, revision=model.revision)
        return loaded, f"{type(loaded).__name__}, pad id {loaded.pad_token_id}, eos id {loaded.eos_token_id}"

    result.tokenizer = run.step("tokenizer", tokenizer, needs=("model", "tokenizer path"))

    def generation() -> tuple[EffectiveGeneration, str]:
        from gencache.generation.effective import resolve_generation

        effective = resolve_generation(
            model.generation_kwargs, model_path=model.model_path, revision=model.revision, tokenizer=result.tokenizer
        )
        return effective, (
            f"max_new_tokens {effective.max_new_tokens}, {effective.num_return_sequences} sequence(s) per prompt"
        )

    result.generation = run.step("generation", generation, needs=("tokenizer",))

    def engine() -> tuple[Engine, str]:
        from gencache.generation.engines import EngineContext, create_engine

        assert result.generation is not None and result.device is not None
        created = create_engine(  # refuses settings the engine cannot honour
            config.engine,
            EngineContext(
                generation=result.generation, tokenizer=result.tokenizer, model_path=model.model_path,
                dtype=model.dtype, device=result.device, revision=model.revision,
                attn_implementation=model.attn_implementation, batch_size=config.gen_batch_size, seed=config.seed,
                options=config.engine_options,
            ),
        )  # fmt: skip
        return created, f"{config.engine}"

    result.engine = run.step("engine", engine, needs=("generation", "device"))

    def positions() -> tuple[int | None, str]:
        result.teacher_config = read_teacher_config(model.model_path, model.revision)
        value = max_positions_of(result.teacher_config)
        return value, f"{value} positions" if value else "config.json records no maximum positions"

    result.max_positions = run.step("teacher config", positions, needs=("model",))
    _teacher_steps(run, result)


def _data_steps(
    run: _Runner,
    result: Preflight,
    shard: ShardSpec | None,
    owned_keys: Callable[[SampleSet], Mapping[Path, Sequence[str]]] | None,
) -> None:
    """The datasets and samples, the context length, the paged cache and the header budget."""
    config, outputs = result.config, result.outputs

    def datasets() -> tuple[SampleSet | None, str]:
        from gencache.data.samples import build_samples

        if result.tokenizer is None:
            counts = _count_without_tokenizer(config)
            result.sample_counts = counts
            known = [c for c in counts if c >= 0]
            result.not_computed.append("prompt renderings, unique keys and prompt token counts (no tokenizer)")
            return None, f"{sum(known)} rows in {len(known)} of {len(counts)} data configs (without a tokenizer)"
        import warnings

        from gencache.data.samples import DuplicatePromptWarning

        with warnings.catch_warnings():  # reported by the caller, from samples.conflicting_prompts
            warnings.simplefilter("ignore", DuplicatePromptWarning)
            built = build_samples(config, tokenizer=result.tokenizer)
        result.sample_counts = [s.samples for s in built.summaries]
        return built, f"{len(built)} samples, {len(built.unique)} unique keys, {built.duplicates} duplicates"

    result.samples = run.step("datasets", datasets)

    def context() -> tuple[None, str]:
        samples, generation_ = result.samples, result.generation
        assert samples is not None and generation_ is not None
        longest, where = 0, "-"
        for summary in samples.summaries:
            if summary.prompt_tokens and summary.prompt_tokens[2] > longest:
                longest, where = summary.prompt_tokens[2], f"data_configs[{summary.index}]"
        result.longest_prompt = longest
        if result.max_positions is None:
            return None, "not checked: the teacher's config.json records no maximum positions"
        return None, check_context(longest, where, generation_.max_new_tokens, result.max_positions)

    if result.samples is None or result.generation is None:
        result.checks.append(
            Check("context length", "skipped", "not computed: needs the samples and generation config")
        )
        result.not_computed.append("the context-length check")
    else:
        run.step("context length", context)
        if result.vocab_size is not None:
            run.step("prompt ids", lambda: (None, _largest_prompt_id(result)))
        options = config.engine_options
        if isinstance(options, ContinuousOptions) and options.kv_cache_memory_gib is not None:
            run.step("paged cache", lambda: (None, check_paged_cache(result)), needs=("teacher config", "engine"))

    def budget() -> tuple[dict[Path, int], str]:
        from gencache.artifact.header import header_capacity

        samples, generation_ = result.samples, result.generation
        assert samples is not None and generation_ is not None
        if owned_keys is not None:
            keys = owned_keys(samples)
        else:
            keys = {outputs[0]: shard.select(samples.keys()) if shard else samples.keys()} if outputs else {}
        capacities = {
            path: header_capacity(len(owned), generation_.num_return_sequences, generation_.max_new_tokens)
            for path, owned in keys.items()
        }
        largest = max(capacities.values(), default=0)
        return capacities, f"{largest:,} bytes reserved for the largest artifact"

    if result.samples is None or result.generation is None:
        result.checks.append(Check("header budget", "skipped", "not computed: needs the samples and generation config"))
        result.not_computed.append("the header budget")
    else:
        result.capacity = run.step("header budget", budget) or {}


# -- the whole path -----------------------------------------------------------------------------------------
def preflight(
    config: CacheConfig,
    outputs: Sequence[Path],
    shard: ShardSpec | None,
    env: Mapping[str, str] | None,
    *,
    collect: bool = False,
    owned_keys: Callable[[SampleSet], Mapping[Path, Sequence[str]]] | None = None,
) -> Preflight:
    """Run every model-free check (see the module docstring) and return what they found.

    ``outputs`` are the directories the run publishes (one, or one per shard still to generate); ``owned_keys``
    maps the built samples to each output's keys for the header budget (default: all unique keys go to
    ``outputs[0]``). With ``collect=False`` the first problem is raised; with ``collect=True`` every problem is
    recorded in :attr:`Preflight.errors`.
    """
    result = Preflight(config=config, outputs=list(outputs))
    run = _Runner(result, collect)
    _location_steps(run, result, shard, env)
    _model_steps(run, result)
    _data_steps(run, result, shard, owned_keys)
    return result


__all__ = ["Check", "Preflight", "RunInputs", "preflight"]
