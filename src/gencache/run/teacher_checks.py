"""Phase 2 of the checks before a run: the teacher and the tokenized samples, once phase 1 found nothing (these
checks import torch and transformers, and an input mistake is reported in about a second without them).

:class:`TeacherChecks` checks the device as torch sees it (built with CUDA, the index in range), loads the
tokenizer, resolves the effective generation config, builds the engine (its refusals of settings it cannot honour),
reads the teacher's ``config.json`` (its maximum positions), checks the attention implementation, the weight files
and the vocabulary (every token id inside the embedding), builds the samples with the tokenizer (each target gets its
keys from them, selected once), and checks the context length (the longest prompt plus ``max_new_tokens`` within
the teacher's positions), the prompt ids, the continuous engine's paged-cache budget and the header budget. Each
check hands what it produced to the checks after it; the run's complete inputs come back as one
:class:`~gencache.run.findings.RunInputs`. Nothing is printed here.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gencache.core.errors import ConfigError, GencacheError
from gencache.run import check_kinds as kinds

if TYPE_CHECKING:
    from gencache.config import CacheConfig
    from gencache.data.samples import SampleSet
    from gencache.generation.effective import EffectiveGeneration
    from gencache.generation.engines import Engine
    from gencache.run.findings import RunInputs, Runner
    from gencache.run.input_checks import InputFacts
    from gencache.run.sharding import Target

#: Fields of a model's ``config.json`` that give its maximum number of positions, in the order tried.
POSITION_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def check_device(device: str) -> str:
    """The device exists on this machine as torch sees it: ``cpu``, ``cuda``/``cuda:N`` with that GPU (torch
    built with CUDA, the index in range), or ``auto``; :func:`gencache.run.input_checks.check_device_present` ran
    first, without torch."""
    if device in ("cpu", "auto"):
        return device
    import torch

    try:
        target = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f'model.device {device!r} is not a device; use "cpu", "cuda", "cuda:N" or "auto".') from None
    if target.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"model.device {device!r}: CUDA is not available on this machine (torch {torch.__version__}); "
                'set model.device to "cpu" or run on a machine with a GPU.'
            )
        count = torch.cuda.device_count()
        if target.index is not None and target.index >= count:
            raise ConfigError(
                f"model.device {device!r}: this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1}); "
                "choose one of them."
            )
        return f"{device} ({torch.cuda.get_device_name(target.index or 0)})"
    return device


def read_teacher_config(model_path: str, revision: str | None) -> Any:
    """The teacher's ``config.json`` (no weights), read once per run; :class:`ConfigError` when it cannot be read
    (invalid JSON named with its file, line and column)."""
    from transformers import AutoConfig
    from transformers.utils.hub import cached_file

    from gencache.core.hub import pretrained_kwargs
    from gencache.generation.teacher import read_json_file

    try:
        path = cached_file(
            model_path,
            "config.json",
            _raise_exceptions_for_missing_entries=False,
            **pretrained_kwargs(model_path, revision),
        )
        if path is not None:
            read_json_file(path)
        return AutoConfig.from_pretrained(model_path, **pretrained_kwargs(model_path, revision))
    except ConfigError:
        raise
    except Exception as error:
        from gencache.core.errors import first_line

        raise ConfigError(f"Cannot read the teacher's config.json from {model_path!r}: {first_line(error)}") from None


def max_positions_of(config: Any) -> int | None:
    """The teacher's maximum positions from its config (or its text config's), or None when it records none."""
    for candidate in (config, getattr(config, "text_config", None)):
        if candidate is None:
            continue
        for name in POSITION_FIELDS:
            value = getattr(candidate, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def check_context(longest: int, where: str, max_new_tokens: int, max_positions: int) -> str:
    if longest + max_new_tokens > max_positions:
        room = max_positions - longest
        advice = f"lower max_new_tokens to at most {room}" if room > 0 else "shorten the prompts"
        raise ConfigError(
            f"model.generation_kwargs.max_new_tokens {max_new_tokens} plus the longest prompt ({longest} tokens, "
            f"{where}) is {longest + max_new_tokens} tokens, beyond the teacher's {max_positions} positions "
            f"(config.json); {advice}."
        )
    return f"longest prompt {longest} + max_new_tokens {max_new_tokens} <= {max_positions} positions"


def check_paged_cache(
    config: CacheConfig, samples: SampleSet, generation: EffectiveGeneration, teacher_config: Any
) -> str:
    """The continuous engine's ``engine_options.kv_cache_memory_gib`` holds at least one request of the longest
    prompt plus ``max_new_tokens`` (the same sizing the engine makes when it starts), for the teacher whose
    ``config.json`` is ``teacher_config``."""
    from gencache.config.engines import ContinuousOptions
    from gencache.config.names import DTYPE_BYTES
    from gencache.generation.engines import GIB
    from gencache.generation.engines.continuous import size_paged_cache

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


def _largest_prompt_id(samples: SampleSet, vocab_size: int) -> str:
    from gencache.generation.teacher import check_prompt_ids

    largest, where = -1, "-"
    for sample in samples.unique:
        if sample.input_ids and max(sample.input_ids) > largest:
            largest = max(sample.input_ids)
            where = f"data_configs[{sample.data_config_index}] sample {sample.sample_index}"
    return check_prompt_ids(largest, where, vocab_size)


def _vocabulary(tokenizer: Any, generation: EffectiveGeneration, vocab_size: int | None) -> tuple[None, str]:
    from gencache.generation.teacher import check_vocabulary

    if vocab_size is None:
        return None, "not checked: config.json records no vocab_size"
    return None, check_vocabulary(tokenizer, vocab_size, generation.kwargs)


def _context(samples: SampleSet, max_new_tokens: int, max_positions: int | None) -> tuple[None, str]:
    longest, where = 0, "-"
    for summary in samples.summaries:
        if summary.prompt_tokens and summary.prompt_tokens[2] > longest:
            longest, where = summary.prompt_tokens[2], f"data_configs[{summary.index}]"
    if max_positions is None:
        return None, "not checked: the teacher's config.json records no maximum positions"
    return None, check_context(longest, where, max_new_tokens, max_positions)


def _budget(targets: list[Target], generation: EffectiveGeneration) -> tuple[dict[Path, int], str]:
    from gencache.artifact.header import header_capacity

    capacities = {
        target.output_dir: header_capacity(len(target.keys), generation.num_return_sequences, generation.max_new_tokens)
        for target in targets
    }
    largest = max(capacities.values(), default=0)
    return capacities, f"{largest:,} bytes reserved for the largest artifact"


class TeacherChecks:
    """Phase 2 for one run (see the module docstring): what phase 1 found (``facts``: the valid config, the shard,
    the device) and the :class:`~gencache.run.findings.Runner` whose report gets each check's line. :meth:`run`
    makes the checks in order; each is a method that takes what the checks before it produced."""

    def __init__(self, runner: Runner, facts: InputFacts) -> None:
        self.runner, self.facts = runner, facts
        self.config, self.model, self.device = facts.config, facts.config.model, facts.device

    def run(self) -> RunInputs | None:
        """Make every check; the run's complete inputs, or None when a check failed or was skipped (its line and
        problem are in the report) or every output is already published (nothing to publish with)."""
        from gencache.generation.teacher import vocab_size_of
        from gencache.run.findings import RunInputs

        run, found = self.runner, self.runner.result
        run.step(kinds.TORCH_DEVICE, self._device)
        tokenizer = run.step(kinds.TOKENIZER, self._tokenizer)
        generation = run.step(kinds.GENERATION, self._generation, tokenizer)
        engine = run.step(kinds.ENGINE, lambda effective: self._engine(effective, tokenizer), generation)
        teacher = run.step(kinds.TEACHER_CONFIG, self._teacher_config)
        run.step(kinds.ATTENTION, self._attention)
        run.step(kinds.TEACHER_WEIGHTS, self._weights)
        vocab_size = vocab_size_of(teacher) if teacher is not None else None
        run.step(kinds.VOCABULARY, lambda effective: _vocabulary(tokenizer, effective, vocab_size), generation)
        samples = run.step(kinds.SAMPLES, self._samples, tokenizer)
        if tokenizer is None:
            found.not_computed.append("prompt renderings, unique keys and prompt token counts (no tokenizer)")
        if samples is None or generation is None:
            for kind in (kinds.CONTEXT_LENGTH, kinds.HEADER_BUDGET):
                run.skip(kind, "not computed: needs the samples and generation config")
            found.not_computed += ["the context-length check", "the header budget"]
            return None
        self._sample_checks(samples, generation, teacher, vocab_size)
        if found.problems or engine is None or self.facts.rename_mode is None:
            return None
        return RunInputs(self.device, tokenizer, generation, engine, samples, found.capacity, self.facts.rename_mode)

    def _sample_checks(
        self, samples: SampleSet, generation: EffectiveGeneration, teacher: Any, vocab_size: int | None
    ) -> None:
        """What derives from the built samples: each target's keys, the ``--shards`` count (when phase 1 could not
        count the keys), the context length, the prompt ids, the paged cache and the header budget."""
        from gencache.config.engines import ContinuousOptions
        from gencache.run.input_checks import shard_count_step
        from gencache.run.sharding import with_keys

        run, found = self.runner, self.runner.result
        found.samples, found.sample_counts = samples, [s.samples for s in samples.summaries]
        found.targets = with_keys(found.targets, samples)
        if self.facts.keys is None:
            shard_count_step(run, len(samples.unique), self.facts.shard)
        max_positions = max_positions_of(teacher) if teacher is not None else None
        run.step(kinds.CONTEXT_LENGTH, lambda: _context(samples, generation.max_new_tokens, max_positions))
        if vocab_size is not None:
            run.step(kinds.PROMPT_IDS, lambda: (None, _largest_prompt_id(samples, vocab_size)))
        options = self.config.engine_options
        if isinstance(options, ContinuousOptions) and options.kv_cache_memory_gib is not None:
            run.step(
                kinds.PAGED_CACHE,
                lambda described: (None, check_paged_cache(self.config, samples, generation, described)),
                teacher,
            )
        found.capacity = run.step(kinds.HEADER_BUDGET, lambda: _budget(found.targets, generation)) or {}

    def _device(self) -> tuple[None, str]:
        return None, check_device(self.device)

    def _tokenizer(self) -> tuple[Any, str]:
        from gencache.generation.teacher import load_tokenizer

        model = self.model
        loaded = load_tokenizer(model.effective_tokenizer_path, revision=model.revision)
        return loaded, f"{type(loaded).__name__}, pad id {loaded.pad_token_id}, eos id {loaded.eos_token_id}"

    def _generation(self, tokenizer: Any) -> tuple[EffectiveGeneration, str]:
        from gencache.generation.effective import resolve_generation

        model = self.model
        effective = resolve_generation(
            model.generation_kwargs, model_path=model.model_path, revision=model.revision, tokenizer=tokenizer
        )
        return effective, (
            f"max_new_tokens {effective.max_new_tokens}, {effective.num_return_sequences} sequence(s) per prompt"
        )

    def _engine(self, generation: EffectiveGeneration, tokenizer: Any) -> tuple[Engine, str]:
        from gencache.run.engine_build import build_engine

        built = build_engine(self.config, generation=generation, tokenizer=tokenizer, device=self.device)
        return built, self.config.engine

    def _teacher_config(self) -> tuple[Any, str]:
        teacher = read_teacher_config(self.model.model_path, self.model.revision)
        positions = max_positions_of(teacher)
        return teacher, f"{positions} positions" if positions else "config.json records no maximum positions"

    def _attention(self) -> tuple[None, str]:
        from gencache.generation.teacher import check_attn_implementation

        return None, check_attn_implementation(self.model.attn_implementation, self.device)

    def _weights(self) -> tuple[None, str]:
        from gencache.generation.teacher import check_teacher_weights

        return None, check_teacher_weights(self.model.model_path)

    def _samples(self, tokenizer: Any) -> tuple[SampleSet, str]:
        from gencache.data.samples import DuplicatePromptWarning, build_samples

        with warnings.catch_warnings():  # reported by the caller, from samples.conflicting_prompts
            warnings.simplefilter("ignore", DuplicatePromptWarning)
            built = build_samples(self.config, tokenizer=tokenizer)
        return built, f"{len(built)} samples, {len(built.unique)} unique keys, {built.duplicates} duplicates"
