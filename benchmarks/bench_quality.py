"""What ``gencache score`` and ``gencache report`` cost on a large artifact, against ``gencache export`` of the same
artifact, measured in one run on this machine.

The artifact has 100,000 entries (``--quick``: 5,000) over two ``table`` data configs of local JSON Lines files,
with a recorded run whose samples rebuild from those files (a tiny run's ``resolved_config.json``, its data configs
pointed at the large tables and its digests made again), so every command works from the artifact alone as on a
real run. The answers are a mix: the gold answer, part of it, other words, some cut at ``max_new_tokens``.

Each command is a fresh process of the installed ``gencache`` script (imports included), its output file removed
between runs; the commands are run in rounds, each once per round in turn, and each ratio is the median over the
rounds of that round's ratio against ``gencache export ARTIFACT --out FILE.jsonl --no-prompts`` (the export that
rebuilds the same samples, without a tokenizer, and reads every answer). Targets: ``score`` <= 1.5x, ``report``
<= 2x. The report's file size is given too.

Usage: ``uv run python benchmarks/bench_quality.py [--quick] [--rounds N]``; ``benchmarks/run_all.py`` calls
``main(argv)``.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import gencache_script, installed_env, load_average, load_note, log, section_head, wall

MAX_NEW_TOKENS = 48
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima")


def _table(path: Path, rows: int, offset: int) -> None:
    """A table of ``rows`` questions with their gold answers and ids."""
    rng = random.Random(offset)
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(rows):
            gold = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
            question = f"Question {offset + i}: which words does the record {i} of the table hold, in order?"
            handle.write(json.dumps({"qid": f"q{offset + i}", "question": question, "gold": gold}) + "\n")


def _data_config(source: Path, rows: int) -> dict[str, Any]:
    return {
        "dataset_name": "table",
        "num_samples": rows,
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "default",
        "split": "train",
        "seed": 0,
        "source": str(source),
        "data_kwargs": {"answer": "gold", "id": "qid"},
    }


def _recorded_run(root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A tiny run's ``resolved_config.json`` and manifest provenance (two small table data configs)."""
    import gencache
    from gencache.artifact.reader import CacheReader, read_resolved_config
    from gencache.generation.tiny import build_tiny_teacher

    teacher = build_tiny_teacher(root / "teacher", seed=0)
    sources = []
    for index in range(2):
        source = root / f"small-{index}.jsonl"
        _table(source, 4, index * 100)
        sources.append(source)
    config = {
        "model": {
            "model_path": str(teacher),
            "dtype": "float32",
            "device": "cpu",
            "generation_kwargs": {"max_new_tokens": MAX_NEW_TOKENS},
        },
        "data_configs": [_data_config(source, 4) for source in sources],
        "gen_batch_size": 4,
        "seed": 0,
        "output_dir": str(root / "small-run"),
    }
    path = root / "small.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    published = gencache.generate(path)
    assert published is not None
    return read_resolved_config(published), dict(CacheReader(published).provenance)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_artifact(root: Path, count: int) -> Path:
    """The large artifact (see the module docstring)."""
    from gencache.artifact.header import header_capacity
    from gencache.artifact.resolved import with_resolved_digest
    from gencache.artifact.writer import ArtifactBuild
    from gencache.config import parse_config
    from gencache.data.samples import build_samples
    from gencache.run.plan import run_digest

    small, provenance = _recorded_run(root)
    resolved = copy.deepcopy(small)
    halves = (count // 2, count - count // 2)
    for index, rows in enumerate(halves):
        source = root / f"large-{index}.jsonl"
        _table(source, rows, index * 10_000_000)
        resolved["config"]["data_configs"][index]["source"] = str(source)
        resolved["config"]["data_configs"][index]["num_samples"] = rows
        resolved["sources"][index]["location"] = str(source)
        resolved["sources"][index]["files"] = [{"path": str(source), "sha256": _sha256(source)}]
    out = root / "large"
    resolved["config"]["output_dir"] = str(out)
    resolved["output_dir"] = str(out)
    resolved["run_digest"] = run_digest(resolved["config"])
    resolved["samples"] = {**resolved["samples"], "total": count, "unique": count, "generated": count}
    samples = build_samples(parse_config(resolved["config"]))
    rng = random.Random(0)
    capacity = header_capacity(count, 1, MAX_NEW_TOKENS)
    with ArtifactBuild(out, provenance=provenance, header_capacity=capacity) as build:
        for sample in samples.unique:
            gold = sample.answer.split()
            kind = rng.random()
            words = gold if kind < 0.4 else [*gold[:1], "zulu"] if kind < 0.7 else [rng.choice(WORDS)]
            length = rng.randint(1, MAX_NEW_TOKENS)
            reason = "length" if length == MAX_NEW_TOKENS or kind > 0.95 else "eos"
            ids = [rng.randrange(1, 250) for _ in range(length)]
            text = " ".join(words) + ("\nbecause the record says so" if kind > 0.9 else "")
            build.writer.add(sample.key, [b"".join(i.to_bytes(8, "little") for i in ids)], [text], [reason])
        build.writer.finalize(resolved_config=with_resolved_digest(resolved), summary={})
        build.publish()
    return out


def timings(artifact: Path, root: Path, rounds: int) -> tuple[dict[str, list[float]], int]:
    script = gencache_script()
    env = installed_env(root)
    outputs = {
        "export": root / "answers.jsonl",
        "score": root / "scores.jsonl",
        "report": root / "report.html",
    }
    commands = {
        "export": [*script, "export", str(artifact), "--out", str(outputs["export"]), "--no-prompts"],
        "score": [*script, "score", str(artifact), "--out", str(outputs["score"])],
        "report": [*script, "report", str(artifact), "--out", str(outputs["report"])],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_index in range(rounds + 1):  # the first round writes the byte code and is not counted
        for name, command in commands.items():
            outputs[name].unlink(missing_ok=True)
            seconds = wall(command, env, check=True)
            if round_index:
                times[name].append(seconds)
        log(
            f"round {round_index}: "
            + ", ".join(f"{name} {values[-1]:.2f}s" for name, values in times.items() if values)
        )
    return times, outputs["report"].stat().st_size


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 entries and 2 rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of timings (default 5)")
    args = parser.parse_args(argv)
    count = 5_000 if args.quick else 100_000
    rounds = args.rounds or (2 if args.quick else 5)
    root = Path(tempfile.mkdtemp(prefix="gencache-bench-quality-"))
    load_before = load_average()
    try:
        log(f"building an artifact of {count} entries")
        artifact = build_artifact(root, count)
        times, size = timings(artifact, root, rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_after = load_average()

    def ratio(name: str) -> float:
        return statistics.median(t / e for t, e in zip(times[name], times["export"], strict=True))

    options = (" --quick" if args.quick else "") + (f" --rounds {args.rounds}" if args.rounds else "")
    section = [
        *section_head("Scores and the report against export", "bench_quality.py", options),
        f"An artifact of {count:,} entries over two `table` data configs (local JSON Lines, samples rebuilt from the "
        f"recorded run), {rounds} rounds of fresh processes of the installed script, each command once per round; "
        "ratios are medians of the rounds' ratios against `gencache export ARTIFACT --out FILE.jsonl --no-prompts` "
        "(which rebuilds the same samples and reads every answer).",
        "",
        "| command | median wall time | ratio to export | target |",
        "|---|---|---|---|",
        f"| `gencache export --no-prompts` (baseline) | {statistics.median(times['export']):.2f} s | 1.00x | |",
        f"| `gencache score --out scores.jsonl` | {statistics.median(times['score']):.2f} s | {ratio('score'):.2f}x | "
        "<= 1.5x |",
        f"| `gencache report --out report.html` | {statistics.median(times['report']):.2f} s | {ratio('report'):.2f}x "
        "| <= 2x |",
        "",
        f"The report's file: {size / 1024:.0f} KiB for {count:,} answers (two figures, {2 * 12} examples).",
        "",
        f"Notes: {load_note(load_before, load_after)}.",
    ]
    print("\n".join(section))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
