"""Artifacts on an S3 API server (moto's, on 127.0.0.1): the publish, the commit point, the reader and clean."""

from __future__ import annotations

import hashlib
import multiprocessing
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from gencache.artifact.header import header_capacity
from gencache.artifact.mixture import open_caches
from gencache.artifact.reader import CacheReader, is_published, verify
from gencache.artifact.remote import RemoteArtifact
from gencache.artifact.report import inspect_report
from gencache.artifact.upload import Lease, ObjectUpload, clean
from gencache.artifact.writer import ArtifactBuild
from gencache.config.paths import parse_s3_url
from gencache.core.errors import FormatError, OutputExistsError, WriteError
from gencache.generation.teacher import load_tokenizer
from gencache.training.dataset import DistillationDataset
from support.config_factory import musique, write_config
from support.s3 import FaultProxy, S3Env, S3Server
from support.storage_helpers import PROVENANCE, RESOLVED, child_env, tokens

ARTIFACT = ["cache.safetensors", "manifest.json", "resolved_config.json"]


def keys_of(count: int) -> list[str]:
    return [hashlib.sha256(str(i).encode()).hexdigest() for i in range(count)]


def build(out: object, entries: dict[str, list[int]]) -> None:
    with ArtifactBuild(out, provenance=PROVENANCE, header_capacity=header_capacity(len(entries), 1, 10**6)) as b:
        for key, ids in entries.items():
            b.writer.add(key, [tokens(ids)], [f"t{key[:4]}"], ["eos"])
        b.writer.finalize(resolved_config=RESOLVED, summary={})
        b.publish()


def test_a_bucket_artifact_is_byte_identical_to_a_local_one(
    s3_env: S3Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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
    requests: list[str] = []
    read = RemoteArtifact.read

    def counted(self: RemoteArtifact, name: str, start: int | None = None, length: int | None = None) -> bytes:
        requests.append(name)
        return read(self, name, start, length)

    monkeypatch.setattr(RemoteArtifact, "read", counted)
    assert ranged.get_arrays(key).sequences[0].tolist() == entries[key]
    assert requests == ["cache.safetensors"]  # a first read checks and returns the bytes of one range request
    assert list((tmp_path / "cache2").glob("**/cache.safetensors")) == []  # range reads, no download
    assert verify(s3_env.url("runs/x")) == []
    assert is_published(s3_env.url("runs/x"), RESOLVED.get("run_digest", "")) is ("run_digest" in RESOLVED)


def test_a_rerun_recognises_a_bucket_artifact_by_range_reads_alone(
    s3_env: S3Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # resuming reads each published shard's header and manifest tail, never its entries: nothing is downloaded
    build(s3_env.url("runs/y"), {key: [1, 2, 3] for key in keys_of(3000)})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert is_published(s3_env.url("runs/y"), RESOLVED.get("run_digest", "")) is ("run_digest" in RESOLVED)
    assert not (tmp_path / "xdg").exists() or not any(p.is_file() for p in (tmp_path / "xdg").rglob("*"))


# -- the command line against the bucket -----------------------------------------------------------------------
def gencache(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gencache", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )


def start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gencache", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=child_env(),
    )


def digests(reader: CacheReader) -> dict[str, str]:
    return {key: reader.metadata(key)["content_digest"] for key in reader}  # type: ignore[index]


@pytest.mark.slow
def test_generate_to_a_bucket_equals_generating_to_disk(s3_env: S3Env, tmp_path: Path, tiny_teacher_dir: Path) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)  # the engines write the same files (the vLLM demo uses a bucket)
    local = gencache("generate", str(config), cwd=tmp_path, env=child_env())
    assert local.returncode == 0, local.stderr
    url = s3_env.url("runs/one")
    remote = gencache("generate", str(config), "--output-dir", url, cwd=tmp_path, env=child_env())
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout.strip() == url
    assert s3_env.keys() == [f"runs/one/{name}" for name in ARTIFACT] and s3_env.uploads() == []
    on_disk = tmp_path / "out" / "cache.safetensors"
    assert s3_env.client.get_object(Bucket=s3_env.bucket, Key="runs/one/cache.safetensors")["Body"].read() == (
        on_disk.read_bytes()
    )
    assert digests(CacheReader(url)) == digests(CacheReader(tmp_path / "out"))
    inspected = gencache("inspect", url, "--json", cwd=tmp_path, env=child_env())
    assert inspected.returncode == 0, inspected.stderr
    assert gencache("verify", url, cwd=tmp_path, env=child_env()).stdout.startswith("OK")
    exported = gencache("export", url, "--out", str(tmp_path / "rows.jsonl"), cwd=tmp_path, env=child_env())
    assert exported.returncode == 0, exported.stderr
    scored = gencache("score", url, "--json", cwd=tmp_path, env=child_env())  # the quality commands read it too
    assert scored.returncode == 0, scored.stderr
    audited = gencache("audit", url, "--samples", "1", cwd=tmp_path, env=child_env())
    assert audited.returncode == 0 and "1 equal" in audited.stdout, audited.stdout + audited.stderr
    tokenizer = load_tokenizer(str(tiny_teacher_dir))
    from_bucket, from_disk = DistillationDataset(url, tokenizer), DistillationDataset(tmp_path / "out", tokenizer)
    assert len(from_bucket) == len(from_disk) > 0
    for i in range(len(from_disk)):  # training reads the same items from the bucket as from disk
        ours, theirs = from_bucket[i], from_disk[i]
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(v, theirs[k]) if torch.is_tensor(v) else v == theirs[k] for k, v in ours.items())
    # the same output again: refused before the teacher loads, with the way out
    again = gencache("generate", str(config), "--output-dir", url, cwd=tmp_path, env=child_env())
    assert again.returncode == 2
    assert again.stderr.count("error:") == 1 and "already exists" in again.stderr
    assert "teacher loaded" not in again.stderr


