"""Scaling out on Ray: dynamic dispatch against a fixed split, measured on 2 local workers and simulated at 64, and
opening a base of many shards.

``python benchmarks/bench_ray.py [--quick]`` prints one markdown section on stdout (progress on stderr).

1. **Two local workers, the long-tail workload** (tiny teacher, CPU): chat prompts whose answers end with a long
   tail (EOS ids picked by :func:`longtail.choose_eos` from the teacher's own free outputs: median answer about 20%
   of ``max_new_tokens``, about 10% at the limit), cut into 16 shards. The same shards run on the same local Ray
   cluster, three times each, alternating, on fresh workers: through ``generate --ray`` (Ray's actor pool hands each
   shard to whichever worker is free) and as a fixed split (worker ``w`` is given shards ``w, w + 2, ...`` up
   front, as a launcher's ranks are).
   Idle fraction = idle worker-seconds over worker-seconds, each worker counted from its first shard's start (its
   teacher loaded; the load is recorded apart) to the last shard's end, from each shard's recorded start and
   finish.
2. **A simulation at 64 workers** from the measured per-sample costs (seconds per generated token on this
   machine, times the answer lengths of the long-tail run, resampled): makespan over the ideal (total work /
   workers) for a fixed split and for dynamic dispatch at 64, 512 and 4,096 shards, with every worker equal, with
   one worker 30% slower, and with one worker lost halfway. A lost worker's shard goes back to the queue under
   dynamic dispatch; under a fixed split its unfinished shards are rerun by one process once the others are done
   (a launcher's rank that died leaves a hole until the same command is run again).
3. **Opening a shard base**: ``open_caches`` over the same entries published as 2 shards and as 1,024 shards.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import ROOT, load_average, load_note, log, section_head

WORKERS = 2
SHARDS = 16
REPEATS = 3
SIM_WORKERS = 64
SIM_SHARDS = (64, 512, 4096)
SIM_SAMPLES = 262_144
OPEN_ENTRIES = 65_536


def _chat_rows(path: Path, count: int) -> None:
    """``count`` one-turn conversations of 20-120 words of the tiny teacher's corpus."""
    from gencache.generation.tiny import builtin_corpus

    words = " ".join(builtin_corpus()).split()
    rng = random.Random(7)
    rows = []
    for i in range(count):
        length = rng.randint(20, 120)
        start = rng.randrange(0, len(words) - length)
        rows.append({"id": i, "messages": [{"role": "user", "content": " ".join(words[start : start + length])}]})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def _config(root: Path, teacher: Path, rows: Path, count: int, generation: dict[str, Any], name: str) -> Path:
    config = {
        "model": {"model_path": str(teacher), "dtype": "float32", "device": "cpu", "generation_kwargs": generation},
        "data_configs": [
            {
                "dataset_name": "chat",
                "num_samples": count,
                "num_data_strs": 0,
                "num_shots": 0,
                "subset": "default",
                "seed": 5,
                "source": str(rows),
                "template": "qwen_3_chat",
                "data_kwargs": {"shuffle": False},
            }
        ],
        "gen_batch_size": 4,
        "output_dir": str(root / f"{name}-out"),
    }
    path = root / f"{name}.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def _stored_lengths(base: Path) -> list[list[int]]:
    """Every stored answer's token ids, over the artifact or shard base ``base``."""
    from gencache.artifact.mixture import open_caches

    cache = open_caches(base)
    return [list(map(int, cache.get_arrays(key).sequences[0])) for key in cache]


def _idle_fraction(spans: Sequence[tuple[str, float, float]]) -> tuple[float, float]:
    """(idle worker-seconds over worker-seconds, makespan) of (worker, start, finish) spans: each worker counts from
    its first shard's start (its teacher loaded) to the run's last finish."""
    end = max(f for _, _, f in spans)
    ready: dict[str, float] = {}
    for worker, start, _ in spans:
        ready[worker] = min(start, ready.get(worker, start))
    busy = sum(f - s for _, s, f in spans)
    window = sum(end - start for start in ready.values())
    return 1 - busy / window, end - min(ready.values())


