"""Object-storage benchmark: artifacts on moto's S3 server on 127.0.0.1 against the same artifacts on local disk.

``python benchmarks/bench_s3.py [--quick] [--dir DIR]`` prints one markdown section on stdout (progress on stderr).
It starts moto's server itself (the tests' ``S3Server``) and puts the tests' ``FaultProxy`` in front of it where
requests and bytes are counted. Every figure is a ratio against a baseline measured in the same run:

- generating the tiny teacher's demo config (``gencache demo``'s) to the server against to local disk, in this
  process after a warm-up run: the wall time of each (median of the rounds, alternating), and the bytes sent for
  the payload (the bodies of its ``UploadPart`` requests) over the payload's size; the same for the artifact of
  100,000 entries below, whose payload is several parts;
- ``inspect_report`` of an artifact of 100,000 entries (written with ``ArtifactBuild``): every request and the
  bytes it read, by object, against the payload's header (length prefix and reserved header);
- reading 20,000 random entries of that artifact through ``CacheReader(url)`` (after its one download into the
  local cache) against a ``CacheReader`` of the same artifact on local disk: p50 and total, the one-time download,
  and entries read by range requests (``download=False``).

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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT, load_average, load_note, log, section_head

from gencache.artifact.store import client

sys.path.insert(0, str(ROOT / "tests"))
from support.s3 import UNSET, FaultProxy, S3Server  # the tests' server and proxy

TOKENS = 64
READS = 20_000
BUCKET = "bench"
TEXT = "A short cached answer."


def use(endpoint: str) -> None:
    """Send the product's boto3 client (configured by the environment alone) to ``endpoint``."""
    os.environ["AWS_ENDPOINT_URL"] = endpoint


