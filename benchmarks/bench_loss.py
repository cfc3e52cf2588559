"""The chunked online distillation loss against the unchunked computation: peak memory and time of one forward and
backward at a Qwen3-wide vocabulary (151,936) and 4,096 answer positions.

Usage: ``uv run python benchmarks/bench_loss.py [--quick] [--vocab V] [--positions N] [--chunk-size C]
[--dtype bfloat16|float32] [--repeats R]``; prints one markdown section.

Each measurement runs in a fresh process: the student's and the teacher's logits (``(1, N + 1, V)`` in ``--dtype``,
what a model hands over) are allocated first, then the peak resident memory *added* by the loss's forward and
backward is read from the process's resident high-water mark (``VmHWM``, reset first) against the resident size
before it, the times are the best of ``--repeats`` runs of each computation, interleaved in one process. Where the
unchunked computation does not fit (about 18 GiB at 4,096 positions), its memory is extrapolated linearly from the
largest count that did (``--unchunked-up-to`` sets that count by hand), and the table says so. The unchunked
computation is the textbook one: the answer rows gathered and upcast to float32 whole, then ``F.cross_entropy`` plus
``F.kl_div`` of the log-softmaxes, differentiated by autograd.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FULL = {"vocab": 151_936, "positions": "2048,4096"}
QUICK = {"vocab": 32_768, "positions": "256,512"}
#: float32 rows of positions x vocabulary the unchunked computation holds at its peak (measured: about 7.8).
UNCHUNKED_ROWS = 8


def _fits_unchunked(count: int, vocab: int) -> bool:
    """Whether the unchunked computation at ``count`` positions fits in 70% of the memory available now."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in handle}
    except (OSError, ValueError, IndexError):
        return True
    available = fields.get("MemAvailable")
    return available is None or UNCHUNKED_ROWS * count * vocab * 4 < 0.7 * available


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak() -> bool:
    """Reset this process's resident high-water mark (VmHWM) to its current size; False where Linux refuses."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _peak_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _child(method: str, vocab: int, positions: int, chunk_size: int, dtype_name: str, repeats: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT / "src"))
    from gencache.training import distillation_loss

    dtype = getattr(torch, dtype_name)
    generator = torch.Generator().manual_seed(0)
    student = torch.empty(1, positions + 1, vocab, dtype=dtype).normal_(0.0, 2.0, generator=generator)
    student.requires_grad_(True)
    teacher = torch.empty(1, positions + 1, vocab, dtype=dtype).normal_(0.0, 2.0, generator=generator)
    labels = torch.randint(0, vocab, (1, positions + 1), generator=generator)
    labels[0, 0] = -100
    temperature = 2.0

    def unchunked() -> float:
        targets = labels[:, 1:]
        mask = targets != -100
        s = student[:, :-1][mask].float()
        t = teacher[:, :-1][mask].float()
        ce = F.cross_entropy(s, targets[mask])
        kl = F.kl_div(
            F.log_softmax(s / temperature, dim=-1),
            F.log_softmax(t / temperature, dim=-1),
            log_target=True,
            reduction="batchmean",
        )
        loss = ce + temperature**2 * kl
        loss.backward()
        return float(loss.detach())

    def chunked() -> float:
        out = distillation_loss(student, teacher, labels, temperature=temperature, chunk_size=chunk_size)
        out.loss.backward()
        return float(out.loss.detach())

    if method == "time":  # both computations, interleaved, so a busy machine slows both alike
        best = {"chunked": float("inf"), "unchunked": float("inf")}
        for run in (chunked, unchunked):  # warm-up, untimed
            student.grad = None
            run()
        for _ in range(repeats):
            for name, run in (("chunked", chunked), ("unchunked", unchunked)):
                student.grad = None
                started = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - started)
        return best
    compute = unchunked if method == "unchunked" else chunked
    student.grad = None
    _reset_peak()
    before = _rss_bytes()
    value = compute()
    return {"method": method, "peak_bytes": _peak_bytes() - before, "loss": value}


def _measure(method: str, positions: int, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        method,
        "--vocab",
        str(args.vocab),
        "--positions",
        str(positions),
        "--chunk-size",
        str(args.chunk_size),
        "--dtype",
        args.dtype,
        "--repeats",
        str(args.repeats),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    value: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    parser.add_argument("--vocab", type=int, default=None)
    parser.add_argument("--positions", default=None, help="answer positions, comma-separated (default 2048,4096)")
    parser.add_argument(
        "--unchunked-up-to",
        type=int,
        default=None,
        help="measure the unchunked computation only up to this many positions and extrapolate its memory linearly "
        "beyond (it is proportional to the positions); by default it is measured wherever it fits in 70%% of the "
        "available memory",
    )
    parser.add_argument("--chunk-size", type=int, default=512)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)
    shape = QUICK if args.quick else FULL
    args.vocab = args.vocab or shape["vocab"]
    if args.child:
        positions = int(args.positions or shape["positions"])
        print(json.dumps(_child(args.child, args.vocab, positions, args.chunk_size, args.dtype, args.repeats)))
        return 0
    counts = [int(p) for p in str(args.positions or shape["positions"]).split(",")]
    gib = 1024**3
    rows = []
    last: tuple[int, dict[str, Any], dict[str, Any]] | None = None
    for count in counts:
        chunked = _measure("chunked", count, args)
        if count <= args.unchunked_up_to if args.unchunked_up_to is not None else _fits_unchunked(count, args.vocab):
            unchunked, times, how = _measure("unchunked", count, args), _measure("time", count, args), "measured"
            if abs(unchunked["loss"] - chunked["loss"]) > 1e-3 * abs(unchunked["loss"]):
                raise SystemExit(f"the losses differ: {chunked['loss']} vs {unchunked['loss']}")
            last = (count, unchunked, times)
        elif last is not None:
            scale = count / last[0]
            unchunked = {"peak_bytes": last[1]["peak_bytes"] * scale}
            times = {"unchunked": last[2]["unchunked"] * scale, "chunked": float("nan")}
            how = f"extrapolated from {last[0]:,}"
        else:
            raise SystemExit("--unchunked-up-to is below every --positions count: nothing to extrapolate from")
        memory = chunked["peak_bytes"] / unchunked["peak_bytes"]
        if how == "measured":
            timing = (
                f"{times['unchunked']:.2f} s | {times['chunked']:.2f} s | {times['chunked'] / times['unchunked']:.2f}"
            )
        else:
            timing = "not measured | not measured | -"
        rows.append(
            f"| {count:,} | {unchunked['peak_bytes'] / gib:.2f} GiB ({how}) | {chunked['peak_bytes'] / gib:.2f} GiB "
            f"| {memory:.3f} | {timing} |"
        )
    command = "uv run python benchmarks/bench_loss.py" + (" " + " ".join(argv) if argv else "")
    lines = [
        "## Online distillation loss (chunked vs unchunked, CPU)",
        "",
        f"One forward and backward of `gencache.training.distillation_loss` (T = 2, `chunk_size` {args.chunk_size}) "
        f"against the unchunked computation (the answer rows upcast to float32 whole, `F.cross_entropy` + "
        f"`F.kl_div`, autograd), vocabulary {args.vocab:,}, {args.dtype} logits allocated before measuring. Peak "
        "memory is what the loss adds to the resident size (VmHWM, a fresh process each, losses checked equal); "
        f"time is the best of {args.repeats} runs of each, interleaved in one process (a busy machine slows both "
        "alike). Targets: memory ratio <= 0.25, time ratio <= 1.3.",
        "",
        "| answer positions | unchunked peak | chunked peak | memory ratio | unchunked time | chunked time "
        "| time ratio |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"- command: `{command}`",
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
