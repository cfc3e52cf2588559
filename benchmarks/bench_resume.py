"""Resume benchmark: what a rerun of a finished ``--shards 64`` run reads to recognise its published shards.

``python benchmarks/bench_resume.py [--quick] [--dir DIR]`` prints one markdown section on stdout (progress on
stderr). It writes 64 shards with the real writer (no model: entries of 4,096 tokens and a short text), about 1 GiB
of payload in all (``--quick``: 64 MiB), then, in a fresh process, counts the bytes that process reads
(``rchar`` of ``/proc/self/io``: every ``read``/``pread``, page cache or not) while
:func:`gencache.artifact.reader.is_published` recognises every shard (what a rerun checks of each target), and
while :func:`gencache.artifact.reader.verify` checks every shard in full (what ``gencache verify`` does), as the
baseline. Nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

SHARDS = 64
TOKENS = 4096
RUN_DIGEST = "d" * 64
TEXT = "A teacher's answer, its text kept short: the payload is what a resume must not read. " * 2


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build(base: Path, entries: int) -> int:
    """Publish ``entries`` entries over :data:`SHARDS` key-mod shards of ``base``; the payload bytes written."""
    from gencache.artifact.header import header_capacity
    from gencache.artifact.manifest import make_provenance
    from gencache.artifact.names import make_shard_info, shard_dir_name, shard_of
    from gencache.artifact.writer import ArtifactBuild

    provenance = make_provenance(
        "bench/teacher", "bench/teacher", "bfloat16", {"padding_side": "left", "pad_token_id": 0, "eos_token_id": 1}
    )
    keys = [hashlib.sha256(f"resume-{i}".encode()).hexdigest() for i in range(entries)]
    payload = 0
    for shard in range(SHARDS):
        mine = [i for i, key in enumerate(keys) if shard_of(key, SHARDS) == shard]
        target = Path(shard_dir_name(str(base), shard, SHARDS))
        with ArtifactBuild(target, provenance=provenance, header_capacity=header_capacity(len(mine), 1, TOKENS)) as b:
            for i in mine:
                b.writer.add(keys[i], [(i % 50_000).to_bytes(8, "little") * TOKENS], [TEXT], ["length"])
                payload += TOKENS * 8
            b.writer.finalize(
                resolved_config={"run_digest": RUN_DIGEST},
                summary={"shard": make_shard_info(shard, SHARDS, RUN_DIGEST)},
            )
            b.publish()
    return payload


def rchar() -> int:
    with open("/proc/self/io", encoding="ascii") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("rchar:"))


def child(base: Path, check: str) -> dict[str, float]:
    """In this fresh process: the bytes read and the seconds taken to check every shard of ``base``."""
    from gencache.artifact.names import shard_dir_name
    from gencache.artifact.reader import is_published, verify

    shards = [Path(shard_dir_name(str(base), shard, SHARDS)) for shard in range(SHARDS)]
    before, started = rchar(), time.perf_counter()
    if check == "resume":
        assert all(is_published(shard, RUN_DIGEST) for shard in shards)
    else:
        assert all(verify(shard) == [] for shard in shards)
    return {"seconds": time.perf_counter() - started, "read": rchar() - before}


def measure(base: Path, check: str) -> dict[str, float]:
    command = [sys.executable, __file__, "--child", check, str(base)]
    result: dict[str, float] = json.loads(subprocess.run(command, capture_output=True, check=True, text=True).stdout)
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB of payload instead of 1 GiB (a smoke run)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the shards (default: a temp dir)")
    parser.add_argument("--child", nargs=2, metavar=("CHECK", "BASE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(Path(args.child[1]), args.child[0])))
        return 0
    entries = (64 if args.quick else 1024) * 1024 * 1024 // (TOKENS * 8)
    root = Path(tempfile.mkdtemp(prefix="gencache-bench-resume-", dir=args.dir))
    try:
        started = time.perf_counter()
        payload = build(root / "run", entries)
        log(f"wrote {SHARDS} shards, {payload / 2**20:,.0f} MiB of payload, in {time.perf_counter() - started:.1f} s")
        resume, full = measure(root / "run", "resume"), measure(root / "run", "verify")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = [
        ("rerun: `is_published` of every shard", resume),
        ("`gencache verify` of every shard (baseline)", full),
    ]
    lines = [
        "## Resuming a finished `--shards 64` run",
        "",
        f"- command: `python benchmarks/bench_resume.py{' --quick' if args.quick else ''}`",
        "",
        f"{SHARDS} shards written with the writer, {entries:,} entries of {TOKENS:,} tokens, "
        f"{payload / 2**20:,.0f} MiB of payload; bytes read are `rchar` of `/proc/self/io` in a fresh process "
        "around the checks.",
        "",
        "| check | bytes read | of the payload | time |",
        "|---|---|---|---|",
    ]
    for name, measured in rows:
        lines.append(
            f"| {name} | {measured['read'] / 2**20:,.2f} MiB | {measured['read'] / payload:.2%} | "
            f"{measured['seconds']:.2f} s |"
        )
    lines += [
        "",
        "A rerun reads each shard's three file names, the end of its manifest (the members after the entries), the "
        "payload's length prefix and header (about 150 bytes per sequence) and its resolved config: O(shards and "
        "sequences), never the payload's tokens, which `gencache verify` re-hashes.",
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