def timed(function: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return time.perf_counter() - started, result


class Recorder:
    """Every request through ``proxy`` as (method, path and query, body bytes sent, response bytes): the proxy
    counts by method; the requests measured are sequential, so each one's response bytes are the growth of the
    proxy's total until the next one begins."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.marks: list[tuple[str, str, int, int]] = []
        take = proxy.take

        def recorded(method: str, path: str, sent: int) -> Any:
            self.marks.append((method, path, sent, sum(proxy.received.values())))
            return take(method, path, sent)

        proxy.take = recorded  # type: ignore[method-assign]

    def reset(self) -> None:
        self.marks.clear()
        self.proxy.requests.clear()
        self.proxy.sent.clear()
        self.proxy.received.clear()

    def requests(self) -> list[tuple[str, str, int, int]]:
        ends = [mark[3] for mark in self.marks[1:]] + [sum(self.proxy.received.values())]
        return [
            (method, path, sent, end - start) for (method, path, sent, start), end in zip(self.marks, ends, strict=True)
        ]

    def payload_sent(self) -> int:
        """The body bytes of the payload's UploadPart requests recorded (the manifest may be a multipart upload
        too)."""
        parts = [(path, sent) for method, path, sent, _ in self.marks if method == "PUT" and "partNumber=" in path]
        return sum(sent for path, sent in parts if "/cache.safetensors?" in path)


# -- a. generating the demo ----------------------------------------------------------------------------------
def demo_run(workdir: Path, teacher: Path, output: str) -> float:
    """Seconds ``generate`` takes for the demo config with ``output_dir`` ``output``."""
    from gencache.cli.demo import demo_config
    from gencache.run.api import generate

    config = demo_config(teacher, workdir) | {"output_dir": output}
    path = workdir / f"config-{hashlib.sha256(output.encode()).hexdigest()[:8]}.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    seconds, _ = timed(generate, path)
    return seconds


def generation(root: Path, server: S3Server, recorder: Recorder, rounds: int) -> dict[str, Any]:
    from gencache.generation.tiny import TINY_CPU_ATTENTION_HEAD_DIM, build_tiny_teacher

    teacher = root / "tiny-teacher"
    build_tiny_teacher(teacher, head_dim=TINY_CPU_ATTENTION_HEAD_DIM)
    demo_run(root, teacher, str(root / "warm-up"))  # imports, first model load
    use(recorder.proxy.endpoint)
    recorder.reset()
    demo_run(root, teacher, f"s3://{BUCKET}/demo/counted")  # counted, and the bucket's warm-up
    parts, put = recorder.payload_sent(), recorder.proxy.sent["PUT"]
    use(server.endpoint)
    local, remote = [], []
    for i in range(rounds):
        local.append(demo_run(root, teacher, str(root / f"demo-{i}")))
        remote.append(demo_run(root, teacher, f"s3://{BUCKET}/demo/demo-{i}"))
        log(f"demo round {i}: local {local[-1]:.2f} s, s3 {remote[-1]:.2f} s")
    return {
        "local": local,
        "s3": remote,
        "payload": (root / "demo-0" / "cache.safetensors").stat().st_size,
        "parts": parts,
        "put": put,
    }


# -- b, c. the artifact of 100,000 entries ---------------------------------------------------------------------
def keys_of(count: int) -> list[str]:
    return [hashlib.sha256(f"bench-s3-{i}".encode()).hexdigest() for i in range(count)]


def build(out: str | Path, count: int) -> None:
    from gencache.artifact.header import header_capacity
    from gencache.artifact.manifest import make_provenance
    from gencache.artifact.writer import ArtifactBuild

    provenance = make_provenance(
        "bench/teacher", "bench/teacher", "bfloat16", {"padding_side": "left", "pad_token_id": 0, "eos_token_id": 1}
    )
    with ArtifactBuild(out, provenance=provenance, header_capacity=header_capacity(count, 1, TOKENS)) as b:
        for i, key in enumerate(keys_of(count)):
            b.writer.add(key, [(i % 50_000).to_bytes(8, "little") * TOKENS], [TEXT], ["eos"])
        b.writer.finalize(resolved_config={"bench": "s3"}, summary={})
        b.publish()


def reads(reader: Any, sample: list[str]) -> tuple[float, float]:
    """The p50 and the total seconds of reading every key of ``sample`` (each entry's first read: its digests are
    checked)."""
    times = []
    for key in sample:
        started = time.perf_counter()
        reader.get_arrays(key)
        times.append(time.perf_counter() - started)
    return statistics.median(times), sum(times)


def reading(root: Path, url: str, local: Path, count: int, ranged: int, rounds: int) -> dict[str, Any]:
    from gencache.artifact.reader import CacheReader

    rng = random.Random(0)
    keys = keys_of(count)
    sample = [keys[rng.randrange(count)] for _ in range(READS)]
    cache = root / "xdg-cache"
    opened, first = timed(CacheReader, url, cache_dir=cache)
    fetched, _ = timed(first.get_arrays, sample[0])  # the payload's one download
    del first
    results: dict[str, list[tuple[float, float, float]]] = {"local": [], "cached": []}
    for _ in range(rounds):  # fresh readers, alternating: every read is a first read
        for kind, where in (("local", local), ("cached", url)):
            open_s, reader = timed(CacheReader, where, cache_dir=cache)
            results[kind].append((open_s, *reads(reader, sample)))
    open_s, reader = timed(CacheReader, url, download=False, cache_dir=root / "ranged-cache")
    ranged_p50, ranged_total = reads(reader, sample[:ranged])
    median = {kind: tuple(statistics.median(r[i] for r in rows) for i in range(3)) for kind, rows in results.items()}
    return {"open": opened, "download": fetched, **median, "ranged": (open_s, ranged_p50, ranged_total)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 entries, one round (a smoke run)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)
    count, rounds, ranged = (10_000, 1, 50) if args.quick else (100_000, 3, 200)
    load_before = load_average()
    root = Path(tempfile.mkdtemp(prefix="gencache-bench-s3-", dir=args.dir))
    server = S3Server(root)
    try:
        for name in UNSET:
            os.environ.pop(name, None)
        os.environ.update(server.env)
        server.start()
        client_s, s3 = timed(client)  # boto3's import and the client, once per process
        s3.create_bucket(Bucket=BUCKET)
        with FaultProxy(server.endpoint) as proxy:
            recorder = Recorder(proxy)
            demo = generation(root, server, recorder, rounds) | {"client": client_s}
            build(root / "local", count)
            use(proxy.endpoint)
            recorder.reset()
            url = f"s3://{BUCKET}/runs/big"
            big_seconds, _ = timed(build, url, count)
            big = {"seconds": big_seconds, "payload": (root / "local" / "cache.safetensors").stat().st_size}
            big["parts"], big["put"] = recorder.payload_sent(), proxy.sent["PUT"]
            log(f"wrote {count:,} entries to {url} in {big_seconds:.1f} s")
            inspected = inspect(url, root, recorder)
            use(server.endpoint)
            read = reading(root, url, root / "local", count, ranged, rounds)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    print("\n".join(section(args.quick, count, rounds, ranged, demo, big, inspected, read, load_before)))
    return 0


def inspect(url: str, root: Path, recorder: Recorder) -> dict[str, Any]:
    """``inspect_report`` of ``url`` with an empty local cache (what a first ``gencache inspect`` does): its
    requests, and the artifact's object sizes and header bytes (read afterwards)."""
    from gencache.artifact.names import LENGTH_PREFIX_BYTES
    from gencache.artifact.remote import RemoteArtifact
    from gencache.artifact.report import inspect_report
    from gencache.config.paths import parse_s3_url

    os.environ["XDG_CACHE_HOME"] = str(root / "inspect-cache")
    recorder.reset()
    seconds, report = timed(inspect_report, [url])
    requests = recorder.requests()
    if report.exit_code != 0:
        raise SystemExit(f"inspect_report failed: {report.to_json()}")
    remote = RemoteArtifact(parse_s3_url(url))
    _, header = remote.payload_head()
    return {
        "seconds": seconds,
        "requests": requests,
        "header": LENGTH_PREFIX_BYTES + len(header),
        "sizes": remote.sizes,
    }


