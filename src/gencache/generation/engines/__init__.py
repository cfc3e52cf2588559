"""The engine seam: what every generation engine takes and yields, and the registry the pipeline picks from.

An engine is created from an :class:`EngineContext` (the effective generation settings, the tokenizer, the
teacher's location and the engine's validated options) *before any weights load*: creating it refuses whatever it
cannot honour (:func:`create_engine`). :meth:`Engine.load_weights` then loads the weights, and
:meth:`Engine.generate` takes the unique prompts ``(key, token ids)`` and yields one :class:`GeneratedEntry` per
prompt, in any order. The writer, the keys, the format and the provenance do not depend on the engine;
:meth:`Engine.describe` says what ``resolved_config.json`` records about it.

Importing this package imports neither torch nor an engine module; :data:`ENGINES` maps each engine name to the
function that imports its module and creates it, and :func:`create_engine` calls the one chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gencache.config.engines import EngineOptions
from gencache.config.messages import unknown_name
from gencache.config.names import ENGINE_CONTINUOUS, ENGINE_STATIC, ENGINE_VLLM
from gencache.core.errors import ConfigError, GenerationError

if TYPE_CHECKING:
    import torch

    from gencache.core.progress import Progress
    from gencache.generation.effective import EffectiveGeneration

__all__ = [
    "ENGINES",
    "Engine",
    "EngineContext",
    "EngineStats",
    "GeneratedEntry",
    "KeyedPrompt",
    "checked_prompts",
    "create_engine",
    "options_of",
]

KeyedPrompt = tuple[str, Sequence[int]]


@dataclass(frozen=True)
class GeneratedEntry:
    """The teacher's answers for one unique prompt: 1-D int64 CPU tensors, decoded texts and finish reasons.

    Each sequence is cut at its finish step; each text is ``tokenizer.decode(tokens, skip_special_tokens=False)``.
    """

    key: str
    sequences: tuple[torch.Tensor, ...]
    texts: tuple[str, ...]
    finish_reasons: tuple[str, ...]

    @property
    def num_tokens(self) -> int:
        return sum(int(seq.numel()) for seq in self.sequences)


@dataclass
class EngineStats:
    """What an engine spent: forward passes, decode slots (one sequence row in one forward), kept tokens and prompt
    cells (padding included). Slot efficiency is kept tokens over slots."""

    forwards: int = 0
    slots: int = 0
    kept_tokens: int = 0
    prompt_cells: int = 0
    pad_cells: int = 0
    cancelled: int = 0

    @property
    def slot_efficiency(self) -> float:
        return self.kept_tokens / self.slots if self.slots else 0.0

    @property
    def rows_per_forward(self) -> float:
        return self.slots / self.forwards if self.forwards else 0.0


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
    options: EngineOptions | None = None
    """The engine's validated options (a config's ``engine_options``); None: the engine's defaults."""


class Engine(Protocol):
    """A generation engine (see the module docstring for the life cycle)."""

    name: str
    stats: EngineStats

    @property
    def loads_with_prompts(self) -> bool:
        """True when :meth:`load_weights` leaves the model to :meth:`generate`, which builds it from the first
        prompts (vLLM on a CPU sizes its cache from them); the run then says the teacher loaded once it has."""

    def import_libraries(self) -> None:
        """Import what :meth:`load_weights` needs (torch, the model code, vLLM) without loading weights, so that
        the load can be timed alone."""

    def load_weights(self) -> None:
        """Load the teacher's weights (after every model-free check passed)."""

    def generate(
        self, prompts: Sequence[KeyedPrompt], *, progress: Progress | None = None
    ) -> Generator[GeneratedEntry, None, None]:
        """Yield one entry per prompt, in any order; ``progress`` is started with the prompt count and advanced per
        entry. Close the iterator (``contextlib.closing``) when stopping early: engines release threads there."""

    def describe(self) -> dict[str, Any]:
        """``resolved_config.json``'s ``engine`` section: name, effective options, version and engine facts."""

    def batching(self) -> dict[str, Any]:
        """``resolved_config.json``'s ``batching`` section (batch composition can change half-precision tokens)."""

    def runtime(self) -> dict[str, Any]:
        """dtype, attention, device and library versions of the loaded teacher."""

    def commit_hash(self) -> str | None:
        """The teacher's hub commit when it was loaded from the hub."""


def _static(context: EngineContext) -> Engine:
    from gencache.generation.engines.static import TransformersEngine

    return TransformersEngine(context)


def _continuous(context: EngineContext) -> Engine:
    from gencache.generation.engines.continuous import TransformersContinuousEngine

    return TransformersContinuousEngine(context)


def _vllm(context: EngineContext) -> Engine:
    from gencache.generation.engines.vllm import VllmEngine

    return VllmEngine(context)


#: Engine name (each of :data:`gencache.config.names.ALL_ENGINES`, in its order) -> the function that imports that
#: engine's module (only then: torch, transformers or vLLM) and creates the engine, whose constructor refuses what
#: it cannot honour.
ENGINES: dict[str, Callable[[EngineContext], Engine]] = {
    ENGINE_STATIC: _static,
    ENGINE_CONTINUOUS: _continuous,
    ENGINE_VLLM: _vllm,
}


def checked_prompts(prompts: Iterable[KeyedPrompt]) -> list[tuple[str, list[int]]]:
    """The prompts an engine was given as ``(key, token ids)`` with plain ints; a prompt without tokens is a
    :class:`GenerationError` naming its sample."""
    checked: list[tuple[str, list[int]]] = []
    for key, ids in prompts:
        token_ids = [int(token) for token in ids]
        if not token_ids:
            raise GenerationError(f"The prompt of sample {key} has no tokens.")
        checked.append((key, token_ids))
    return checked


OptionsT = TypeVar("OptionsT", bound=EngineOptions)


def options_of(context: EngineContext, model: type[OptionsT]) -> OptionsT:
    """The context's options as the engine's own options model (its defaults when None); options of another
    engine, or a plain mapping, are refused: ``gencache.config`` validates them once."""
    if context.options is None:
        return model()
    if not isinstance(context.options, model):
        raise ConfigError(
            f"engine options must be a validated {model.__name__}, not {type(context.options).__name__}; "
            "validate them with gencache.config (CacheConfig.engine_options)."
        )
    return context.options


def create_engine(name: str, context: EngineContext) -> Engine:
    """The engine ``name`` for ``context``, refusing (before any weights load) settings it cannot honour and a
    missing optional dependency, each as one :class:`ConfigError` line (exit code 2)."""
    if name not in ENGINES:
        raise ConfigError(f"engine: {unknown_name('engine', name, ENGINES)}")
    return ENGINES[name](context)
