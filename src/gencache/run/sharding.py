"""Sharding a run over several processes: ``--shard I/N``, torchrun and SLURM ranks, key-mod selection.

Pure logic apart from reading the environment; the reader discovers shard directories on disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gencache.artifact.names import make_shard_info, shard_of
from gencache.core.errors import ShardError


@dataclass(frozen=True)
class ShardSpec:
    """Shard ``index`` of ``count`` (zero-based), and where the numbers came from."""

    index: int
    count: int
    origin: str = "--shard"
    local_rank: int | None = None

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ShardError(f"Shard count must be at least 1, got {self.count}.")
        if not 0 <= self.index < self.count:
            raise ShardError(
                f"Shard index {self.index} is out of range for {self.count} shards (use 0..{self.count - 1})."
            )

    def owns(self, key: str) -> bool:
        """True when this shard generates ``key`` (``int(key, 16) % count == index``)."""
        return shard_of(key, self.count) == self.index

    def select(self, keys: Iterable[str]) -> list[str]:
        return [key for key in keys if self.owns(key)]

    def shard_record(self, run_digest: str) -> dict[str, Any]:
        """The manifest's ``summary.shard`` record."""
        return make_shard_info(self.index, self.count, run_digest)


def parse_shard(text: str) -> ShardSpec:
    """Parse ``I/N`` (``I`` zero-based)."""
    parts = text.strip().split("/")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ShardError(f"--shard must look like I/N with zero-based I (for example 0/8), got {text!r}.")
    return ShardSpec(index=int(parts[0]), count=int(parts[1]), origin="--shard")


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ShardError(f"Environment variable {name}={value!r} is not an integer.") from None


def _launcher_shard(
    env: Mapping[str, str], origin: str, count: int | None, rank_var: str, local_var: str
) -> ShardSpec | None:
    """The shard of a launcher that started ``count`` processes (None when it started at most one)."""
    if count is None or count <= 1:
        return None
    rank = _env_int(env, rank_var)
    if rank is None:
        raise ShardError(f"{origin} started {count} processes but {rank_var} is not set; launch through {origin}.")
    local = _env_int(env, local_var)
    if not 0 <= rank < count:
        count_var = "WORLD_SIZE" if origin == "torchrun" else "SLURM_STEP_NUM_TASKS or SLURM_NTASKS"
        raise ShardError(
            f"Environment variable {rank_var}={rank} is out of range for {count} processes ({count_var}={count}; "
            f"use 0..{count - 1}); launch through {origin} or fix the variables."
        )
    return ShardSpec(index=rank, count=count, origin=origin, local_rank=rank if local is None else local)


def shard_from_env(env: Mapping[str, str] | None = None) -> ShardSpec | None:
    """The shard implied by torchrun (``RANK``/``WORLD_SIZE``/``LOCAL_RANK``) or SLURM, or None for one process."""
    env = os.environ if env is None else env
    torchrun = _launcher_shard(env, "torchrun", _env_int(env, "WORLD_SIZE"), "RANK", "LOCAL_RANK")
    if torchrun is not None:
        return torchrun
    # srun sets SLURM_STEP_NUM_TASKS for the step; SLURM_NTASKS alone is also visible to a batch script's own shell.
    ntasks = _env_int(env, "SLURM_STEP_NUM_TASKS")
    ntasks = _env_int(env, "SLURM_NTASKS") if ntasks is None else ntasks
    return _launcher_shard(env, "slurm", ntasks, "SLURM_PROCID", "SLURM_LOCALID")


def resolve_shard(cli_value: str | None, env: Mapping[str, str] | None = None) -> ShardSpec | None:
    """``--shard`` when given (it must agree with a launcher's rank if both exist), else the launcher's rank."""
    from_env = shard_from_env(env)
    if cli_value is None:
        return from_env
    explicit = parse_shard(cli_value)
    if from_env is not None and (from_env.index, from_env.count) != (explicit.index, explicit.count):
        raise ShardError(
            f"--shard {explicit.index}/{explicit.count} disagrees with the {from_env.origin} rank "
            f"{from_env.index}/{from_env.count}; drop --shard under a launcher."
        )
    return from_env or explicit


def device_for_rank(device: str, shard: ShardSpec | None, env: Mapping[str, str] | None = None) -> str:
    """This rank's device under a multi-process launcher: ``cuda`` or ``cuda:0`` is ``cuda:LOCAL_RANK``, or
    ``cuda:0`` when ``CUDA_VISIBLE_DEVICES`` leaves exactly one GPU; another index or ``auto`` is ambiguous."""
    if shard is None or shard.local_rank is None:
        return device
    env = os.environ if env is None else env
    if device in ("cuda", "cuda:0"):
        visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        return "cuda:0" if len(visible) == 1 else f"cuda:{shard.local_rank}"
    if device == "cpu":
        return device
    raise ShardError(
        f"model.device {device!r} cannot be used under {shard.origin} with {shard.count} processes: set it to "
        '"cuda" (each rank uses cuda:LOCAL_RANK).'
    )


def full_split(keys: Sequence[str], most: int) -> int:
    """The largest shard count up to ``most`` that leaves no shard without keys (1 for no keys)."""
    unique = set(keys)
    for count in range(min(most, len(unique)), 1, -1):
        if len({shard_of(key, count) for key in unique}) == count:
            return count
    return 1