@pytest.mark.slow
def test_shards_on_a_bucket_resume_from_what_is_committed(
    s3_env: S3Env, tmp_path: Path, tiny_teacher_dir: Path
) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    url = s3_env.url("runs/split")
    first = gencache("generate", str(config), "--output-dir", url, "--shards", "2", cwd=tmp_path, env=child_env())
    assert first.returncode == 0, first.stderr
    one = s3_env.url("runs/split-shard-00001-of-00002")
    s3_env.client.delete_object(Bucket=s3_env.bucket, Key="runs/split-shard-00001-of-00002/manifest.json")
    for name in ("cache.safetensors", "resolved_config.json"):
        s3_env.client.delete_object(Bucket=s3_env.bucket, Key=f"runs/split-shard-00001-of-00002/{name}")
    rerun = gencache("generate", str(config), "--output-dir", url, "--shards", "2", cwd=tmp_path, env=child_env())
    assert rerun.returncode == 0, rerun.stderr
    assert "shard-00000-of-00002" in rerun.stderr and one in rerun.stderr
    whole = gencache("generate", str(config), cwd=tmp_path, env=child_env())
    assert whole.returncode == 0, whole.stderr
    assert digests(open_caches(url)) == digests(CacheReader(tmp_path / "out"))  # type: ignore[arg-type]


