"""What per-sequence sampling and ``gencache audit`` cost, as ratios measured in one run on this machine.

1. Per-sequence sampling against the previous shared-generator sampling (transformers' own multinomial draw from
   torch's global generator, which the engines used before), on the long-tail workload of ``bench_generation.py``
   with sampling on, for the static and the continuous engine: tokens per second of each, alternated and repeated,
   best of the repeats. Target: per-sequence sampling no more than 1.1x slower.
2. Audit cost per key against the run's own per-key generation time: a run generates a cache through
   ``gencache.generate`` (its generation time measured by a progress callback, weights loading excluded), then
   ``gencache.audit(--all)`` regenerates every key one prompt at a time (its report's time, loading excluded).

Usage: ``uv run python benchmarks/bench_audit.py [--quick]``; ``benchmarks/run_all.py`` calls ``main(argv)``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import gencache
from gencache.generation.effective import resolve_generation
from gencache.generation.engines import transformers as engines
from gencache.generation.tiny import build_tiny_teacher, builtin_corpus

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_generation import _quiet_transformers, longtail_workload
from longtail import run_continuous, run_static


@contextlib.contextmanager
def shared_generator() -> Iterator[None]:
    """The engines as they sampled before per-sequence streams: no gencache sampler, so transformers draws every
    row from torch's global generator (seeded once)."""
    import torch

    processor, hook = engines._last_processor, engines.hook_batch_processor
    engines._last_processor = lambda model, streams, width: contextlib.nullcontext()
    engines.hook_batch_processor = lambda manager, shared, streams: hook(manager, shared, None)
    torch.manual_seed(0)
    try:
        yield
    finally:
        engines._last_processor = processor
        engines.hook_batch_processor = hook


