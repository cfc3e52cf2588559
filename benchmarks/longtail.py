"""The long-tail generation workload and the engine runs measured on it (used by ``bench_generation.py``).

Answers of real distillation runs finish at very different steps. :func:`choose_eos` picks EOS ids from the model's
own greedy outputs (generated without EOS) so that the answers finish early with a long tail: median about 20% of
``max_new_tokens`` and about 10% of the answers at the limit. Every engine then generates the same prompts with that
EOS list and is measured by what it spent: decode slots (one sequence row in one forward), kept tokens, rows per
forward, prompt padding, wall time and CPU time.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

from gencache.config.engines import ContinuousOptions
from gencache.generation.effective import EffectiveGeneration
from gencache.generation.engines import Engine, EngineContext, GeneratedEntry, PrefixStats, create_engine
from gencache.generation.engines.transformers import plan_batches

KeyedPrompt = tuple[str, list[int]]


def engine_on(name: str, model: Any, tokenizer: Any, generation: EffectiveGeneration, **context: Any) -> Engine:
    """The engine ``name`` with ``model`` as its loaded teacher."""
    device = str(model.device)
    engine = create_engine(name, EngineContext(generation, tokenizer, "benchmark", "float32", device, **context))
    engine.model = model
    return engine


@dataclass(frozen=True)
class EosChoice:
    """EOS ids and the answer lengths they give on the model's free greedy outputs."""

    eos: tuple[int, ...]
    lengths: tuple[int, ...]
    max_new_tokens: int

    @property
    def median_fraction(self) -> float:
        return statistics.median(self.lengths) / self.max_new_tokens

    @property
    def at_limit_fraction(self) -> float:
        return sum(length >= self.max_new_tokens for length in self.lengths) / len(self.lengths)


def _lengths(firsts: Sequence[dict[int, int]], eos: set[int], limit: int) -> list[int]:
    return [min([first[t] + 1 for t in eos if t in first] + [limit]) for first in firsts]


def choose_eos(
    free_outputs: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    median: float = 0.2,
    at_limit: float = 0.1,
    candidates: int = 60,
) -> EosChoice:
    """EOS ids that bring (median answer / max_new_tokens, share of answers at the limit) closest to (``median``,
    ``at_limit``) on ``free_outputs`` (greedy outputs generated without EOS; an answer ends at its first EOS id).

    Multi-start greedy over the ``candidates`` tokens that occur in the most outputs: from each of them (and from no
    token), keep adding the token that lowers the distance most, while it does; the best set wins."""
    firsts: list[dict[int, int]] = []
    for output in free_outputs:
        first: dict[int, int] = {}
        for position, token in enumerate(output[:max_new_tokens]):
            first.setdefault(int(token), position)
        firsts.append(first)
    counts: dict[int, int] = {}
    for first in firsts:
        for token in first:
            counts[token] = counts.get(token, 0) + 1
    pool = [token for token, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:candidates]]

    def loss(eos: frozenset[int]) -> float:
        lengths = _lengths(firsts, set(eos), max_new_tokens)
        med = statistics.median(lengths) / max_new_tokens
        limit = sum(length >= max_new_tokens for length in lengths) / len(lengths)
        return abs(med - median) / median + abs(limit - at_limit) / at_limit

    def grow(start: frozenset[int]) -> tuple[float, frozenset[int]]:
        chosen, best = start, loss(start)
        while True:
            scored = [(loss(chosen | {token}), token) for token in pool if token not in chosen]
            if not scored:
                return best, chosen
            score, token = min(scored)
            if score >= best:
                return best, chosen
            chosen, best = chosen | {token}, score

    starts = [frozenset[int](), *(frozenset([token]) for token in pool)]
    _, eos = min((grow(start) for start in starts), key=lambda result: (result[0], sorted(result[1])))
    lengths = _lengths(firsts, set(eos), max_new_tokens)
    return EosChoice(tuple(sorted(eos)), tuple(lengths), max_new_tokens)