@pytest.mark.slow
def test_bad_urls_are_one_line_before_the_teacher_loads(
    s3_env: S3Env, tmp_path: Path, tiny_teacher_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    s3_env.client.put_object(Bucket=s3_env.bucket, Key="taken/x", Body=b"1")
    cases = {
        "s3://": "names no valid bucket",
        "s3://Bad_Bucket/x": "names no valid bucket",
        "s3://gencache-test-missing/x": "does not exist",
        f"s3://{s3_env.bucket}": "names a bucket but no prefix",
        s3_env.url("taken"): "already exists",
        "gs://bucket/x": "is a URL (gs://)",
    }
    for url, message in cases.items():
        result = gencache("generate", str(config), "--output-dir", url, cwd=tmp_path, env=child_env())
        assert result.returncode == 2, (url, result.stderr)
        assert result.stderr.count("error:") == 1 and message in result.stderr, (url, result.stderr)
        assert "teacher loaded" not in result.stderr
    no_credentials = child_env(AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY="")
    result = gencache("generate", str(config), "--output-dir", s3_env.url("y"), cwd=tmp_path, env=no_credentials)
    assert result.returncode == 2 and "no AWS credentials" in result.stderr, result.stderr
    assert not list((tmp_path).glob("s3*")) and s3_env.keys() == ["taken/x"]


# -- killed, racing and failing writers -------------------------------------------------------------------------
def writer(url: str, mebibytes: int, *, pause: bool = True) -> subprocess.Popen[str]:
    script = Path(__file__).parent / "support" / "s3_writer.py"
    return subprocess.Popen(
        [sys.executable, str(script), url, str(mebibytes), *(["pause"] if pause else [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )


def test_a_killed_writer_leaves_nothing_readable_and_clean_removes_it(s3_env: S3Env, tmp_path: Path) -> None:
    url = s3_env.url("runs/killed")
    child = writer(url, 16)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    assert len(s3_env.uploads("runs/killed/")) == 1 and s3_env.keys() == ["runs/.killed.gencache-lock"]
    assert clean(parse_s3_url(s3_env.url("runs"))) == []  # a live writer's upload and lock are kept
    child.kill()
    child.wait()
    s3_env.client.put_object(Bucket=s3_env.bucket, Key="runs/keep/notes.txt", Body=b"not gencache's")
    with pytest.raises(FormatError, match="no objects under it"):
        CacheReader(url)
    done = subprocess.run(
        [sys.executable, "-m", "gencache", "clean", s3_env.url("runs")],
        capture_output=True,
        text=True,
        env=child_env(),
        check=True,
    )
    assert "incomplete upload" in done.stdout and "stale lock" in done.stdout
    assert s3_env.uploads() == [] and s3_env.keys() == ["runs/keep/notes.txt"]  # nothing but what it left
    rerun = writer(url, 16, pause=False)
    assert rerun.wait(timeout=300) == 0, rerun.stderr.read() if rerun.stderr else ""
    assert len(CacheReader(url, cache_dir=tmp_path)) == 16
    assert clean(parse_s3_url(s3_env.url("runs"))) == []  # a committed artifact is never touched
    assert len(s3_env.keys()) == 4


def test_two_writers_racing_for_one_prefix_make_exactly_one_artifact(s3_env: S3Env) -> None:
    url = s3_env.url("runs/race")
    first = writer(url, 1)
    assert first.stdout is not None and first.stdout.readline().strip() == "ready"
    second = writer(url, 1)
    assert second.wait(timeout=300) == 2
    assert second.stderr is not None
    lines = second.stderr.read().strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and "being written by another gencache run" in lines[0]
    first.communicate("\n", timeout=300)
    assert first.returncode == 0
    assert s3_env.keys() == [f"runs/race/{name}" for name in ARTIFACT] and s3_env.uploads() == []


def test_a_stop_just_after_the_server_created_the_lock_leaves_nothing(
    s3_env: S3Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_put = Lease._put

    def put_then_stop(self: Lease, **conditions: str) -> None:
        real_put(self, **conditions)
        raise KeyboardInterrupt  # a signal as the server's answer arrives

    monkeypatch.setattr(Lease, "_put", put_then_stop)
    with (
        pytest.raises(KeyboardInterrupt),
        ArtifactBuild(s3_env.url("runs/s"), provenance=PROVENANCE, header_capacity=256),
    ):
        pass
    assert s3_env.keys() == [] and s3_env.uploads() == []


def test_the_server_refuses_a_second_commit_even_without_the_lock(
    s3_env: S3Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    class NoLease:  # a lost lock: two writers reach the commit
        def __init__(self, where: object) -> None: ...

        def acquire(self) -> None: ...

        def release(self) -> None: ...

    monkeypatch.setattr("gencache.artifact.writer.Lease", NoLease)
    url = s3_env.url("runs/commit")
    entries = {key: [i] * 700_000 for i, key in enumerate(keys_of(2))}  # parts on the server before the commit
    capacity = header_capacity(2, 1, 700_000)
    with ArtifactBuild(url, provenance=PROVENANCE, header_capacity=capacity) as late:
        for key, ids in entries.items():
            late.writer.add(key, [tokens(ids)], ["x"], ["eos"])
        build(url, {key: ids[:5] for key, ids in entries.items()})  # the winner commits first
        with pytest.raises(OutputExistsError, match="published by another writer first"):
            late.writer.finalize(resolved_config=RESOLVED, summary={})
    assert s3_env.keys() == [f"runs/commit/{name}" for name in ARTIFACT] and s3_env.uploads() == []
    assert CacheReader(url).get_arrays(keys_of(2)[1]).sequences[0].tolist() == [1] * 5


@pytest.mark.slow
def test_a_store_that_stops_answering_ends_the_run_with_one_line(s3_env: S3Env, s3_server: S3Server) -> None:
    url = s3_env.url("runs/down")
    child = writer(url, 16)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    s3_server.stop()
    try:
        _, err = child.communicate("\n", timeout=600)
    finally:
        s3_server.start()
    assert child.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "check that the store is reachable" in lines[0], err
    s3_server.client().create_bucket(Bucket=s3_env.bucket)  # the restarted server is empty
    assert writer(url, 1, pause=False).wait(timeout=300) == 0


def test_throttling_and_slow_answers_are_retried(s3_env: S3Env, monkeypatch: pytest.MonkeyPatch) -> None:
    entries = {key: [i] * 400_000 for i, key in enumerate(keys_of(4))}  # 12 MiB: two parts
    with FaultProxy(s3_env.env["AWS_ENDPOINT_URL"]) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        proxy.fail(2, match="partNumber=")
        proxy.fail(1, method="PUT", match="manifest.json")
        proxy.delay(2.0, method="POST", match="uploads", times=1)
        build(s3_env.url("runs/flaky"), entries)
        payload = sum(len(ids) * 8 for ids in entries.values())
        assert proxy.sent["PUT"] >= payload  # every part, plus the refused attempts
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env.env["AWS_ENDPOINT_URL"])
    reader = CacheReader(s3_env.url("runs/flaky"), download=False)
    assert all(reader.get_arrays(key).sequences[0].tolist() == ids for key, ids in entries.items())


def _read_all(url: str, cache: str) -> list[list[int]]:
    reader = CacheReader(url, cache_dir=cache)
    return [reader.get_arrays(key).sequences[0].tolist() for key in reader]


def test_readers_of_a_node_share_one_download_and_never_a_stale_one(s3_env: S3Env, tmp_path: Path) -> None:
    url, cache = s3_env.url("runs/shared"), tmp_path / "cache"
    first = {key: [i] * 1000 for i, key in enumerate(keys_of(8))}
    build(url, first)
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        results = pool.starmap(_read_all, [(url, str(cache))] * 3)
    assert results == [[first[key] for key in sorted(first)]] * 3
    assert len(list(cache.glob("**/cache.safetensors"))) == 1 and not list(cache.glob("**/.cache.safetensors.*"))
    reader = pickle.loads(pickle.dumps(CacheReader(url, cache_dir=cache)))  # a DataLoader worker's copy
    assert reader.get_arrays(keys_of(8)[3]).sequences[0].tolist() == [3] * 1000
    for name in ARTIFACT:  # the artifact is replaced (removed by hand, generated again): a new version
        s3_env.client.delete_object(Bucket=s3_env.bucket, Key=f"runs/shared/{name}")
    second = {key: [i + 100] * 1000 for i, key in enumerate(keys_of(8))}
    build(url, second)
    assert _read_all(url, str(cache)) == [second[key] for key in sorted(second)]
    assert len(list(cache.glob("**/cache.safetensors"))) == 2


def test_inspect_reads_the_manifest_and_the_header_never_the_payload(
    s3_env: S3Env, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    entries = {key: [i] * 200_000 for i, key in enumerate(keys_of(16))}  # 25 MiB of payload
    build(s3_env.url("runs/big"), entries)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with FaultProxy(s3_env.env["AWS_ENDPOINT_URL"]) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        report = inspect_report([s3_env.url("runs/big")])
        assert report.exit_code == 0
        manifest = s3_env.client.head_object(Bucket=s3_env.bucket, Key="runs/big/manifest.json")["ContentLength"]
        assert proxy.received["GET"] < manifest + 64 * 1024 + 20_000  # the listing, the manifest, the header


@pytest.mark.slow
def test_a_stopped_generate_leaves_nothing_on_the_bucket(s3_env: S3Env, tmp_path: Path, tiny_teacher_dir: Path) -> None:
    config = write_config(tmp_path, tiny_teacher_dir, data_configs=[musique(num_samples=4)], gen_batch_size=1)
    run = start("generate", str(config), "--output-dir", s3_env.url("runs/stopped"), cwd=tmp_path)
    deadline = time.monotonic() + 300
    while s3_env.keys() != ["runs/.stopped.gencache-lock"]:  # the build has begun
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.05)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    assert s3_env.keys() == [] and s3_env.uploads() == []


def test_a_failed_upload_ends_the_build_and_leaves_nothing_on_the_bucket(
    s3_env: S3Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    send = ObjectUpload.send

    def fail_part_2(upload: ObjectUpload, number: int, data: bytes) -> None:
        if number == 2:
            raise WriteError("the store went away")
        send(upload, number, data)

    monkeypatch.setattr(ObjectUpload, "send", fail_part_2)
    url, entries = s3_env.url("runs/failed"), {key: [i] * 393_216 for i, key in enumerate(keys_of(5))}  # 3 MiB
    with (
        pytest.raises(WriteError, match="went away"),
        ArtifactBuild(url, provenance=PROVENANCE, header_capacity=header_capacity(5, 1, 393_216)) as b,
    ):
        for key, ids in entries.items():
            b.writer.add(key, [tokens(ids)], ["x"], ["eos"])
    assert s3_env.keys() == [] and s3_env.uploads() == []
