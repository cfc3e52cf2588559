"""What the engines that run a transformers model in this process share: loading the teacher once, refusing to
generate before it is loaded, and the runtime facts recorded in ``resolved_config.json``."""

from __future__ import annotations

from typing import Any

from gencache.core.errors import GenerationError
from gencache.generation import teacher
from gencache.generation.determinism import determinism_facts
from gencache.generation.effective import check_engine
from gencache.generation.engines import EngineContext, EngineStats
from gencache.generation.sampling import SAMPLING_RULE


class TransformersEngine:
    """Base of the ``transformers`` and ``transformers-continuous`` engines; subclasses set ``name``."""

    name: str

    def __init__(self, context: EngineContext) -> None:
        check_engine(self.name, context.generation)
        self.context = context
        self.model: Any = None
        self.stats = EngineStats()

    def import_libraries(self) -> None:
        teacher.import_model_code(self.context.model_path, revision=self.context.revision)

    def load_weights(self) -> None:
        ctx = self.context
        self.model = teacher.load_teacher(
            ctx.model_path,
            dtype=ctx.dtype,
            device=ctx.device,
            revision=ctx.revision,
            attn_implementation=ctx.attn_implementation,
        )

    def loaded_model(self) -> Any:
        """The teacher, or a :class:`GenerationError` when :meth:`load_weights` was not called."""
        if self.model is None:
            raise GenerationError("The teacher is not loaded; call load_weights() first.")
        return self.model

    def runtime(self) -> dict[str, Any]:
        info = teacher.runtime_info(self.model)
        return {**info, "determinism": self.determinism(info.get("attn_implementation"))}

    def determinism(self, attention: str | None) -> dict[str, Any]:
        """``runtime.determinism``: no batch-invariant kernels, no prefix cache, one device group; chunked prefill
        when ``prefill_chunk_size`` is set (subclasses add their own)."""
        return determinism_facts(
            device=self.context.device,
            batch_invariant=False,
            prefix_caching=False,
            chunked_prefill=self.context.generation.kwargs.get("prefill_chunk_size") is not None,
            tensor_parallel_size=1,
            attention_backend=attention,
        )

    def sampling(self) -> dict[str, Any] | str:
        """``engine.sampling``: the per-sequence rule when sampling, else greedy."""
        if not self.context.generation.do_sample:
            return "greedy (no random draws)"
        return dict(SAMPLING_RULE)

    def commit_hash(self) -> str | None:
        value = getattr(getattr(self.model, "config", None), "_commit_hash", None)
        return value if isinstance(value, str) else None


__all__ = ["TransformersEngine"]
