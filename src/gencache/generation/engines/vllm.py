"""The ``vllm`` engine: vLLM's offline ``LLM`` API, for GPU users (install the ``vllm`` extra).

The effective generation config becomes one ``SamplingParams`` per prompt (:func:`sampling_params_kwargs`): the EOS
list as ``stop_token_ids`` with ``ignore_eos`` (so vLLM stops at gencache's EOS ids and nowhere else), stop strings
kept in the output, special tokens kept, ``max_tokens`` = ``max_new_tokens``, ``n`` = ``num_return_sequences`` and a
per-prompt seed derived from the run's ``seed`` and the sample key. vLLM loads with ``generation_config="vllm"``, so
the teacher's ``generation_config.json`` adds nothing gencache did not resolve.

Each ``CompletionOutput`` is mapped back with gencache's finish rule (:func:`completion_to_answer`): the tokens are
scanned by :class:`~gencache.generation.finish.FinishScanner` and cut at the first finish (``eos``, ``stop_string``
or ``length``); vLLM's own ``finish_reason``/``stop_reason`` are used only when the rule does not fire (a stop
string vLLM's detokenizer saw and the rule's window did not). Texts are re-decoded with gencache's tokenizer, so
they equal ``tokenizer.decode(tokens, skip_special_tokens=False)`` as in every engine.

vLLM is imported only when the engine loads (importing it takes half a minute). Without it installed, creating
the engine is one :class:`~gencache.errors.ConfigError` line saying how to install it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

from gencache.errors import ConfigError, GenerationError, first_line
from gencache.generation.effective import check_engine
from gencache.generation.engines import EngineContext, EngineStats, GeneratedEntry, Prompt, checked_prompts
from gencache.generation.finish import FINISH_EOS, FINISH_LENGTH, FINISH_STOP_STRING, FinishScanner
from gencache.generation.options import VllmOptions
from gencache.generation.settings import ENGINE_VLLM

if TYPE_CHECKING:
    from gencache.generation.effective import EffectiveGeneration
    from gencache.progress import Progress

__all__ = [
    "INSTALL_HINT",
    "VllmEngine",
    "completion_to_answer",
    "create",
    "prompt_seed",
    "request_output_to_entry",
    "sampling_params_kwargs",
]

INSTALL_HINT = (
    'install it with `pip install "gencache[vllm]"` (in a gencache checkout: '
    "`UV_PROJECT_ENVIRONMENT=.venv-vllm uv sync --frozen --extra vllm --no-dev --group test`, then run gencache "
    "with `UV_PROJECT_ENVIRONMENT=.venv-vllm uv run --frozen --extra vllm --no-dev gencache ...`)"
)
#: Prompts handed to one ``LLM.generate`` call; results of a chunk are written before the next chunk starts.
CHUNK = 2048


def prompt_seed(seed: int, key: str) -> int:
    """The sampling seed of one prompt: derived from the run's seed and the sample key, so a prompt's samples do
    not depend on which other prompts run with it (a subset, a shard, the batch composition)."""
    digest = hashlib.sha256(f"{seed}\0{key}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def sampling_params_kwargs(generation: EffectiveGeneration, *, seed: int) -> dict[str, Any]:
    """The ``SamplingParams`` keyword arguments of the effective generation config (no vLLM import).

    Greedy decoding is ``temperature=0``; sampling keeps the effective temperature, top_p, top_k and min_p.
    ``seed`` is the prompt's own seed (:func:`prompt_seed`)."""
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