def _fixed_split(ray: Any, config: Path, shards: int, output: Path) -> list[tuple[str, float, float]]:
    """The same shards given up front: worker ``w`` takes ``w, w + WORKERS, ...`` in order."""
    from gencache.run.plan import Overrides
    from gencache.run.ray import RunTally, ShardWorker, WorkerSpec

    name = f"bench-fixed-split-{output.name}"
    tally = ray.remote(RunTally).options(name=name, num_cpus=0).remote()
    overrides = Overrides(output_dir=str(output))
    spec = WorkerSpec(str(config), overrides, shards, os.getcwd(), {}, {"bench": "fixed split"}, name)
    actors = [ray.remote(ShardWorker).options(num_cpus=1).remote(spec, {}) for _ in range(WORKERS)]
    calls = [actors[index % WORKERS].publish.remote(index) for index in range(shards)]
    outcomes = ray.get(calls)
    for actor in [*actors, tally]:
        ray.kill(actor)
    failed = [o.error for o in outcomes if o.status != "published"]
    if failed:
        raise SystemExit(f"fixed split failed: {failed[0]}")
    return [(o.worker, o.started_at + o.load_seconds, o.finished_at) for o in outcomes]


def _dynamic(config: Path, shards: int, output: Path) -> tuple[list[tuple[str, float, float]], int]:
    """``generate --ray``'s spans (worker, start after its load, finish) and generated tokens."""
    from gencache.run.plan import Overrides
    from gencache.run.ray import RayOptions, generate_on_ray

    options = RayOptions("local", shards, WORKERS)
    run = generate_on_ray(config, options, overrides=Overrides(output_dir=str(output)))
    spans = [(r.worker or "", r.started_at + r.load_seconds, r.finished_at) for r in run.records]
    return spans, sum(r.tokens for r in run.records)


def measure_two_workers(root: Path, quick: bool) -> dict[str, Any]:
    """Part 1 (see the module docstring): each dispatch :data:`REPEATS` times, alternating, on fresh workers."""
    import ray
    from longtail import choose_eos

    from gencache.generation.tiny import build_tiny_teacher
    from gencache.run.api import generate

    count, max_new = (48, 32) if quick else (320, 128)
    teacher = build_tiny_teacher(root / "teacher", seed=0)
    rows = root / "chats.jsonl"
    _chat_rows(rows, count)
    log(f"free greedy outputs of {count} prompts (no EOS) to choose the long tail's EOS ids")
    free = _config(root, teacher, rows, count, {"max_new_tokens": max_new, "eos_token_id": []}, "free")
    generate(free)
    eos = choose_eos(_stored_lengths(root / "free-out"), max_new)
    generation = {"max_new_tokens": max_new, "eos_token_id": list(eos.eos)}
    config = _config(root, teacher, rows, count, generation, "longtail")
    dynamic: list[tuple[float, float]] = []
    fixed: list[tuple[float, float]] = []
    busy = tokens = 0.0
    ray.init(address="local", num_cpus=WORKERS + 1, include_dashboard=False, log_to_driver=False)
    try:
        for repeat in range(1 if quick else REPEATS):
            log(f"dynamic dispatch ({repeat + 1}): {SHARDS} shards on {WORKERS} workers")
            spans, generated = _dynamic(config, SHARDS, root / f"dynamic-{repeat}")
            dynamic.append(_idle_fraction(spans))
            busy, tokens = busy + sum(f - s for _, s, f in spans), tokens + generated
            log(f"fixed split ({repeat + 1}): the same {SHARDS} shards, {SHARDS // WORKERS} per worker up front")
            fixed.append(_idle_fraction(_fixed_split(ray, config, SHARDS, root / f"fixed-{repeat}")))
    finally:
        ray.shutdown()
    lengths = [len(answer) for answer in _stored_lengths(root / "dynamic-0")]
    reference = generate(config, shards=SHARDS, output_dir=root / "one-process")
    equal = _digests(root / "dynamic-0") == _digests(reference) == _digests(root / "fixed-0")
    return {
        "count": count,
        "max_new": max_new,
        "eos": eos,
        "dynamic": dynamic,
        "fixed": fixed,
        "seconds_per_token": busy / max(tokens, 1),
        "lengths": lengths,
        "equal": equal,
    }


def _digests(base: Path) -> dict[str, str]:
    from gencache.artifact.shards import expand_output

    found: dict[str, str] = {}
    for directory in expand_output(base)[0]:
        manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
        found |= {key: entry["content_digest"] for key, entry in manifest["entries"].items()}
    return found


