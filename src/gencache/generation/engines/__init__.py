"""The engine seam: what every generation engine takes and yields, and the registry the pipeline picks from.

An engine is created from an :class:`EngineContext` before any weights load, refusing whatever it cannot honour
(:func:`create_engine`). The writer, the keys and the format do not depend on the engine. Importing this package
imports neither torch nor an engine module.
"""

from __future__ import annotations

import contextlib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Generator, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gencache.artifact.names import FINISH_REASONS
from gencache.config.engines import ENGINE_OPTIONS, EngineOptions
from gencache.config.names import ENGINE_CONTINUOUS, ENGINE_STATIC, ENGINE_VLLM
from gencache.generation import teacher
from gencache.generation.effective import check_engine
from gencache.generation.sampling import SAMPLING_RULE

if TYPE_CHECKING:
    import torch

    from gencache.core.progress import Progress
    from gencache.generation.effective import EffectiveGeneration

Prompts = list[tuple[str, list[int]]]


@dataclass(frozen=True)
class GeneratedEntry:
    """The teacher's answers for one unique prompt, each cut at its finish step: 1-D int64 CPU tensors, their texts
    (``tokenizer.decode(tokens, skip_special_tokens=False)``) and finish reasons."""

    key: str
    sequences: tuple[torch.Tensor, ...]
    texts: tuple[str, ...]
    finish_reasons: tuple[str, ...]

    @property
    def num_tokens(self) -> int:
        return sum(int(seq.numel()) for seq in self.sequences)


def entry_of(key: str, answers: Sequence[tuple[list[int], str]], tokenizer: Any) -> GeneratedEntry:
    """The entry of ``key`` from its answers ``(tokens, finish reason)``, in sequence order."""
    import torch

    return GeneratedEntry(
        key=key,
        sequences=tuple(torch.tensor(tokens, dtype=torch.int64) for tokens, _ in answers),
        texts=tuple(tokenizer.decode(tokens, skip_special_tokens=False) for tokens, _ in answers),
        finish_reasons=tuple(reason for _, reason in answers),
    )


FINISH_EOS, FINISH_STOP_STRING, FINISH_LENGTH = FINISH_REASONS


class FinishScanner:
    """The finish rule, shared by every engine: for each generated position, in order, a sequence finishes at the
    first of

    1. ``eos``: the token is in the EOS list (the EOS token is kept);
    2. ``stop_string``: the decoded tail of the answer (``skip_special_tokens=False``) now contains a stop string
       (the token that completed it is kept; the answer is cut there even when the engine generated more);
    3. ``length``: ``max_new_tokens`` tokens exist.

    The same rule runs in every engine (on a static batch as a stopping criterion), so a stop string completes at
    the same token in each. Beam search cuts each hypothesis after its first EOS token, where beam search makes it
    final. A stop string is looked for in the decoded last ``window`` tokens: every token carries at least one
    byte, and the margin covers a partial UTF-8 character or a decoder-stripped leading space at the start of the
    window."""

    def __init__(self, generation: EffectiveGeneration, tokenizer: Any) -> None:
        self.eos = frozenset(generation.eos_token_ids)
        self.stop_strings = generation.stop_strings
        self.tokenizer = tokenizer
        self.window = max((len(s.encode("utf-8")) for s in self.stop_strings), default=0) + 4
        self.max_new_tokens = generation.max_new_tokens

    def scan(self, tokens: Sequence[int], start: int = 0) -> tuple[int, str] | None:
        """``(tokens to keep, finish reason)`` at the first finish from position ``start`` on, else None (open)."""
        for position in range(start, len(tokens)):
            step = position + 1
            if int(tokens[position]) in self.eos:
                return step, FINISH_EOS
            if self.stop_strings:
                tail = list(tokens[max(0, step - self.window) : step])
                text = self.tokenizer.decode(tail, skip_special_tokens=False)
                if any(stop in text for stop in self.stop_strings):
                    return step, FINISH_STOP_STRING
            if step >= self.max_new_tokens:
                return step, FINISH_LENGTH
        return None


@dataclass(frozen=True)
class EngineContext:
    """Everything an engine needs, fixed before any weights load."""

    generation: EffectiveGeneration
    tokenizer: Any
    model_path: str
    dtype: str
    device: str
    revision: str | None = None
    attn_implementation: str | None = None
    batch_size: int = 1
    seed: int = 0
    options: EngineOptions | None = None  # a config's engine_options (None: the engine's defaults)