def one_by_one(
    model: Any, generation: EffectiveGeneration, prompts: Sequence[KeyedPrompt], tokenizer: Any = None
) -> dict[str, list[int]]:
    """A plain ``model.generate`` loop, one prompt at a time (no padding): the exactness reference (transformers'
    own EOS and stop-string criteria; ``tokenizer`` is needed with stop strings)."""
    import torch

    device = model.device
    config = copy.deepcopy(generation.config)
    outputs: dict[str, list[int]] = {}
    with torch.inference_mode():
        for key, ids in prompts:
            input_ids = torch.tensor([ids], device=device)
            out = model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                generation_config=config,
                tokenizer=tokenizer if generation.stop_strings else None,
            )
            outputs[key] = out[0, input_ids.shape[1] :].tolist()
    return outputs


@dataclass
class EngineStats:
    """What an engine spent: forward passes, decode slots (one sequence row in one forward), kept tokens, prompt cells
    (padding included) and cancelled requests. Slot efficiency is kept tokens over slots."""

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


def padding_stats(lengths: Sequence[int], batch_size: int) -> dict[str, Any]:
    """Prompt padding of the static engine's planned batches: pad cells over all prompt cells (the padding waste)."""
    total = padded = 0
    for batch in plan_batches(lengths, batch_size):
        width = max(lengths[index] for index in batch)
        total += width * len(batch)
        padded += sum(width - lengths[index] for index in batch)
    return {"prompt_cells": total, "pad_cells": padded, "pad_fraction": (padded / total) if total else 0.0}


@contextlib.contextmanager
def counting(model: Any, stats: EngineStats, *, cancel: bool = True) -> Iterator[None]:
    """Count the model's forwards and the sequence rows each one packs (a static batch's rows, or the sequences the
    continuous manager packs), and the requests the continuous manager cancels; ``cancel=False`` cancels none (a
    request that completed a stop string runs on to its EOS or limit: what cancelling saves)."""
    from transformers.generation.continuous_batching import ContinuousBatchingManager

    forward, cancel_request = model.forward, ContinuousBatchingManager.cancel_request

    def counted(*args: Any, **kwargs: Any) -> Any:
        packed, ids = kwargs.get("cu_seq_lens_q"), kwargs.get("input_ids")
        stats.forwards += 1
        stats.slots += int(packed.numel()) - 1 if packed is not None else int(ids.shape[0]) if ids is not None else 1
        return forward(*args, **kwargs)

    def cancelled(manager: Any, request_id: str) -> None:
        if cancel:
            stats.cancelled += 1
            cancel_request(manager, request_id)

    with (
        mock.patch.object(model, "forward", counted),
        mock.patch.object(ContinuousBatchingManager, "cancel_request", cancelled),
    ):
        yield


@dataclass(frozen=True)
class EngineRun:
    """One engine at one concurrency on the workload."""

    engine: str
    concurrency: int
    stats: EngineStats | None
    kept_tokens: int
    seconds: float
    cpu_seconds: float
    outputs: dict[str, list[int]]
    peak_gib: float | None = None
    prefix: PrefixStats | None = None

    @property
    def tokens_per_second(self) -> float:
        return self.kept_tokens / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_cpu_second(self) -> float:
        return self.kept_tokens / self.cpu_seconds if self.cpu_seconds else 0.0


def _measure(
    engine: str, concurrency: int, model: Any, run: Callable[[], Any], stats: EngineStats, *, cuda: bool, cancel: bool
) -> EngineRun:
    import torch

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    wall, cpu = time.perf_counter(), time.process_time()
    with counting(model, stats, cancel=cancel):
        entries: list[GeneratedEntry] = list(run())
    if cuda:
        torch.cuda.synchronize()
    seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
    outputs = {entry.key: entry.sequences[0].tolist() for entry in entries}
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    stats.kept_tokens = sum(entry.num_tokens for entry in entries)
    return EngineRun(engine, concurrency, stats, stats.kept_tokens, seconds, cpu_seconds, outputs, peak)


