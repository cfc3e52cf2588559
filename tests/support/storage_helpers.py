"""Shared helpers of the storage tests: keys, token bytes, small artifacts written through the real writer."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gencache.artifact.header import header_capacity
from gencache.artifact.manifest import make_provenance
from gencache.artifact.names import make_shard_info
from gencache.artifact.writer import ArtifactBuild

TESTS = Path(__file__).resolve().parents[1]
CHILD = TESTS / "support" / "storage_child.py"
TOKENIZER = {"padding_side": "left", "pad_token_id": 0, "eos_token_id": 2}
PROVENANCE = make_provenance("tiny/teacher", "tiny/teacher", "float32", TOKENIZER)


def key(i: int | str) -> str:
    """A deterministic semantic key."""
    return hashlib.sha256(f"sample-{i}".encode()).hexdigest()


def tokens(values: Sequence[int]) -> bytes:
    """Little-endian int64 bytes of ``values``."""
    return struct.pack(f"<{len(values)}q", *values)


@dataclass(frozen=True)
class Entry:
    key: str
    sequences: tuple[tuple[int, ...], ...]
    texts: tuple[str, ...]
    finish_reasons: tuple[str, ...]

    def payload(self) -> list[bytes]:
        return [tokens(s) for s in self.sequences]


def make_entries(count: int, *, length: int = 5, sequences: int = 1, start: int = 0) -> list[Entry]:
    """``count`` entries with distinct keys and contents; lengths vary a little around ``length``."""
    out = []
    for i in range(start, start + count):
        seqs = tuple(tuple(range(i * 7 + s, i * 7 + s + length + (i + s) % 3)) for s in range(sequences))
        texts = tuple(f"answer {i}.{s} ✓" for s in range(sequences))
        reasons = tuple(("eos", "stop_string", "length")[(i + s) % 3] for s in range(sequences))
        out.append(Entry(key(i), seqs, texts, reasons))
    return out


def write_artifact(
    output_dir: Path,
    entries: Sequence[Entry],
    *,
    provenance: Mapping[str, Any] = PROVENANCE,
    capacity: int | None = None,
    summary: Mapping[str, Any] | None = None,
    resolved_config: Mapping[str, Any] | None = None,
) -> Path:
    """Write and publish an artifact through :class:`ArtifactBuild`; returns ``output_dir``."""
    if capacity is None:
        max_tokens = max((len(s) for e in entries for s in e.sequences), default=1)
        max_seqs = max((len(e.sequences) for e in entries), default=1)
        capacity = header_capacity(len(entries), max_seqs, max_tokens)
    with ArtifactBuild(output_dir, provenance=provenance, header_capacity=capacity) as build:
        for entry in entries:
            build.writer.add(entry.key, entry.payload(), entry.texts, entry.finish_reasons)
        shard = (summary or {}).get("shard")
        build.writer.finalize(
            resolved_config=resolved_config or resolved_for(output_dir, provenance, shard),
            summary=summary if summary is not None else {},
        )
        build.publish()
    return output_dir


def resolved_for(output_dir: Path, provenance: Mapping[str, Any], shard: Mapping[str, Any] | None) -> dict[str, Any]:
    """A resolved config of the documented shape that agrees with ``provenance`` and the shard record."""
    return {
        "format_version": 3,
        "gencache_version": "test",
        "output_dir": str(output_dir),
        "overrides": {},
        "config": {"model": {"model_path": provenance["model_path"], "dtype": provenance["dtype"]}},
        "run_digest": shard["run_digest"] if shard else "0" * 64,
        "shard": dict(shard) if shard else None,
        "sources": [],
        "data_kwargs": [],
        "generation": {},
        "tokenizer": dict(provenance["tokenizer"]),
        "engine": {},
        "batching": None,
        "model": {"model_path": provenance["model_path"]},
        "runtime": {},
        "samples": {},
    }


def write_shard(base: Path, index: int, count: int, entries: Sequence[Entry], run_digest: str) -> Path:
    """Publish the entries of ``entries`` owned by shard ``index`` of ``count`` as ``<base>-shard-I-of-N``."""
    mine = [e for e in entries if int(e.key, 16) % count == index]
    path = Path(f"{base}-shard-{index:05d}-of-{count:05d}")
    return write_artifact(path, mine, summary={"shard": make_shard_info(index, count, run_digest)})


def writable_copy(source: Path, target: Path) -> Path:
    """Copy an artifact directory and make its files writable so a test can damage them."""
    shutil.copytree(source, target)
    for name in os.listdir(target):
        os.chmod(target / name, 0o644)
    return target


def overwrite(path: Path, data: bytes) -> None:
    """Replace the contents of the existing file ``path`` with ``data`` in place (same inode).

    ``Path.write_bytes`` truncates the file to zero first, which ext4 answers by flushing the old blocks at close
    (``auto_da_alloc``): a few milliseconds per write, which the corruption corpus pays thousands of times. Writing
    over the old bytes and then cutting the file to the new length leaves the same bytes on disk without that flush.
    """
    fd = os.open(path, os.O_WRONLY)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process that imports gencache from this checkout."""
    env = dict(os.environ)
    src = str(TESTS.parent / "src")
    env["PYTHONPATH"] = (
        src + os.pathsep + str(TESTS) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    )
    env.update(extra)
    return env


PYTHON = sys.executable


RESOLVED = resolved_for(Path("out"), PROVENANCE, None)
"""A resolved config of the documented shape for artifacts written with :data:`PROVENANCE` (not sharded)."""