def kind_of(method: str, path: str) -> str:
    """A request as the table names it: the operation and the object."""
    target = path.split("?", 1)[0].rsplit("/", 1)[-1]
    if "list-type=2" in path:
        return "LIST (ListObjectsV2)"
    return f"{method} {target}"


def section(
    quick: bool,
    count: int,
    rounds: int,
    ranged: int,
    demo: dict[str, Any],
    big: dict[str, Any],
    inspected: dict[str, Any],
    read: dict[str, Any],
    load_before: float,
) -> list[str]:
    local_s, remote_s = statistics.median(demo["local"]), statistics.median(demo["s3"])
    lines = section_head("Artifacts on object storage (moto's S3 server)", "bench_s3.py", " --quick" * quick)
    lines += [
        "moto's S3 server (`python -m moto.server`) on 127.0.0.1, in memory; requests and bytes counted by the "
        "tests' `FaultProxy` in front of it (`tests/support/s3.py`).",
        "",
        "### Generating to the bucket",
        "",
        "| what | local disk | bucket | ratio |",
        "|---|---|---|---|",
        f"| demo config, tiny teacher: wall (median of {rounds}, in process, after a warm-up) | {local_s:.2f} s "
        f"| {remote_s:.2f} s | {remote_s / local_s:.2f}x (target <= 1.2x) |",
        f"| demo: payload bytes sent / payload bytes | {demo['payload']:,} B | {demo['parts']:,} B "
        f"| {demo['parts'] / demo['payload']:.4f} (target <= 1.01) |",
        f"| {count:,} entries (`ArtifactBuild`): payload bytes sent / payload bytes | {big['payload']:,} B "
        f"| {big['parts']:,} B | {big['parts'] / big['payload']:.4f} |",
        "",
        f"Once per process a bucket run also imports boto3 and makes its client: {demo['client']:.2f} s here "
        "(paid by the warm-up, so not in the medians). The rounds, local / bucket: "
        + ", ".join(f"{a:.1f} / {b:.1f} s" for a, b in zip(demo["local"], demo["s3"], strict=True))
        + ".",
        "",
        f"Every PUT of the demo run (payload parts, resolved config, manifest, the writer's lock) sent "
        f"{demo['put']:,} bytes; of the {count:,}-entry build {big['put']:,} bytes for "
        f"{sum(big_sizes := inspected['sizes'].values()):,} bytes of objects ({len(big_sizes)}) "
        f"in {big['seconds']:.1f} s.",
        "",
        f"### `inspect` of an artifact of {count:,} entries",
        "",
        f"The payload is {inspected['sizes']['cache.safetensors']:,} bytes, of which {inspected['header']:,} are "
        f"the length prefix and the reserved header; the manifest {inspected['sizes']['manifest.json']:,} bytes. "
        f"`inspect_report([url])` with an empty local cache took {inspected['seconds']:.2f} s.",
        "",
        "| request | count | bytes read |",
        "|---|---|---|",
    ]
    kinds: dict[str, list[int]] = {}
    for method, path, _, received in inspected["requests"]:
        kinds.setdefault(kind_of(method, path), []).append(received)
    for kind, sizes in kinds.items():
        lines.append(f"| {kind} | {len(sizes)} | {sum(sizes):,} |")
    payload_read = sum(kinds.get("GET cache.safetensors", [0]))
    lines += [
        "",
        f"Payload bytes read: {payload_read:,} = {payload_read / inspected['header']:.4f} of the header "
        f"(target: nothing beyond the header).",
        "",
        f"### Reading {READS:,} random entries",
        "",
        f"Fresh readers, alternating, median of {rounds}; every read is the entry's first (its digests checked).",
        "",
        "| reader | open | read p50 | total | ratio p50 / total |",
        "|---|---|---|---|---|",
    ]
    _, base_p50, base_total = read["local"]
    rows = [("local artifact (baseline)", read["local"]), ("`CacheReader(url)`, cached", read["cached"])]
    for name, (open_s, p50, total) in rows:
        lines.append(
            f"| {name} | {open_s * 1000:.0f} ms | {p50 * 1e6:.1f} µs | {total:.2f} s "
            f"| {p50 / base_p50:.2f}x / {total / base_total:.2f}x |"
        )
    open_s, p50, total = read["ranged"]
    lines += [
        f"| `CacheReader(url, download=False)`: {ranged:,} entries by range requests | {open_s * 1000:.0f} ms "
        f"| {p50 * 1e3:.1f} ms | {total:.2f} s | {p50 / base_p50:,.0f}x / - |",
        "",
        f"One-time cost of the bucket reader: opening with an empty cache {read['open']:.2f} s (the listing, the "
        f"manifest's download, the header by range), then the payload's download on the first read "
        f"{read['download']:.2f} s.",
        "",
        f"Notes: {load_note(load_before, load_average())}, shared with other jobs (helpers and test runs), so "
        "the wall times are noisy; the ratios are measured in the same run. The demo's wall time is the tiny "
        "teacher's generation on CPU plus a few requests of a few KB to the bucket: the load moves the rounds more "
        "than the bucket does. A range read is one request to moto, a Python server on the same loaded CPUs.",
    ]
    return lines


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
