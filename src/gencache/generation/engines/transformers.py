"""The transformers engines: ``transformers`` (the default, and the only one that honours every setting gencache
accepts) and ``transformers-continuous``.

``transformers`` runs static batches through ``model.generate``, longest prompts first, left padded. gencache's
stopping criterion records where every row finished and the answer is cut there, never by token value, so fill
tokens never enter an answer. When sampling, each row's token comes from the row's own stream, so an answer does not
depend on ``gen_batch_size`` or the other prompts.

``transformers-continuous`` drives transformers' continuous-batching manager over a paged KV cache sized from the
workload: every sequence is one request, requests join the running batch as others leave it, and finished requests
stream straight to the writer. Stop strings, which the manager does not know, are matched on streamed outputs and
the request is cancelled as soon as one completes; sampling draws every row from its request's own stream.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.metadata
import math
from collections.abc import Generator, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psutil  # type: ignore[import-untyped]

from gencache.config.engines import ContinuousOptions
from gencache.config.names import DTYPE_BYTES, ENGINE_CONTINUOUS, ENGINE_STATIC
from gencache.core.errors import ConfigError, GenerationError, first_line
from gencache.generation import teacher
from gencache.generation.engines import (
    FINISH_LENGTH,
    GIB,
    Engine,
    EngineContext,
    FinishScanner,
    GeneratedEntry,
    PrefixStats,
    Prompts,
    entry_of,
    kv_bytes_per_token,
    prefix_floor,
)
from gencache.generation.sampling import draw_tokens, sampling_seed, uniforms


def plan_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Prompt indices by length, longest first (ties keep their input order), in chunks of ``batch_size``."""
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


class FinishRecorder:
    """A stopping criterion of ``generate`` that records, per row of a static batch, the step at which it finished
    and why. It has no ``eos_token_id`` attribute, which transformers would read as "an EOS criterion"."""

    def __init__(self, scanner: FinishScanner, *, prompt_width: int, rows: int) -> None:
        self.scanner = scanner
        self.prompt_width = prompt_width
        self.tokens: list[list[int]] = [[] for _ in range(rows)]
        self.finished: list[tuple[int, str] | None] = [None] * rows

    def __call__(self, input_ids: Any, scores: Any = None, **kwargs: Any) -> Any:
        import torch

        start = self.prompt_width + len(self.tokens[0])
        for row, new in enumerate(input_ids[:, start:].tolist()):
            tokens = self.tokens[row]
            tokens.extend(new)
            if self.finished[row] is None:
                self.finished[row] = self.scanner.scan(tokens, len(tokens) - len(new))
        return torch.tensor([found is not None for found in self.finished], device=input_ids.device)