def run_static(
    model: Any,
    tokenizer: Any,
    generation: EffectiveGeneration,
    prompts: Sequence[KeyedPrompt],
    batch: int,
    *,
    cuda: bool = False,
) -> EngineRun:
    """The ``transformers`` engine at ``gen_batch_size`` = ``batch``."""
    padding = padding_stats([len(ids) for _, ids in prompts], batch)
    stats = EngineStats(prompt_cells=padding["prompt_cells"], pad_cells=padding["pad_cells"])
    return _measure(
        "transformers",
        batch,
        model,
        lambda: engine_on("transformers", model, tokenizer, generation, batch_size=batch).entries(list(prompts)),
        stats,
        cuda=cuda,
        cancel=True,
    )


def run_continuous(
    model: Any,
    tokenizer: Any,
    generation: EffectiveGeneration,
    prompts: Sequence[KeyedPrompt],
    concurrency: int,
    *,
    cuda: bool = False,
    cancel: bool = True,
) -> EngineRun:
    """The ``transformers-continuous`` engine at ``max_concurrent_sequences`` = ``concurrency`` (``cancel=False``:
    requests that completed a stop string are not cancelled, to measure what cancelling saves), with its
    prefix-sharing statistics."""
    options = ContinuousOptions(max_concurrent_sequences=concurrency)
    engine = engine_on("transformers-continuous", model, tokenizer, generation, options=options)
    stats = EngineStats(prompt_cells=sum(len(ids) for _, ids in prompts) * generation.num_return_sequences)
    run = _measure(
        "transformers-continuous" if cancel else "transformers-continuous, no cancel",
        concurrency,
        model,
        lambda: engine.entries(list(prompts)),
        stats,
        cuda=cuda,
        cancel=cancel,
    )
    return dataclasses.replace(run, prefix=engine.prefix)


def choose_stop_string(tokenizer: Any, free_outputs: Sequence[Sequence[int]], choice: EosChoice) -> str:
    """A stop string from the answers themselves: the decoded text of the token that most answers contain before
    their EOS cut (at least two characters, ASCII, not an EOS id)."""
    counts: dict[int, int] = {}
    for output, length in zip(free_outputs, choice.lengths, strict=True):
        for token in set(output[: max(0, length - 1)]):
            counts[int(token)] = counts.get(int(token), 0) + 1
    for token, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        text = tokenizer.decode([token], skip_special_tokens=False).strip()
        if token not in choice.eos and len(text) >= 2 and text.isascii():
            return str(text)
    raise ValueError("no stop string candidate in the answers")


def table(runs: Sequence[EngineRun], reference: dict[str, list[int]] | None, *, gpu: bool = False) -> list[str]:
    """Markdown rows: one per engine run."""
    head = (
        "| engine | concurrency | useful tokens | decode slots | slot efficiency | rows per forward | prompt padding "
        "| seconds | tokens/s | tokens per CPU-second | equal to one-by-one |"
    )
    rule = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    if gpu:
        head += " peak GiB |"
        rule += "---:|"
    rows = [head, rule]
    for run in runs:
        stats = run.stats
        if stats is not None and stats.slots:
            slots = f"{stats.slots}"
            efficiency = f"{stats.slot_efficiency:.3f}"
            per_forward = f"{stats.rows_per_forward:.1f}"
        else:
            slots = efficiency = per_forward = "not exposed"
        padding = (
            f"{100 * stats.pad_cells / stats.prompt_cells:.1f}%" if stats is not None and stats.prompt_cells else "0.0%"
        )
        if reference is None:
            equal = "not checked (bfloat16)"
        else:
            same = sum(run.outputs.get(key) == tokens for key, tokens in reference.items())
            equal = "all" if same == len(reference) else f"{same} of {len(reference)}"
        row = (
            f"| {run.engine} | {run.concurrency} | {run.kept_tokens} | {slots} | {efficiency} | {per_forward} | "
            f"{padding} | {run.seconds:.2f} | {run.tokens_per_second:.1f} | {run.tokens_per_cpu_second:.1f} | {equal} |"
        )
        if gpu:
            row += f" {run.peak_gib:.1f} |" if run.peak_gib is not None else " - |"
        rows.append(row)
    return rows


__all__ = [
    "EngineRun",
    "EngineStats",
    "EosChoice",
    "choose_eos",
    "choose_stop_string",
    "one_by_one",
    "padding_stats",
    "run_continuous",
    "run_static",
    "table",
]
