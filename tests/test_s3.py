"""Artifacts on an S3 API server (moto's, on 127.0.0.1): the publish, the commit point, the reader and clean."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from gencache.artifact.header import header_capacity
from gencache.artifact.reader import CacheReader, is_published, verify
from gencache.artifact.upload import PART_BYTES, clean
from gencache.artifact.writer import ArtifactBuild
from gencache.config.paths import parse_s3_url
from gencache.core.errors import FormatError, OutputExistsError
from support.s3 import S3Env
from support.storage_helpers import PROVENANCE, RESOLVED, tokens

ARTIFACT = ["cache.safetensors", "manifest.json", "resolved_config.json"]


def keys_of(count: int) -> list[str]:
    return [hashlib.sha256(str(i).encode()).hexdigest() for i in range(count)]


def build(out: object, entries: dict[str, list[int]]) -> None:
    with ArtifactBuild(out, provenance=PROVENANCE, header_capacity=header_capacity(len(entries), 1, 10**6)) as b:
        for key, ids in entries.items():
            b.writer.add(key, [tokens(ids)], [f"t{key[:4]}"], ["eos"])
        b.writer.finalize(resolved_config=RESOLVED, summary={})
        b.publish()


def test_a_bucket_artifact_is_byte_identical_to_a_local_one(s3_env: S3Env, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    # about 20 MiB of payload: several parts, the first (with the header) sent last
    entries = {key: rng.integers(0, 50_000, 40_000).tolist() for key in keys_of(66)}
    build(tmp_path / "local", entries)
    build(s3_env.url("runs/x"), entries)
    assert s3_env.keys() == [f"runs/x/{name}" for name in ARTIFACT]
    assert s3_env.uploads() == []
    for name in ARTIFACT:
        remote = s3_env.client.get_object(Bucket=s3_env.bucket, Key=f"runs/x/{name}")["Body"].read()
        assert remote == (tmp_path / "local" / name).read_bytes(), name
    reader = CacheReader(s3_env.url("runs/x"), cache_dir=tmp_path / "cache")
    local = CacheReader(tmp_path / "local")
    assert list(reader) == list(local)
    for key in list(local)[:5]:
        assert reader.get_arrays(key).sequences[0].tolist() == entries[key]
    ranged = CacheReader(s3_env.url("runs/x"), download=False, cache_dir=tmp_path / "cache2")
    key = list(local)[7]
    assert ranged.get_arrays(key).sequences[0].tolist() == entries[key]
    assert list((tmp_path / "cache2").glob("**/cache.safetensors")) == []  # range reads, no download
    assert verify(s3_env.url("runs/x")) == []
    assert is_published(s3_env.url("runs/x"), RESOLVED.get("run_digest", "")) is ("run_digest" in RESOLVED)
