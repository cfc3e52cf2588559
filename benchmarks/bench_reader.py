"""Reader benchmark: opening and reading N entries, against Hugging Face ``datasets`` and a numpy memmap floor.

``python benchmarks/bench_reader.py [--quick] [--sizes 10000,100000,1000000] [--dir DIR]`` prints one markdown
section on stdout (progress on stderr). Each entry is one 200-token sequence and an 800-character text. For every
size the same entries are written three ways in a temporary directory (removed afterwards): a gencache artifact
(through the real writer), a ``datasets`` Arrow table saved with ``save_to_disk`` (read back memory-mapped, plus
the key-to-row dict a user has to build), and the floor of a compact index (sorted 32-byte key digests and
offsets as ``.npy`` files, opened with ``mmap_mode="r"``, tokens in one flat file). Every figure comes from a
fresh process per store: open time, anonymous RSS after open (``/proc/self/smaps_rollup``), the private dirty
memory of each of 4 forked workers after together reading every entry once, and read p50/p99 of random keys.
Nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

TOKENS = 200
TEXT = ("A cached teacher answer of eight hundred characters, repeated to length. " * 12)[:800]
WORKERS = 4
READS = 20_000
SHARD_ENTRIES = 500_000


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def keys_of(count: int) -> list[str]:
    return [hashlib.sha256(f"bench-{i}".encode()).hexdigest() for i in range(count)]


def token_block(i: int) -> bytes:
    return ((i * 7 + 1) % 50_000).to_bytes(8, "little") * TOKENS


# -- building the three stores -------------------------------------------------------------------------------
def build_gencache(count: int, out: Path) -> None:
    """One artifact, or key-mod shards of at most SHARD_ENTRIES entries (one safetensors header holds at most
    100 MB, about 700,000 such entries): ``out`` then names the shard set, as ``open_caches`` takes it."""
    from gencache.artifact.header import header_capacity
    from gencache.artifact.manifest import make_provenance
    from gencache.artifact.names import make_shard_info, shard_dir_name, shard_of
    from gencache.artifact.writer import ArtifactBuild

    provenance = make_provenance(
        "bench/teacher", "bench/teacher", "bfloat16", {"padding_side": "left", "pad_token_id": 0, "eos_token_id": 1}
    )
    keys = keys_of(count)
    shards = -(-count // SHARD_ENTRIES)
    for shard in range(shards):
        mine = [i for i, key in enumerate(keys) if shards == 1 or shard_of(key, shards) == shard]
        target = out if shards == 1 else Path(shard_dir_name(str(out), shard, shards))
        summary = {} if shards == 1 else {"shard": make_shard_info(shard, shards, "b" * 64)}
        capacity = header_capacity(len(mine), 1, TOKENS)
        with ArtifactBuild(target, provenance=provenance, header_capacity=capacity) as build:
            add = build.writer.add
            for i in mine:
                add(keys[i], [token_block(i)], [f"{i:08d}" + TEXT[8:]], ["eos"])
            build.writer.finalize(resolved_config={"bench": "reader"}, summary=summary)
            build.publish()


def build_floor(count: int, out: Path) -> None:
    import numpy as np

    out.mkdir()
    keys = keys_of(count)
    digests = np.frombuffer(b"".join(bytes.fromhex(k) for k in keys), dtype="S32")
    order = np.argsort(digests)
    np.save(out / "keys.npy", digests[order])
    np.save(out / "offsets.npy", (order * TOKENS * 8).astype(np.int64))
    with open(out / "tokens.bin", "wb") as handle:
        for i in range(count):
            handle.write(token_block(i))


def build_datasets(count: int, out: Path) -> None:
    import datasets
    import numpy as np
    import pyarrow as pa

    keys = keys_of(count)
    values = np.frombuffer(b"".join(token_block(i) for i in range(count)), dtype=np.int64)
    tokens = pa.ListArray.from_arrays(pa.array(np.arange(count + 1, dtype=np.int32) * TOKENS), pa.array(values))
    table = pa.table(
        {"key": pa.array(keys), "tokens": tokens, "text": pa.array([f"{i:08d}" + TEXT[8:] for i in range(count)])}
    )
    datasets.Dataset(table).save_to_disk(str(out))


# -- measuring (child processes) ----------------------------------------------------------------------------
def rollup(field: str) -> int:
    with open("/proc/self/smaps_rollup", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


class Store:
    """One opened store: ``read(key)`` returns the tokens and the text of an entry."""

    def __init__(self, kind: str, path: Path) -> None:
        self.kind = kind
        if kind == "gencache":
            from gencache.artifact.mixture import open_caches

            self.reader = open_caches(path)
        elif kind == "datasets":
            import datasets

            self.table = datasets.load_from_disk(str(path)).with_format("numpy")
            self.rows = {key: row for row, key in enumerate(self.table["key"])}  # part of opening: lookups need it
        else:
            import numpy as np

            self.digests = np.load(path / "keys.npy", mmap_mode="r")
            self.offsets = np.load(path / "offsets.npy", mmap_mode="r")
            self.tokens = np.memmap(path / "tokens.bin", dtype=np.int64, mode="r")

    def iter_keys(self) -> Iterator[str]:
        """Every key, from the store's own index (what a worker's full pass walks)."""
        if self.kind == "gencache":
            return iter(self.reader)
        if self.kind == "datasets":
            return iter(self.rows)
        return (bytes(d).hex() for d in self.digests)

    def read(self, key: str) -> Any:
        if self.kind == "gencache":
            return self.reader[key].sequences[0]
        if self.kind == "datasets":
            return self.table[self.rows[key]]["tokens"]
        raw = bytes.fromhex(key)
        position = int(self.digests.searchsorted(raw))
        start = int(self.offsets[position]) // 8
        return self.tokens[start : start + TOKENS]


def child(kind: str, path: Path) -> dict[str, Any]:
    import importlib

    import numpy  # noqa: F401  (imported before measuring, for every store alike)
    import torch  # noqa: F401

    importlib.import_module("datasets" if kind == "datasets" else "gencache.artifact.mixture")  # not timed
    anon_before = rollup("Anonymous")
    started = time.perf_counter()
    store = Store(kind, path)
    open_s = time.perf_counter() - started
    anon_open = rollup("Anonymous") - anon_before
    keys = list(store.iter_keys())
    rng = random.Random(0)
    sample = [keys[rng.randrange(len(keys))] for _ in range(READS)]
    del keys
    first = []
    for key in sample:
        t = time.perf_counter()
        store.read(key)
        first.append(time.perf_counter() - t)
    again = []
    for key in sample:
        t = time.perf_counter()
        store.read(key)
        again.append(time.perf_counter() - t)
    private = []
    pipes = []
    for worker in range(WORKERS):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            for position, key in enumerate(store.iter_keys()):
                if position % WORKERS == worker:
                    store.read(key)
            os.write(write_end, str(rollup("Private_Dirty")).encode())
            os._exit(0)
        os.close(write_end)
        pipes.append((pid, read_end))
    for pid, read_end in pipes:
        with os.fdopen(read_end) as handle:
            private.append(int(handle.read() or 0))
        os.waitpid(pid, 0)
    return {
        "open_s": open_s,
        "anon_open": anon_open,
        "first_p50_us": statistics.median(first) * 1e6,
        "read_p50_us": statistics.median(again) * 1e6,
        "read_p99_us": sorted(again)[int(len(again) * 0.99)] * 1e6,
        "worker_private": max(private) if private else None,
    }


def measure(kind: str, path: Path) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(path)], capture_output=True, text=True, check=True
    )
    measured: dict[str, Any] = json.loads(result.stdout)
    return measured


def mb(value: int | None) -> str:
    # anonymous memory freed while opening can make the difference slightly negative: report it as 0
    return "-" if value is None else f"{max(value, 0) / 1e6:.0f} MB"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 entries only (a smoke run)")
    parser.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated entry counts")
    parser.add_argument("--dir", type=Path, default=None, help="where to build the stores (default: a temp dir)")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]))))
        return 0
    sizes = [10_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    rows = []
    for count in sizes:
        root = Path(tempfile.mkdtemp(prefix="bench-reader-", dir=args.dir))
        try:
            for kind, build in (("gencache", build_gencache), ("datasets", build_datasets), ("floor", build_floor)):
                started = time.perf_counter()
                build(count, root / kind)
                log(f"{count:,} {kind}: built in {time.perf_counter() - started:.1f} s")
            results = {kind: measure(kind, root / kind) for kind in ("gencache", "datasets", "floor")}
            log(f"{count:,}: {json.dumps(results)}")
            rows.append((count, results))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    lines = [
        "## Reading (open, memory, workers, lookups)",
        "",
        f"Entries of one {TOKENS}-token sequence and an {len(TEXT)}-character text; each store opened in a fresh "
        "process. *anon* is anonymous RSS added by opening (`/proc/self/smaps_rollup`); *worker* the largest "
        f"private dirty memory of {WORKERS} forked workers after together reading every entry once; reads are "
        f"{READS:,} random keys (*first*: gencache checks the entry's digests on a first read; *p50/p99*: repeated). "
        "`datasets` is Hugging Face Arrow (`load_from_disk`, memory-mapped) plus a key-to-row dict; the floor is "
        "sorted 32-byte digests and offsets as memory-mapped `.npy` files.",
        "",
        "| entries | store | open | anon after open | worker private | first read p50 | read p50 | read p99 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for count, results in rows:
        for kind, r in results.items():
            lines.append(
                f"| {count:,} | {kind} | {r['open_s'] * 1000:.0f} ms | {mb(r['anon_open'])} "
                f"| {mb(r['worker_private'])} | {r['first_p50_us']:.1f} µs | {r['read_p50_us']:.1f} µs "
                f"| {r['read_p99_us']:.1f} µs |"
            )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