class Engine(ABC):
    """A generation engine: created before any weights load, then :meth:`load_weights`, then :meth:`generate`.
    What an engine does not override is the transformers engines' (the teacher loaded by transformers)."""

    name: str
    sampling_rule = SAMPLING_RULE
    prefix: PrefixStats | None = None  # an engine with a prefix cache: what its last run cached
    loads_with_prompts = False
    """True when :meth:`load_weights` leaves the model to :meth:`generate`, which builds it from the first prompts
    (vLLM on a CPU sizes its cache from them); the run then says the teacher loaded once it has."""

    def __init__(self, context: EngineContext) -> None:
        check_engine(self.name, context.generation)
        self.context = context
        self.options: Any = context.options or ENGINE_OPTIONS[self.name]()
        self.scanner = FinishScanner(context.generation, context.tokenizer)
        self.model: Any = None

    def generate(
        self, prompts: Iterable[tuple[str, Sequence[int]]], *, progress: Progress | None = None
    ) -> Generator[GeneratedEntry, None, None]:
        """Yield one entry per prompt, in any order; ``progress`` is started with the prompt count (once the
        engine is ready) and advanced per entry. Close the iterator (``contextlib.closing``) when stopping early:
        engines release threads there."""
        keyed = [(key, [int(token) for token in ids]) for key, ids in prompts]
        with contextlib.closing(self.entries(keyed)) as entries:
            if progress is not None:
                progress.start(len(keyed))
            for entry in entries:
                yield entry
                if progress is not None:
                    progress.advance(1, entry.num_tokens)

    @abstractmethod
    def entries(self, prompts: Prompts) -> Generator[GeneratedEntry, None, None]:
        """The entries of ``prompts``; what runs before the generator is returned runs before the progress starts."""

    @abstractmethod
    def batching(self) -> dict[str, Any]:
        """How the engine batched the run, as ``resolved_config.json`` records it."""

    def import_libraries(self) -> None:
        """Import torch and the teacher architecture's modeling code without reading any weights, so that the load
        is timed alone. What cannot be read is left to the load to report."""
        import torch  # noqa: F401  (the first import of torch is part of what this takes)

        with contextlib.suppress(Exception):
            config = teacher.hf().AutoConfig.from_pretrained(self.context.model_path, revision=self.context.revision)
            importlib.import_module("transformers.models.auto.modeling_auto").MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]

    def load_weights(self) -> None:
        ctx = self.context
        self.model = teacher.load_teacher(
            ctx.model_path,
            dtype=ctx.dtype,
            device=ctx.device,
            revision=ctx.revision,
            attn_implementation=ctx.attn_implementation,
            generation_config=ctx.generation.config,
        )

    def describe(self) -> dict[str, Any]:
        """``resolved_config.json``'s ``engine`` section: name, effective options, version and engine facts."""
        return {
            "name": self.name,
            "options": self.options.model_dump(mode="json"),
            "version": teacher.hf().__version__,
            "sampling": dict(self.sampling_rule) if self.context.generation.do_sample else "greedy (no random draws)",
        }

    def runtime(self) -> dict[str, Any]:
        """dtype, attention, device and library versions of the loaded teacher, and its determinism facts."""
        info = teacher.runtime_info(self.model)
        info["determinism"] = teacher.determinism_facts(
            self.context.device,
            batch_invariant=False,
            prefix_caching=False,
            chunked_prefill=self.context.generation.kwargs.get("prefill_chunk_size") is not None,
            tensor_parallel_size=1,
            attention_backend=info["attn_implementation"],
        )
        return info

    def commit_hash(self) -> str | None:
        """The teacher's hub commit when it was loaded from the hub (None: vLLM's)."""
        value = getattr(getattr(self.model, "config", None), "_commit_hash", None)
        return value if isinstance(value, str) else None


def create_engine(name: str, context: EngineContext) -> Engine:
    """The engine ``name`` (one of :data:`gencache.config.names.ALL_ENGINES`) for ``context``, refusing settings it
    cannot honour and a missing optional dependency (one :class:`ConfigError` line)."""
    if name == ENGINE_VLLM:
        from gencache.generation.engines.vllm import VllmEngine

        return VllmEngine(context)
    from gencache.generation.engines.transformers import TransformersContinuousEngine, TransformersEngine

    return {ENGINE_STATIC: TransformersEngine, ENGINE_CONTINUOUS: TransformersContinuousEngine}[name](context)


# -- KV cache memory -----------------------------------------------------------------------------------------------
GIB = 2**30


def head_dim_of(model_config: Any) -> int:
    """The attention head size of a transformers model config (its text config for a multimodal model)."""
    text = model_config.get_text_config()
    return int(getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)


def kv_bytes_per_token(model_config: Any, dtype_bytes: int) -> int:
    """Key and value of every layer for one token, in bytes: layers x KV heads x head size x 2."""
    text = model_config.get_text_config()
    kv_heads = int(getattr(text, "num_key_value_heads", None) or text.num_attention_heads)
    return 2 * int(text.num_hidden_layers) * kv_heads * head_dim_of(model_config) * dtype_bytes


# -- shared prompt prefixes ---------------------------------------------------------------------------------------
def prefix_floor(prompts: Iterable[Sequence[int]], block: int, cached_from: str = "") -> PrefixStats:
    """The stats of prompts in run order, none served yet: the floor counts the tokens of each prompt beyond the
    longest whole-block prefix that an earlier prompt has, and always its last token (its logits start the answer,
    so a cache never serves it)."""
    seen: set[int] = set()
    total = floor = 0
    for ids in prompts:
        tokens = tuple(ids)
        total += len(tokens)
        chain, shared, hashes = 0, 0, []
        for start in range(0, len(tokens) - len(tokens) % block, block):
            chain = hash((chain, tokens[start : start + block]))
            hashes.append(chain)
            shared += block if shared == start and chain in seen else 0
        floor += len(tokens) - (min(shared, len(tokens) - 1) // block) * block
        seen.update(hashes)
    return PrefixStats(block, total, floor_prompt_tokens=floor, cached_from=cached_from)


@dataclass
class PrefixStats:
    """Prompt tokens of one run, those its engine served from a prefix cache, and the floor (:func:`prefix_floor`)."""

    block_size: int
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    floor_prompt_tokens: int = 0
    cached_from: str = ""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "computed_prompt_tokens": self.prompt_tokens - self.cached_prompt_tokens}
