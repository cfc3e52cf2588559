"""Format 3's names and constants, and the shard rule: shard ``I`` of ``N``,
``<output_dir>-shard-<I:05d>-of-<N:05d>``, holds exactly the keys ``k`` with ``int(k, 16) % N == I``.
"""

from __future__ import annotations

import re
from typing import Any

from gencache.core.errors import ShardError

FORMAT_VERSION = 3
STORAGE = "safetensors"
PAYLOAD_NAME = "cache.safetensors"
MANIFEST_NAME = "manifest.json"
RESOLVED_NAME = "resolved_config.json"
ARTIFACT_FILES = frozenset({PAYLOAD_NAME, MANIFEST_NAME, RESOLVED_NAME})


def files_problem(where: object, names: set[str]) -> str | None:
    """Why the files ``names`` of ``where`` are not exactly an artifact's three, or None."""
    if names == ARTIFACT_FILES:
        return None
    extra, missing = sorted(names - ARTIFACT_FILES), sorted(ARTIFACT_FILES - names)
    return (
        f"{where}: an artifact holds exactly cache.safetensors, manifest.json and resolved_config.json "
        f"(missing: {', '.join(missing) or 'none'}; extra: {', '.join(extra) or 'none'}); move other files "
        "elsewhere or regenerate."
    )


MAX_HEADER_BYTES = 100_000_000
"""The safetensors limit on the header length (``MAX_HEADER_SIZE`` in safetensors' ``tensor.rs``)."""

LENGTH_PREFIX_BYTES = 8
DIGEST_HEX_CHARS = 64  # a lowercase hex SHA-256: a semantic key, a content digest, a sequence digest
TOKEN_DTYPE = "I64"
TOKEN_BYTES = 8
FINISH_REASONS = ("eos", "stop_string", "length")

TEMP_RE = re.compile(r"^\.(?P<name>.+)\.gencache-(?P<host>.+)-(?P<pid>\d+)-(?P<token>[0-9a-f]{8})\Z")
"""The name of a writer's temporary directory beside its output: ``.<name>.gencache-<host>-<pid>-<random>``."""

MAX_SHARDS = 99_999

_SHARD_SUFFIX_RE = re.compile(r"^(?P<base>.+)-shard-(?P<index>\d{5})-of-(?P<count>\d{5})\Z")


def tensor_name(key: str, index: int) -> str:
    return f"{key}.{index}"


# -- the shard rule ----------------------------------------------------------------------------------------
def shard_dir_name(output_dir: str, index: int, count: int) -> str:
    """``"<output_dir>-shard-<I:05d>-of-<N:05d>"``; a trailing ``/`` of ``output_dir`` is ignored."""
    base = str(output_dir).rstrip("/")
    if not base:
        raise ShardError(f"output_dir {output_dir!r} has no name to suffix with a shard; choose a directory name.")
    if not 0 <= index < count <= MAX_SHARDS:  # five digits each
        raise ShardError(f"shard {index}/{count}: the count must be 1 to {MAX_SHARDS} and the index 0 to count - 1.")
    return f"{base}-shard-{index:05d}-of-{count:05d}"


def parse_shard_dir_name(name: str) -> tuple[str, int, int] | None:
    """``(base, index, count)`` of a shard directory name made by :func:`shard_dir_name`, or None."""
    match = _SHARD_SUFFIX_RE.match(name)
    if match is None or not int(match["index"]) < int(match["count"]):
        return None
    return match["base"], int(match["index"]), int(match["count"])


def shard_of(key: str, count: int) -> int:
    """The shard (``key-mod`` rule) that owns ``key`` in a run split ``count`` ways."""
    return int(key, 16) % count


def make_shard_info(index: int, count: int, run_digest: str) -> dict[str, Any]:
    """The ``summary.shard`` object of a sharded run's manifest."""
    return {"index": index, "count": count, "rule": "key-mod", "run_digest": run_digest}


# -- the writer's records ----------------------------------------------------------------------------------
Record = tuple[Any, ...]
"""What the writer keeps of one appended entry, flat so that it is one small tuple: ``(start, n_0, digest_0,
text_0, reason_0, n_1, digest_1, text_1, reason_1, ...)``. ``start`` is the offset of the entry's first sequence
relative to the data start (an entry's sequences are contiguous, in order); per sequence: its token count, the raw
32-byte SHA-256 of its bytes, its text and its finish reason: ``record[1::RECORD_STRIDE]`` are the token counts,
``record[4::RECORD_STRIDE]`` the finish reasons."""

RECORD_STRIDE = 4  # fields per sequence, after the leading start