def vllm_version() -> str | None:
    """The installed vLLM version (read from its metadata, without importing it), or None."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


class VllmEngine:
    """The ``vllm`` engine (see the module docstring)."""

    name = ENGINE_VLLM

    def __init__(self, context: EngineContext) -> None:
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError(f'engine "{self.name}" needs the vllm package, which is not installed: {INSTALL_HINT}.')
        if context.device == "cpu":
            raise ConfigError(
                f'engine "{self.name}" runs on CUDA GPUs; model.device "cpu" needs engine "transformers" or '
                '"transformers-continuous".'
            )
        if context.attn_implementation is not None:
            raise ConfigError(
                f'engine "{self.name}" chooses its own attention backend; remove model.attn_implementation '
                f'({context.attn_implementation!r}) or use engine "transformers".'
            )
        check_engine(self.name, context.generation)
        self.context = context
        self.options = VllmOptions.model_validate(dict(context.options))
        self.llm: Any = None
        self.stats = EngineStats()

    def load(self) -> None:
        """Build the ``LLM``: vLLM loads the weights and reserves its KV cache here."""
        import vllm

        ctx = self.context
        options = self.options
        kwargs: dict[str, Any] = {
            "model": ctx.model_path, "tokenizer": getattr(ctx.tokenizer, "name_or_path", None) or ctx.model_path,
            "dtype": ctx.dtype, "seed": ctx.seed, "gpu_memory_utilization": options.gpu_memory_utilization,
            "tensor_parallel_size": options.tensor_parallel_size, "enforce_eager": options.enforce_eager,
            "generation_config": "vllm",
        }  # fmt: skip
        if options.max_model_len is not None:
            kwargs["max_model_len"] = options.max_model_len
        if options.max_num_seqs is not None:
            kwargs["max_num_seqs"] = options.max_num_seqs
        if ctx.revision:
            kwargs["revision"] = ctx.revision
            kwargs["tokenizer_revision"] = ctx.revision
        try:
            self.llm = vllm.LLM(**kwargs)
        except Exception as exc:
            raise GenerationError(f"vLLM cannot load the teacher {ctx.model_path!r}: {first_line(exc)}") from exc

    def generate(
        self, prompts: Sequence[Prompt], *, progress: Progress | None = None
    ) -> Generator[GeneratedEntry, None, None]:
        import vllm

        ctx = self.context
        checked = checked_prompts(prompts)
        if progress is not None:
            progress.start(len(checked))
        if not checked:
            return
        if self.llm is None:
            raise GenerationError("The teacher is not loaded; call load() first.")
        generation = ctx.generation
        scanner = FinishScanner(
            eos_token_ids=generation.eos_token_ids, stop_strings=generation.stop_strings, tokenizer=ctx.tokenizer,
            max_new_tokens=generation.max_new_tokens,
        )  # fmt: skip
        for start in range(0, len(checked), CHUNK):
            chunk = checked[start : start + CHUNK]
            inputs = [vllm.TokensPrompt(prompt_token_ids=ids) for _, ids in chunk]
            params = [
                vllm.SamplingParams(**sampling_params_kwargs(generation, seed=prompt_seed(ctx.seed, key)))
                for key, _ in chunk
            ]
            try:
                outputs = self.llm.generate(inputs, params, use_tqdm=False)
            except Exception as exc:
                raise GenerationError(f"vLLM generation failed: {first_line(exc)}") from exc
            for (key, ids), output in zip(chunk, outputs, strict=True):
                entry = request_output_to_entry(key, output, scanner, ctx.tokenizer)
                tokens = entry.num_tokens
                self.stats.kept_tokens += tokens
                self.stats.prompt_cells += len(ids) * generation.num_return_sequences
                yield entry
                del entry
                if progress is not None:
                    progress.advance(1, tokens)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "options": self.options.model_dump(mode="json"),
            "version": vllm_version(),
            "sampling_seed": "per prompt: sha256(seed, key)",
        }

    def batching(self) -> dict[str, Any]:
        return {
            "order": f"input order, {CHUNK} prompts per LLM.generate call; vLLM schedules them continuously",
            "unit": "one request per unique sample (n = num_return_sequences)",
            "padding": "none (paged attention)",
            "answer_cut": "gencache's finish rule on each completion's tokens (eos inclusive, stop_string "
            "inclusive, length)",
        }

    def runtime(self) -> dict[str, Any]:
        import platform

        import torch

        from gencache import __version__

        return {
            "dtype": self.context.dtype,
            "attn_implementation": "vllm",
            "device": "cuda",
            "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "device_map": None,
            "gencache": __version__,
            "torch": torch.__version__,
            "transformers": importlib.metadata.version("transformers"),
            "vllm": vllm_version(),
            "cuda": torch.version.cuda,
            "cuda_available": torch.cuda.is_available(),
            "python": platform.python_version(),
        }

    def commit_hash(self) -> str | None:
        return None


def create(context: EngineContext) -> VllmEngine:
    return VllmEngine(context)