def _median(runs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The median idle fraction and the median makespan of several runs."""
    return statistics.median(idle for idle, _ in runs), statistics.median(span for _, span in runs)


# -- the simulation ------------------------------------------------------------------------------------------
def shard_costs(sample_costs: Sequence[float], shards: int, seed: int) -> list[float]:
    """Each shard's work when the samples are split by key (uniformly at random, as key-mod is)."""
    rng = random.Random(seed)
    costs = [0.0] * shards
    for cost in sample_costs:
        costs[rng.randrange(shards)] += cost
    return costs


def dynamic_makespan(costs: Sequence[float], speed: Sequence[float], lost: int | None, lost_at: float) -> float:
    """Shards in order, each to the first free worker; worker ``lost`` disappears at ``lost_at`` and the shard it
    held goes back to the queue."""
    queue = list(range(len(costs)))
    queue.reverse()
    free = [(0.0, worker) for worker in range(len(speed))]
    heapq.heapify(free)
    finish = 0.0
    while queue:
        now, worker = heapq.heappop(free)
        shard = queue.pop()
        done = now + costs[shard] * speed[worker]
        if worker == lost and done > lost_at:
            queue.append(shard)  # the worker died with it: another worker generates it again
            continue
        finish = max(finish, done)
        heapq.heappush(free, (done, worker))
    return finish


def fixed_makespan(costs: Sequence[float], speed: Sequence[float], lost: int | None, lost_at: float) -> float:
    """Worker ``w`` owns shards ``w, w + W, ...``; a lost worker's unfinished shards are run again by one process
    after the others are done."""
    workers = len(speed)
    ends = []
    rerun = 0.0
    for worker in range(workers):
        clock = 0.0
        for shard in range(worker, len(costs), workers):
            done = clock + costs[shard] * speed[worker]
            if worker == lost and done > lost_at:
                rerun += sum(costs[s] for s in range(shard, len(costs), workers))
                clock = lost_at
                break
            clock = done
        ends.append(clock)
    return max(ends) + rerun


def simulate(sample_costs: Sequence[float]) -> list[tuple[str, int, float, float]]:
    """(scenario, shards, fixed split / ideal, dynamic / ideal) for each scenario and shard count."""
    rows = []
    total = sum(sample_costs)
    scenarios = {
        "equal workers": ([1.0] * SIM_WORKERS, None),
        "one worker 30% slower": ([1.3] + [1.0] * (SIM_WORKERS - 1), None),
        "one worker lost halfway": ([1.0] * SIM_WORKERS, 1),
    }
    for name, (speed, lost) in scenarios.items():
        capacity = sum(1 / s for s in speed) if lost is None else SIM_WORKERS - 0.5
        ideal = total / capacity
        for shards in SIM_SHARDS:
            costs = shard_costs(sample_costs, shards, seed=shards)
            fixed = fixed_makespan(costs, speed, lost, ideal / 2)
            dynamic = dynamic_makespan(costs, speed, lost, ideal / 2)
            rows.append((name, shards, fixed / ideal, dynamic / ideal))
    return rows


# -- opening a shard base ------------------------------------------------------------------------------------
def write_base(base: Path, entries: int, shards: int) -> None:
    from gencache.artifact.header import header_capacity
    from gencache.artifact.manifest import make_provenance
    from gencache.artifact.names import make_shard_info, shard_dir_name, shard_of
    from gencache.artifact.writer import ArtifactBuild

    provenance = make_provenance(
        "bench/teacher", "bench/teacher", "bfloat16", {"padding_side": "left", "pad_token_id": 0, "eos_token_id": 1}
    )
    keys = [hashlib.sha256(f"ray-{i}".encode()).hexdigest() for i in range(entries)]
    owned: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        owned.setdefault(shard_of(key, shards), []).append(i)
    for shard in range(shards):
        mine = owned.get(shard, [])
        target = Path(shard_dir_name(str(base), shard, shards))
        with ArtifactBuild(target, provenance=provenance, header_capacity=header_capacity(len(mine), 1, 16)) as build:
            for i in mine:
                build.writer.add(keys[i], [(i % 50_000).to_bytes(8, "little") * 16], [f"answer {i}"], ["eos"])
            build.writer.finalize(
                resolved_config={"bench": "ray"}, summary={"shard": make_shard_info(shard, shards, "a" * 64)}
            )
            build.publish()


def open_seconds(base: Path, repeats: int) -> float:
    """Median seconds of ``open_caches(base)`` and one lookup, in fresh interpreters (no warm index)."""
    import subprocess

    code = (
        "import time, sys\nstarted = time.perf_counter()\nfrom gencache.artifact.mixture import open_caches\n"
        f"cache = open_caches({str(base)!r})\nkey = next(iter(cache.keys()))\ncache.get_arrays(key)\n"
        "print(time.perf_counter() - started)"
    )
    env = os.environ | {"PYTHONPATH": str(ROOT / "src")}
    times = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    args = parser.parse_args(argv)
    before = load_average()
    root = Path(tempfile.mkdtemp(prefix="gencache-bench-ray-"))
    try:
        two = measure_two_workers(root, args.quick)
        costs = [two["seconds_per_token"] * max(length, 1) for length in two["lengths"]]
        rng = random.Random(3)
        sample_costs = [rng.choice(costs) for _ in range(SIM_SAMPLES // (16 if args.quick else 1))]
        log("simulating 64 workers")
        simulated = simulate(sample_costs)
        entries = OPEN_ENTRIES // (8 if args.quick else 1)
        log(f"opening {entries} entries as 2 and as 1,024 shards")
        write_base(root / "two", entries, 2)
        write_base(root / "many", entries, 1024)
        open_two = open_seconds(root / "two", 3)
        open_many = open_seconds(root / "many", 3)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    after = load_average()
    lines = section_head(
        "Scaling out on Ray (2 local workers, and 64 simulated)", "bench_ray.py", " --quick" if args.quick else ""
    )
    dynamic_idle, dynamic_span = _median(two["dynamic"])
    fixed_idle, fixed_span = _median(two["fixed"])
    eos = two["eos"]
    lines += [
        f"Two CPU workers on one local Ray cluster, the tiny teacher, {two['count']} chat prompts, max_new_tokens "
        f"{two['max_new']} with a long tail (median answer {eos.median_fraction:.0%} of it, "
        f"{eos.at_limit_fraction:.0%} at the limit), {SHARDS} shards:",
        "",
        f"| dispatch | idle worker-seconds / worker-seconds (median of {len(two['fixed'])}) | makespan (s) | "
        "each run's idle fraction |",
        "|---|---|---|---|",
        f"| fixed split (shards `w, w + 2, ...` per worker) | {fixed_idle:.1%} | {fixed_span:.2f} | "
        f"{', '.join(f'{idle:.0%}' for idle, _ in two['fixed'])} |",
        f"| dynamic (`--ray`: Ray's actor pool) | {dynamic_idle:.1%} | {dynamic_span:.2f} | "
        f"{', '.join(f'{idle:.0%}' for idle, _ in two['dynamic'])} |",
        "",
        f"The dynamic run's shard base, the fixed split's and `--shards {SHARDS}` in one process hold the same "
        f"content digests key for key: {'yes' if two['equal'] else 'NO'}.",
        "",
        f"Simulated: {SIM_WORKERS} workers, {len(sample_costs):,} samples whose costs are this machine's "
        f"{two['seconds_per_token'] * 1000:.2f} ms per generated token times the long-tail run's answer lengths "
        "(resampled); makespan over the ideal (total work / workers):",
        "",
        "| scenario | shards | fixed split / ideal | dynamic / ideal |",
        "|---|---|---|---|",
    ]
    lines += [f"| {name} | {shards:,} | {fixed:.3f} | {dynamic:.3f} |" for name, shards, fixed, dynamic in simulated]
    lines += [
        "",
        f"Opening a shard base (`open_caches` and one lookup, a fresh process, median of 3): {entries:,} entries in "
        f"2 shards {open_two * 1000:.0f} ms, in 1,024 shards {open_many * 1000:.0f} ms "
        f"(**{open_many / open_two:.2f}x**).",
        "",
        f"Notes: {load_note(before, after)}. A lost worker is modelled as its shard going back to the queue (Ray "
        "creates the worker again where the cluster has room); under the fixed split its unfinished shards are run "
        "again by one process after the others end. The 2-worker figures leave out each worker's checks and teacher "
        "load (recorded apart in its first shard) and include Ray's dispatch of each call.",
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
