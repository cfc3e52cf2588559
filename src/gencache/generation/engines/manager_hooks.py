"""Hooks gencache sets on one transformers continuous-batching manager (never on the class): counting forwards and
rows, counting prefix matches of its paged cache, and replacing its sampling step by per-sequence draws."""

from __future__ import annotations

from typing import Any

from gencache.core.errors import GenerationError
from gencache.generation.engines import EngineStats
from gencache.generation.engines.prefix import PrefixStats
from gencache.generation.sampling import draw_tokens, uniforms

__all__ = ["ForwardCounter", "RequestSampler", "hook_batch_processor", "sampling_supported"]


class ForwardCounter:
    """Counts the manager's forwards and the sequences (rows) each packs, by wrapping ``model.forward``."""

    def __init__(self, model: Any, stats: EngineStats) -> None:
        self.model = model
        self.stats = stats
        self.own_forward: Any = None

    def __enter__(self) -> ForwardCounter:
        self.own_forward = self.model.__dict__.get("forward")  # an instance-level forward (accelerate hooks) stays
        original = self.model.forward
        stats = self.stats

        def counted(*args: Any, **kwargs: Any) -> Any:
            cu_seq_lens = kwargs.get("cu_seq_lens_q")
            stats.forwards += 1
            stats.slots += int(cu_seq_lens.numel()) - 1 if cu_seq_lens is not None else 1
            return original(*args, **kwargs)

        self.model.forward = counted
        return self

    def __exit__(self, *exc: object) -> None:
        if self.own_forward is None:
            self.model.__dict__.pop("forward", None)
        else:
            self.model.forward = self.own_forward


class RequestSampler:
    """The manager's sampling step, drawing each row from its request's own stream: row ``i`` of the scores is the
    ``i``-th request of the batch that predicts a token (transformers' ``logits_indices`` order), at answer position
    ``generated_len()``."""

    def __init__(self, runner: Any, streams: dict[str, int]) -> None:
        self.runner = runner
        self.streams = streams

    def __call__(self, scores: Any, output_ids: Any) -> None:
        states = [f.state for f in self.runner.inputs_and_outputs.requests_in_batch if f.has_new_token]
        # a request of the manager's own (a warm-up) has no stream of the run: its tokens are never kept
        draws = uniforms([self.streams.get(s.request_id, 0) for s in states], [s.generated_len() for s in states])
        tokens = draw_tokens(scores[0, : len(states)], draws)
        output_ids[0, : len(states)].copy_(tokens)


def sampling_supported() -> bool:
    """Whether this transformers' continuous-batching manager has the sampling step :class:`RequestSampler`
    replaces (``ModelRunner._sample(scores, output_ids)`` over ``inputs_and_outputs.requests_in_batch``)."""
    try:
        from transformers.generation.continuous_batching import model_runner
    except ImportError:
        return False
    runner = getattr(model_runner, "ModelRunner", None)
    return callable(getattr(runner, "_sample", None))


def hook_batch_processor(manager: Any, shared: PrefixStats, streams: dict[str, int] | None) -> None:
    """Wrap the creation of this manager's batch processor (it happens in the manager's thread): count every prefix
    match of its paged cache (tokens a request took from blocks an earlier request completed) in
    ``shared.cached_tokens`` and, when ``streams`` is given (sampling), replace its sampling step by
    :class:`RequestSampler`. torch's global generator, which building the processor seeds, is restored after it."""
    create = getattr(manager, "_create_batch_processor", None)
    if not callable(create):
        if streams is not None:
            raise GenerationError("This transformers' continuous-batching manager cannot sample per sequence.")
        shared.source = "not measured (this transformers' manager has no batch-processor factory)"
        return
    shared.source = "transformers' block sharing (PagedAttentionCache.search_prefix_match)"

    def create_hooked() -> Any:
        import torch

        # transformers seeds torch's global generator (torch.manual_seed) when it builds the processor; the draws
        # gencache keeps come from the sequences' own streams, so the generator is handed back as it was
        initialized = bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]
        cuda = list(range(torch.cuda.device_count())) if initialized else []
        with torch.random.fork_rng(devices=cuda):
            processor = create()
        cache = processor.cache
        if "search_prefix_match" not in vars(cache):  # a reused processor keeps its counted search
            search = cache.search_prefix_match

            def search_counted(request_id: str, prompt_ids: list[int]) -> int:
                matched = int(search(request_id, prompt_ids))
                shared.cached_tokens += matched
                return matched

            cache.search_prefix_match = search_counted
        if streams is not None:
            runner = processor.model_runner
            runner._sample = RequestSampler(runner, streams)
        return processor

    manager._create_batch_processor = create_hooked
