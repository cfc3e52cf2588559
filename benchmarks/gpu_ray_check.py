"""Two ``--ray`` teacher workers sharing one GPU against ``--shards N`` in one process (run by gpu_ray_check.sh).

``python benchmarks/gpu_ray_check.py [--device cuda] [--workdir DIR]`` builds the tiny teacher, writes a config of
256 chat prompts (``max_new_tokens`` 64, greedy), starts a local Ray instance with one GPU, runs the config's 8
shards on two workers of half a GPU each (``--worker-gpus 0.5``) and the same 8 shards in one process, prints the
Ray run's summary as JSON, then whether every key's content digest is equal, and exits 1 when one is not (or when a
shard is missing). ``--device cpu`` runs the same check on CPU workers (a smoke run of the script itself).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import log
from bench_ray import _chat_rows, _config, _digests

SHARDS = 8
PROMPTS = 256


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    import ray

    from gencache.generation.tiny import build_tiny_teacher
    from gencache.run.api import generate
    from gencache.run.ray import RayOptions, generate_on_ray

    root = args.workdir or Path(tempfile.mkdtemp(prefix="gencache-gpu-ray-"))
    root.mkdir(parents=True, exist_ok=True)
    teacher = build_tiny_teacher(root / "teacher", seed=0)
    rows = root / "chats.jsonl"
    _chat_rows(rows, PROMPTS)
    config = _config(root, teacher, rows, PROMPTS, {"max_new_tokens": 64}, "check")
    document = json.loads(config.read_text(encoding="utf-8"))
    document["model"] |= {"device": args.device, "dtype": "bfloat16" if args.device == "cuda" else "float32"}
    config.write_text(json.dumps(document), encoding="utf-8")
    gpus = 1 if args.device == "cuda" else 0
    ray.init(address="local", num_cpus=4, num_gpus=gpus, include_dashboard=False, log_to_driver=False)
    try:
        started = time.monotonic()
        log(f"--ray: {SHARDS} shards on 2 workers of {'half a GPU' if gpus else 'one CPU'} each")
        result = generate_on_ray(config, RayOptions("local", SHARDS, 2, 0.5))
        log(f"--ray run: {time.monotonic() - started:.1f}s")
    finally:
        ray.shutdown()
    print(json.dumps(result.to_json(), indent=2))
    started = time.monotonic()
    reference = generate(config, shards=SHARDS, output_dir=root / "one-process")
    log(f"--shards {SHARDS} in one process: {time.monotonic() - started:.1f}s")
    ours, theirs = _digests(result.output_dir), _digests(reference)
    differing = sorted(key for key in theirs if ours.get(key) != theirs[key])
    workers = sorted({r.worker for r in result.records if r.worker})
    print(
        json.dumps(
            {
                "keys": len(theirs),
                "equal_keys": len(theirs) - len(differing),
                "digests_equal": not differing and len(ours) == len(theirs),
                "workers_used": workers,
                "published": len(result.published),
            },
            indent=2,
        )
    )
    return 0 if not differing and len(ours) == len(theirs) and len(result.published) == SHARDS else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
