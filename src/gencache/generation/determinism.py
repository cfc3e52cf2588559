"""What decides whether two runs of the same config can give different tokens, as ``resolved_config.json`` records
it (``runtime.determinism``): batch-invariant kernels, torch's deterministic-algorithm flag and the cuBLAS
workspace setting, prefix caching, chunked prefill, the tensor-parallel size, the attention backend in use, and the
GPU with its compute capability.

Greedy tokens are a function of the logits; in half precision on a GPU the logits of a row depend on the batch
shape around it unless the kernels are batch-invariant, so these facts are what an audit's reader needs to judge a
difference. torch is imported inside :func:`determinism_facts` only.
"""

from __future__ import annotations

import os
from typing import Any

BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"
"""vLLM's switch for its batch-invariant kernels (read when vLLM is imported)."""


def env_batch_invariant() -> bool:
    """Whether vLLM's batch-invariant switch is set in this process's environment."""
    return os.environ.get(BATCH_INVARIANT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _gpu(device: str) -> tuple[str | None, str | None]:
    import torch

    if not device.startswith(("cuda", "auto")) or not torch.cuda.is_available():
        return None, None
    index = torch.device(device).index if device.startswith("cuda") else None
    index = 0 if index is None else index
    major, minor = torch.cuda.get_device_capability(index)
    return torch.cuda.get_device_name(index), f"{major}.{minor}"


def determinism_facts(
    *,
    device: str,
    batch_invariant: bool,
    prefix_caching: bool,
    chunked_prefill: bool | None,
    tensor_parallel_size: int,
    attention_backend: str | None,
) -> dict[str, Any]:
    """The determinism block of ``resolved_config.json``'s runtime: the engine's own facts (given) and the process's
    (torch's deterministic-algorithm flags, ``CUBLAS_WORKSPACE_CONFIG``, the GPU of ``device``). ``chunked_prefill``
    None: not known for this engine."""
    import torch

    gpu_name, capability = _gpu(device)
    return {
        "batch_invariant": batch_invariant,
        "torch_deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "torch_deterministic_warn_only": bool(torch.is_deterministic_algorithms_warn_only_enabled()),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "prefix_caching": prefix_caching,
        "chunked_prefill": chunked_prefill,
        "tensor_parallel_size": tensor_parallel_size,
        "attention_backend": attention_backend,
        "gpu_name": gpu_name,
        "gpu_compute_capability": capability,
    }
