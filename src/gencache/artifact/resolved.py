"""The shape of ``resolved_config.json``, what it must agree on with the manifest, and the identity of a local
teacher that it records. It is provenance for humans, never a compatibility gate, but ``gencache verify`` still
checks that what a run wrote is whole and agrees with the manifest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from gencache.artifact.names import FORMAT_VERSION
from gencache.core.canonical import json_digest


class _Resolved(msgspec.Struct):
    """The top-level fields of ``resolved_config.json`` and their JSON types (more are allowed)."""

    format_version: int
    gencache_version: str
    config: dict[str, Any]
    overrides: dict[str, Any]
    output_dir: str
    run_digest: str
    shard: dict[str, Any] | None
    sources: list[Any]
    data_kwargs: list[Any]
    generation: dict[str, Any]
    tokenizer: dict[str, Any]
    engine: dict[str, Any]
    batching: dict[str, Any] | None
    model: dict[str, Any]
    runtime: dict[str, Any]
    samples: dict[str, Any]


DIGEST_FIELD = "resolved_digest"
"""The SHA-256 of the canonical JSON of every other field: a hand edit of the file (a seed, the generation block)
that does not also recompute it fails ``gencache verify``."""


def with_resolved_digest(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """``resolved`` with :data:`DIGEST_FIELD` set over its other fields."""
    body = {key: value for key, value in resolved.items() if key != DIGEST_FIELD}
    return {**body, DIGEST_FIELD: json_digest(body)}


def nested(value: Any, *path: str) -> Any:
    """``value[path[0]][path[1]]...``, or None where a step is not a mapping."""
    for part in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def resolved_config_problems(
    resolved: Mapping[str, Any], provenance: Mapping[str, Any], shard: Mapping[str, Any] | None
) -> list[str]:
    """Every way ``resolved`` is not the resolved config of an artifact with this ``provenance`` and ``shard``
    record; empty when it is. One without ``gencache_version`` and ``config`` was not written by a gencache run
    (but by a direct :class:`gencache.artifact.writer.ArtifactBuild`) and only needs to be a JSON object."""
    if "gencache_version" not in resolved and "config" not in resolved:
        return []
    try:
        msgspec.convert(resolved, _Resolved)
    except msgspec.ValidationError as error:
        return [f"resolved_config.json is not a gencache run's resolved config: {error}"]
    problems = []
    recorded = resolved.get(DIGEST_FIELD)
    if recorded is not None and recorded != with_resolved_digest(resolved)[DIGEST_FIELD]:
        problems.append(f"resolved_config.json does not match its {DIGEST_FIELD} (a field was edited)")
    agreements = [
        ("format_version", resolved["format_version"], FORMAT_VERSION),
        ("model.model_path", nested(resolved, "model", "model_path"), provenance.get("model_path")),
        ("tokenizer", resolved["tokenizer"], provenance.get("tokenizer")),
        ("config.model.dtype", nested(resolved, "config", "model", "dtype"), provenance.get("dtype")),
    ]
    if shard is not None:
        agreements.append(("run_digest", resolved["run_digest"], shard.get("run_digest")))
    for name, found, expected in agreements:
        if found != expected:
            problems.append(
                f"resolved_config.json {name} is {found!r} but the manifest records {expected!r} (it was edited)"
            )
    return problems


#: The files of a local teacher or tokenizer directory that say what it is (besides its safetensors headers).
IDENTITY_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "merges.txt",
        "tokenizer.model",
        "chat_template.jinja",
        "model.safetensors.index.json",
    }
)


def local_identity(path: str) -> str | None:
    """What a local teacher (or tokenizer) directory is, wherever it lies: the SHA-256 over the digests of its config
    and tokenizer files and of its safetensors headers (never the weights' bytes); None for a hub id."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        return None
    parts: dict[str, str] = {}
    for file in sorted(directory.iterdir()):
        if file.name in IDENTITY_FILES and file.is_file():
            parts[file.name] = hashlib.sha256(file.read_bytes()).hexdigest()
        elif file.suffix == ".safetensors" and file.is_file():
            with open(file, "rb") as handle:
                header = handle.read(int.from_bytes(handle.read(8), "little"))
            parts[file.name] = hashlib.sha256(header).hexdigest()
    return json_digest(parts)