@contextlib.contextmanager
def _last_processor(model: Any, streams: Sequence[int], prompt_width: int) -> Iterator[None]:
    """While generating, a sampler is appended to the logits processors transformers builds (after its warpers,
    which a ``logits_processor`` argument would precede): it draws each row's token from the row's own stream (one
    seed per row in ``streams``) and hands transformers scores that leave no choice (0 at that token, ``-inf``
    elsewhere), so transformers' own draw from its global generator returns that token."""
    import torch

    build = model._get_logits_processor

    def sampler(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        draws = uniforms(streams, [int(input_ids.shape[1]) - prompt_width] * len(streams))
        chosen = torch.full_like(scores, float("-inf"))
        return chosen.scatter_(1, draw_tokens(scores, draws).unsqueeze(-1).to(scores.device), 0.0)

    def with_sampler(*args: Any, **kwargs: Any) -> Any:
        processors = build(*args, **kwargs)
        processors.append(sampler)
        return processors

    model._get_logits_processor = with_sampler
    try:
        yield
    finally:
        del model._get_logits_processor


class TransformersEngine(Engine):
    name = ENGINE_STATIC

    def entries(self, prompts: Prompts) -> Generator[GeneratedEntry, None, None]:
        """One entry per prompt, in batch order.

        The effective config is the model's generation config too during each call, so transformers cannot re-fill
        dropped settings from the teacher. transformers still draws from torch's global generator when sampling, so
        the generator is restored after each call."""
        import torch
        from torch.nn.utils.rnn import pad_sequence

        ctx, model, scanner = self.context, self.model, self.scanner
        tokenizer, generation, device, batch_size = ctx.tokenizer, ctx.generation, model.device, ctx.batch_size
        per_prompt = generation.num_return_sequences
        pad_id = int(generation.config.pad_token_id)  # the tokenizer's unless the user set one
        beams = generation.kwargs.get("num_beams", 1) > 1
        config = copy.deepcopy(generation.config)
        config.stop_strings = None  # the finish rule matches them (beam search takes none)
        cuda = [device] if device.type == "cuda" else []
        for batch_index, batch in enumerate(plan_batches([len(ids) for _, ids in prompts], batch_size)):
            width = max(len(prompts[index][1]) for index in batch)
            described = (
                f"batch {batch_index} ({len(batch)} prompts x {per_prompt} sequences, prompt width {width} tokens, "
                f"max_new_tokens {generation.max_new_tokens})"
            )
            rows = [torch.tensor(prompts[index][1], dtype=torch.long) for index in batch]
            input_ids = pad_sequence(rows, batch_first=True, padding_value=pad_id, padding_side="left")
            attention_mask = pad_sequence([torch.ones_like(r) for r in rows], batch_first=True, padding_side="left")
            # beam outputs are cut at their first EOS; sampling beam search is refused before the weights load
            recorder = None if beams else FinishRecorder(scanner, prompt_width=width, rows=len(batch) * per_prompt)
            sampling: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
            if generation.do_sample and not beams:
                streams = [sampling_seed(ctx.seed, prompts[index][0], s) for index in batch for s in range(per_prompt)]
                sampling = _last_processor(model, streams, width)
            previous, model.generation_config = model.generation_config, config
            try:
                with torch.inference_mode(), sampling, torch.random.fork_rng(devices=cuda):
                    sequences = model.generate(  # a tensor: return_dict_in_generate is refused
                        input_ids=input_ids.to(device),
                        attention_mask=attention_mask.to(device),
                        generation_config=config,
                        stopping_criteria=teacher.hf().StoppingCriteriaList([recorder]) if recorder else None,
                    )
            except torch.OutOfMemoryError as exc:
                del input_ids, attention_mask
                torch.cuda.empty_cache()
                raise GenerationError(
                    f"Out of memory generating {described} on {device}; lower gen_batch_size (now {batch_size})."
                ) from exc
            except Exception as exc:
                raise GenerationError(f"Generation failed in {described}: {first_line(exc)}") from exc
            finally:
                model.generation_config = previous
            generated = sequences[:, width:]
            del sequences, input_ids, attention_mask
            found = recorder.finished if recorder else [scanner.scan(row) for row in generated.tolist()]
            # a row that never finished (generation ended for another reason) keeps everything, by length
            cuts = [hit or (generated.shape[1], FINISH_LENGTH) for hit in found]
            for position, index in enumerate(batch):
                answers = range(position * per_prompt, (position + 1) * per_prompt)
                yield entry_of(
                    prompts[index][0], [(generated[r, : cuts[r][0]].tolist(), cuts[r][1]) for r in answers], tokenizer
                )
            del generated

    def batching(self) -> dict[str, Any]:
        return {
            "order": "length-sorted-longest-first",
            "sort": "stable, by prompt token count, descending",
            "batch_size": self.context.batch_size,
            "unit": "unique samples",
            "padding_side": "left",
            "attention_mask": "explicit",
            "answer_cut": "recorded finish step per row (eos inclusive, stop_string inclusive, length)",
        }


# -- transformers-continuous -------------------------------------------------------------------------------------
#: The oldest transformers whose continuous-batching manager this engine is tested with (5.20 and 5.24); vLLM's
#: CPU environment has an older one.
MIN_TRANSFORMERS = (5, 20)


def supported_transformers() -> bool:
    """Whether the installed transformers has the continuous-batching manager this engine drives."""
    major, minor = importlib.metadata.version("transformers").split(".")[:2]
    return (int(major), int(minor)) >= MIN_TRANSFORMERS


@dataclass(frozen=True)
class CacheSizing:
    """The paged cache of one run (``resolved_config.json``'s ``engine.paged_cache``)."""

    concurrency: int
    page_size: int
    num_blocks: int
    max_batch_tokens: int
    kv_bytes: int
    mask_bytes: int
    budget_bytes: int
    budget_source: str
    longest_prompt: int = 0


def size_paged_cache(
    prompt_lengths: Sequence[int],
    max_new_tokens: int,
    sequences: int,
    options: ContinuousOptions,
    *,
    model_config: Any,
    dtype_bytes: int,
    budget: tuple[int, str],
) -> CacheSizing:
    """Blocks for ``concurrency`` worst-case requests (the longest prompt plus ``max_new_tokens``), where
    ``concurrency`` is ``max_concurrent_sequences`` lowered to the run's sequence count and to what the memory
    budget holds (the KV blocks plus the attention mask of one forward)."""
    budget_bytes, source = budget
    longest = max(prompt_lengths, default=1)
    page = options.page_size
    blocks_per_request = math.ceil((longest + max_new_tokens + 1) / page)
    per_token = kv_bytes_per_token(model_config, dtype_bytes)

    def need(concurrency: int) -> tuple[int, int, int, int]:
        blocks = concurrency * blocks_per_request + 1
        batch_tokens = options.max_batch_tokens or max(concurrency, min(longest, 4096) + concurrency)
        kv = blocks * page * per_token
        mask = batch_tokens * (blocks * page + batch_tokens) * dtype_bytes
        return blocks, batch_tokens, kv, mask

    concurrency = max(1, min(options.max_concurrent_sequences, sequences))
    blocks, batch_tokens, kv, mask = need(concurrency)
    while kv + mask > budget_bytes and concurrency > 1:
        concurrency = min(concurrency - 1, max(1, concurrency * budget_bytes // (kv + mask)))
        blocks, batch_tokens, kv, mask = need(concurrency)
    if kv + mask > budget_bytes:
        raise GenerationError(
            f"engine {ENGINE_CONTINUOUS}: one request of the longest prompt ({longest} tokens) plus max_new_tokens "
            f"({max_new_tokens}) needs {(kv + mask) / GIB:.2f} GiB of paged KV cache, more than {source} "
            f"({budget_bytes / GIB:.2f} GiB); raise engine_options.kv_cache_memory_gib or shorten the prompts."
        )
    return CacheSizing(concurrency, page, blocks, batch_tokens, kv, mask, budget_bytes, source, longest)


# -- hooks on one manager (never on its class) --------------------------------------------------------------------
def hook_batch_processor(manager: Any, shared: PrefixStats, streams: dict[str, int] | None) -> None:
    """Wrap the creation of this manager's batch processor (in the manager's thread): count every prefix match of
    its paged cache in ``shared`` and, when sampling (``streams``), draw each row from its request's own stream."""
    create = manager._create_batch_processor
    shared.cached_from = "transformers' block sharing (PagedAttentionCache.search_prefix_match)"

    def create_hooked() -> Any:
        import torch

        # transformers seeds torch's global generator (torch.manual_seed) when it builds the processor; the draws
        # gencache keeps come from the sequences' own streams, so the generator is handed back as it was
        initialized = bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]
        with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if initialized else []):
            processor = create()
        cache = processor.cache
        search = cache.search_prefix_match

        def search_counted(request_id: str, prompt_ids: list[int]) -> int:
            matched = int(search(request_id, prompt_ids))
            shared.cached_prompt_tokens += matched
            return matched

        cache.search_prefix_match = search_counted
        if streams is not None:
            runner = processor.model_runner

            def sample(scores: Any, output_ids: Any) -> None:
                # row i of the scores is the i-th request of the batch that predicts a token (transformers'
                # logits_indices order); a request of the manager's own (a warm-up) has no stream of the run: its
                # tokens are never kept
                states = [f.state for f in runner.inputs_and_outputs.requests_in_batch if f.has_new_token]
                draws = uniforms([streams.get(s.request_id, 0) for s in states], [s.generated_len() for s in states])
                output_ids[0, : len(states)].copy_(draw_tokens(scores[0, : len(states)], draws))

            runner._sample = sample
        return processor

    manager._create_batch_processor = create_hooked


class TransformersContinuousEngine(Engine):
    name = ENGINE_CONTINUOUS

    def __init__(self, context: EngineContext) -> None:
        super().__init__(context)
        if not supported_transformers():
            raise ConfigError(
                f'engine "{self.name}" needs transformers {".".join(map(str, MIN_TRANSFORMERS))} or later; this '
                f'environment has {importlib.metadata.version("transformers")}. Use engine "transformers" here.'
            )
        self.sizing: CacheSizing | None = None

    def entries(self, prompts: Prompts) -> Generator[GeneratedEntry, None, None]:
        """One entry per prompt through transformers' continuous-batching manager, in finish order, recording the
        chosen :class:`CacheSizing` and the run's :class:`PrefixStats`. The manager's thread is stopped when the
        iterator ends, fails or is closed."""
        import torch

        if not prompts:
            return
        ctx, model, options, scanner = self.context, self.model, self.options, self.scanner
        tokenizer, generation = ctx.tokenizer, ctx.generation
        per_prompt = generation.num_return_sequences
        eos = list(generation.eos_token_ids) or -1
        if options.kv_cache_memory_gib is not None:
            budget = int(options.kv_cache_memory_gib * GIB), "engine_options.kv_cache_memory_gib"
        elif model.device.type == "cuda":
            budget = int(0.9 * torch.cuda.mem_get_info(model.device)[0]), "90% of free CUDA memory"
        else:
            budget = psutil.virtual_memory().available // 4, "a quarter of available host memory"
        self.sizing = chosen = size_paged_cache(
            [len(ids) for _, ids in prompts],
            generation.max_new_tokens,
            len(prompts) * per_prompt,
            options,
            model_config=model.config,
            dtype_bytes=DTYPE_BYTES[str(model.dtype).removeprefix("torch.")],
            budget=budget,
        )
        self.prefix = shared = prefix_floor((ids for _, ids in prompts for _ in range(per_prompt)), chosen.page_size)
        config = copy.deepcopy(generation.config)
        config.stop_strings = None  # gencache matches stop strings itself (the manager would ignore them)
        config.num_return_sequences = 1  # every sequence is its own request
        config.eos_token_id = eos
        previous_config = model.generation_config  # the manager may replace it; the model is handed back unchanged
        manager = model.init_continuous_batching(  # workload-sized; no CUDA graphs, attention switch or CPU offload
            generation_config=config,
            continuous_batching_config=teacher.hf().generation.configuration_utils.ContinuousBatchingConfig(
                page_size=chosen.page_size,
                num_blocks=chosen.num_blocks,
                max_batch_tokens=chosen.max_batch_tokens,
                max_requests_per_batch=chosen.concurrency,
                max_blocks_per_request=0,
                allow_block_sharing=options.prefix_sharing,
                use_cuda_graph=False,
                use_async_batching=False,
                safety_margin=0.0,
                seed=ctx.seed,
                auto_switch_to_flash=False,
            ),
        )
        streams = {
            f"{i}:{s}": sampling_seed(ctx.seed, key, s) for i, (key, _) in enumerate(prompts) for s in range(per_prompt)
        }
        hook_batch_processor(manager, shared, streams if generation.do_sample else None)
        scanned = dict.fromkeys(streams, 0)
        answers: dict[int, dict[int, tuple[list[int], str]]] = {}
        finished_cleanly = False
        try:
            manager.start()
            for request in streams:
                index = int(request.split(":")[0])
                manager.add_request(
                    list(prompts[index][1]),
                    request_id=request,
                    max_new_tokens=generation.max_new_tokens,
                    streaming=bool(generation.stop_strings),
                    eos_token_id=eos,
                )
            while scanned:
                output = manager.get_result(timeout=0.05)
                if output is None:
                    fatal = manager.background_thread_status.fatal_error
                    if fatal is not None or not manager.is_running():
                        reason = "no error reported" if fatal is None else first_line(fatal)
                        raise GenerationError(f"Continuous batching stopped: {reason}")
                    continue
                request = output.request_id
                if request not in scanned:  # a streamed output generated before the cancellation took effect
                    continue
                if output.error is not None:
                    raise GenerationError(f"Continuous batching failed request {request}: {first_line(output.error)}")
                tokens = [int(token) for token in output.generated_tokens]
                hit = scanner.scan(tokens, scanned[request])
                scanned[request] = len(tokens)
                if hit is None:  # the manager finishes a request only at an EOS id or max_new_tokens
                    continue
                del scanned[request]
                if not output.is_finished():
                    manager.cancel_request(request)  # a stop string completed: free its slot now
                index, sequence = map(int, request.split(":"))
                done = answers.setdefault(index, {})
                done[sequence] = (tokens[: hit[0]], hit[1])
                if len(done) == per_prompt:
                    del answers[index]
                    yield entry_of(prompts[index][0], [done[s] for s in range(per_prompt)], tokenizer)
            finished_cleanly = True
        except torch.OutOfMemoryError as exc:
            raise GenerationError(
                f"Out of memory in continuous batching (concurrency {chosen.concurrency}); lower "
                "engine_options.max_concurrent_sequences or kv_cache_memory_gib."
            ) from exc
        finally:  # a hard stop unless finished cleanly; a failed stop never hides the error already in flight
            try:
                manager.stop(block=True, timeout=60.0, hard_stop=not finished_cleanly)
            except Exception:
                if finished_cleanly:
                    raise
            finally:
                manager.destroy()
                model.generation_config = previous_config

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        facts["stop_strings"] = "matched on streamed outputs; the request is cancelled when one completes"
        if self.sizing:
            facts["paged_cache"] = asdict(self.sizing)
        return facts

    def runtime(self) -> dict[str, Any]:
        info, sizing = super().runtime(), self.sizing
        info["determinism"]["prefix_caching"] = self.options.prefix_sharing
        info["determinism"]["chunked_prefill"] = (
            None if sizing is None else sizing.longest_prompt > sizing.max_batch_tokens
        )
        return info

    def batching(self) -> dict[str, Any]:
        return {
            "order": "all requests submitted in input order; results in finish order",
            "unit": "one request per returned sequence",
            "concurrency": self.sizing.concurrency if self.sizing else self.options.max_concurrent_sequences,
            "padding": "none (sequences are packed)",
            "answer_cut": "gencache's finish rule on each request's tokens (eos inclusive, stop_string inclusive, "
            "length)",
            **({"prefix_cache": self.prefix.to_json()} if self.prefix else {}),
        }
