"""Shard selection, launcher detection and per-rank devices (pure logic)."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest

from gencache.core.errors import ShardError
from gencache.run.plan import ShardSpec, resolve_shard, shard_from_env

KEYS = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(200)]


def test_shards_partition_the_keys_by_key_mod() -> None:
    shards = [ShardSpec(index=i, count=3) for i in range(3)]
    selected = [shard.select(KEYS) for shard in shards]
    assert sorted(k for part in selected for k in part) == sorted(KEYS)
    assert all(int(k, 16) % 3 == i for i, part in enumerate(selected) for k in part)
    assert all(part for part in selected)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("3", "I/N"), ("a/b", "I/N"), ("1/2/3", "I/N"), ("-1/2", "I/N"), ("2/2", "I/N"), ("0/0", "I/N")],
)
def test_bad_shard_specs_are_rejected(text: str, fragment: str) -> None:
    with pytest.raises(ShardError, match=fragment):
        resolve_shard(text, {})


def test_torchrun_and_slurm_environments() -> None:
    assert shard_from_env({}) is None
    assert shard_from_env({"WORLD_SIZE": "1", "RANK": "0"}) is None
    spec = shard_from_env({"WORLD_SIZE": "16", "RANK": "11", "LOCAL_RANK": "3"})
    assert spec == ShardSpec(index=11, count=16, origin="torchrun", local_rank=3)
    slurm = shard_from_env({"SLURM_NTASKS": "4", "SLURM_PROCID": "2", "SLURM_LOCALID": "0"})
    assert slurm == ShardSpec(index=2, count=4, origin="slurm", local_rank=0)
    step = shard_from_env({"SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "3"})
    assert step == ShardSpec(index=3, count=4, origin="slurm", local_rank=3)
    with pytest.raises(ShardError, match="RANK"):
        shard_from_env({"WORLD_SIZE": "2"})


def test_explicit_shard_must_agree_with_launcher() -> None:
    env = {"WORLD_SIZE": "4", "RANK": "1", "LOCAL_RANK": "1"}
    assert resolve_shard("1/4", env) == ShardSpec(index=1, count=4, origin="torchrun", local_rank=1)
    with pytest.raises(ShardError, match="disagrees"):
        resolve_shard("0/4", env)
    assert resolve_shard("2/5", {}) == ShardSpec(index=2, count=5)
    assert resolve_shard(None, {}) is None


def test_devices_map_to_the_local_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    from gencache.run import preflight

    monkeypatch.setattr(preflight, "glob", SimpleNamespace(glob=lambda pattern: ["/dev/nvidia0"]))  # a GPU machine

    def device_for_rank(device: str, shard: ShardSpec | None, env: dict[str, str]) -> str:
        return preflight._device(device, shard, env)[0]

    spec = ShardSpec(index=5, count=8, origin="torchrun", local_rank=5)
    all_gpus = {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    assert device_for_rank("cuda", spec, all_gpus) == "cuda:5"
    assert device_for_rank("cuda:0", spec, {}) == "cuda:5"
    assert device_for_rank("cuda", spec, {"CUDA_VISIBLE_DEVICES": "5"}) == "cuda:0"  # srun --gpus-per-task 1
    assert device_for_rank("cpu", spec, all_gpus) == "cpu"
    with pytest.raises(ShardError, match="cuda:LOCAL_RANK"):
        device_for_rank("cuda:1", spec, all_gpus)
    with pytest.raises(ShardError):
        device_for_rank("auto", spec, all_gpus)
    assert device_for_rank("cuda:1", ShardSpec(index=0, count=2), {}) == "cuda:1"  # --shard without a launcher
    assert device_for_rank("cuda:1", None, {}) == "cuda:1"


@pytest.mark.parametrize(
    ("env", "variable"),
    [({"WORLD_SIZE": "2", "RANK": "2"}, "RANK=2"), ({"SLURM_NTASKS": "2", "SLURM_PROCID": "5"}, "SLURM_PROCID=5")],
)
def test_a_launcher_rank_out_of_range_names_the_variable(env: dict[str, str], variable: str) -> None:
    from gencache.core.errors import ShardError
    from gencache.run.plan import shard_from_env

    with pytest.raises(ShardError, match=f"{variable} is out of range"):
        shard_from_env(env)