def sampling_cost(*, quick: bool) -> list[str]:
    count, low, high, max_new_tokens = (24, 32, 96, 24) if quick else (96, 32, 384, 96)
    repeats = 1 if quick else 2
    with tempfile.TemporaryDirectory(prefix="gencache-bench-") as tmp:
        teacher, tokenizer, model, prompts, _free, choice = longtail_workload(
            Path(tmp), count, low, high, max_new_tokens
        )
        generation = resolve_generation(
            {
                "max_new_tokens": max_new_tokens,
                "eos_token_id": list(choice.eos),
                "do_sample": True,
                "temperature": 1.0,
                "top_p": 0.95,
                "top_k": 0,
            },
            model_path=str(teacher),
            revision=None,
            tokenizer=tokenizer,
        )
        run_static(model, tokenizer, generation, prompts[:4], 2)  # warm-up
        rows = []
        for engine, size, runner in (("transformers", 16, run_static), ("transformers-continuous", 32, run_continuous)):
            ours, theirs = [], []
            for _ in range(repeats):  # alternated, so drift on a shared machine hits both
                ours.append(runner(model, tokenizer, generation, prompts, size))
                with shared_generator():
                    theirs.append(runner(model, tokenizer, generation, prompts, size))
            best_ours, best_theirs = max(ours, key=_slot_rate), max(theirs, key=_slot_rate)
            ratio = _slot_rate(best_theirs) / _slot_rate(best_ours)
            rows.append(
                f"| {engine} | {size} | {_slot_rate(best_theirs):,.0f} | {_slot_rate(best_ours):,.0f} | "
                f"{ratio:.3f}x | {'yes' if ratio <= 1.1 else 'no'} | {best_theirs.kept_tokens:,} / "
                f"{best_ours.kept_tokens:,} |"
            )
    lengths = [len(ids) for _, ids in prompts]
    return [
        "### Per-sequence sampling against the shared generator",
        "",
        f"{len(prompts)} prompts of {min(lengths)}-{max(lengths)} tokens, max_new_tokens {max_new_tokens}, the long-"
        f"tail EOS ids {list(choice.eos)}, sampled (temperature 1.0, top_p 0.95); tiny teacher, float32, CPU; best "
        f"of {repeats} alternated runs each. The two samplers draw different answers, whose lengths (and so the "
        "static engine's batch lengths) differ by chance, so the cost is measured per unit of work: decode slots "
        "(one sequence row in one forward) per CPU-second of the process (one torch thread; wall time on a "
        "shared 2-CPU machine is noise). Slowdown = shared-generator slots/CPU-s over per-sequence slots/CPU-s.",
        "",
        "| engine | batch / concurrency | shared generator slots/CPU-s | per-sequence slots/CPU-s | slowdown | "
        "<= 1.1x | kept tokens (shared / per-sequence) |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]


def _slot_rate(run: Any) -> float:
    """Decode slots per CPU-second of one engine run."""
    return float(run.stats.slots / run.cpu_seconds) if run.stats is not None and run.cpu_seconds else 0.0


class _Timer:
    """A progress that keeps the wall and CPU time between its start (after the weights load) and its last
    advance: what generating (or regenerating) the keys cost."""

    def __init__(self) -> None:
        self.started: tuple[float, float] | None = None
        self.ended: tuple[float, float] | None = None

    def start(self, total_samples: int) -> None:
        self.started = (time.perf_counter(), time.process_time())

    def advance(self, samples: int, tokens: int) -> None:
        self.ended = (time.perf_counter(), time.process_time())

    def close(self) -> None:
        self.ended = self.ended or (time.perf_counter(), time.process_time())

    def cpu_seconds(self) -> float:
        assert self.started is not None and self.ended is not None
        return self.ended[1] - self.started[1]


def _qa_rows(count: int) -> list[dict[str, Any]]:
    words = " ".join(builtin_corpus()).split()
    return [
        {
            "id": f"q{i}",
            "question": " ".join(words[i % len(words) : i % len(words) + 6]) + "?",
            "passages": [" ".join(words[(3 * i) % len(words) : (3 * i) % len(words) + 20])],
            "answer": words[i % 7],
        }
        for i in range(count)
    ]


def audit_cost(*, quick: bool) -> list[str]:
    count, max_new_tokens = (12, 16) if quick else (48, 48)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gencache-bench-") as tmp:
        work = Path(tmp)
        teacher = build_tiny_teacher(work / "tiny-teacher", seed=0)
        data = work / "qa.jsonl"
        data.write_text("".join(json.dumps(row) + "\n" for row in _qa_rows(count)), encoding="utf-8")
        for label, batch, generation in (
            ("greedy", 8, {"max_new_tokens": max_new_tokens}),
            (
                "sampled, 2 sequences",
                8,
                {"max_new_tokens": max_new_tokens, "do_sample": True, "num_return_sequences": 2},
            ),
        ):
            config = work / f"config-{len(rows)}.json"
            config.write_text(
                json.dumps(
                    {
                        "model": {
                            "model_path": str(teacher),
                            "dtype": "float32",
                            "device": "cpu",
                            "generation_kwargs": generation,
                        },
                        "data_configs": [
                            {
                                "dataset_name": "table",
                                "num_samples": count,
                                "num_data_strs": 0,
                                "num_shots": 0,
                                "subset": "default",
                                "split": "train",
                                "seed": 0,
                                "source": str(data),
                                "data_kwargs": {
                                    "query": "question",
                                    "documents": "passages",
                                    "answer": "answer",
                                    "id": "id",
                                },
                            }
                        ],
                        "gen_batch_size": batch,
                        "seed": 0,
                        "output_dir": str(work / f"out-{len(rows)}"),
                    }
                ),
                encoding="utf-8",
            )
            run_timer, audit_timer = _Timer(), _Timer()
            artifact = gencache.generate(config, progress=lambda total, timer=run_timer: timer)
            report = gencache.audit(artifact, all_keys=True, progress=lambda total, timer=audit_timer: timer)
            run_per_key = run_timer.cpu_seconds() / count
            audit_per_key = audit_timer.cpu_seconds() / len(report.keys)
            rows.append(
                f"| {label} | {count} | {batch} | {1000 * run_per_key:.1f} | {1000 * audit_per_key:.1f} | "
                f"{audit_per_key / run_per_key:.2f}x | {report.equal}/{len(report.keys)} |"
            )
    return [
        "### Audit cost per key",
        "",
        f"A `table` run of {count} samples, max_new_tokens {max_new_tokens}, tiny teacher, float32, CPU, engine "
        "`transformers`; the run's generation CPU time per key (one torch thread; weights loading "
        "excluded) against that of `gencache.audit` of every key (one prompt per call, loading excluded).",
        "",
        "| run | keys | gen_batch_size | run CPU ms/key | audit CPU ms/key | audit / run | audited equal |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "An audit regenerates one prompt at a time, so on a GPU, where a batch costs about what one prompt does, its "
        "cost per key is close to the run's cost per batch; audit a seeded sample (`--samples`, 32 by default) "
        "rather than every key of a large cache.",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    parser.add_argument("--part", choices=("all", "sampling", "audit"), default="all", help="what to measure")
    args = parser.parse_args(list(argv) if argv is not None else None)
    import torch

    torch.set_num_threads(1)  # CPU time of one thread: no spin-waiting threads on a shared machine
    _quiet_transformers()
    print(
        "\n".join(
            [
                "## Per-sequence sampling and audit (tiny teacher, CPU)",
                "",
                f"Command: `uv run python benchmarks/bench_audit.py{' --quick' if args.quick else ''}"
                f"{'' if args.part == 'all' else f' --part {args.part}'}` (run "
                f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}).",
                "",
                *(sampling_cost(quick=args.quick) if args.part in ("all", "sampling") else []),
                "",
                *(audit_cost(quick=args.quick) if args.part in ("all", "audit") else []),
            ]
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
