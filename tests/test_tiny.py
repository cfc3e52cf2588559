"""The tiny teacher: deterministic files, loadable offline, Qwen3-like tokenizer, template and generation config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gencache.generation.tiny import ENDOFTEXT, IM_END, IM_START, TINY_MAX_NEW_TOKENS, build_tiny_teacher

EXPECTED_FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
}


def _files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir()) if path.is_file()}


def test_same_seed_gives_byte_identical_files(tiny_teacher_dir: Path, tmp_path: Path) -> None:
    again = _files(build_tiny_teacher(tmp_path / "again", seed=0))
    first = _files(tiny_teacher_dir)
    assert set(first) >= EXPECTED_FILES
    assert first == again


def test_building_it_leaves_the_progress_bars_as_they_were(tmp_path: Path) -> None:
    """transformers' bar on and huggingface_hub's off (as a notebook may have them) stay so: re-enabling
    transformers' bar turns the hub's back on too."""
    import huggingface_hub.utils
    import transformers.utils.logging as transformers_logging

    was_enabled, hub_was_disabled = (
        transformers_logging.is_progress_bar_enabled(),
        huggingface_hub.utils.are_progress_bars_disabled(),
    )
    transformers_logging.enable_progress_bar()
    huggingface_hub.utils.disable_progress_bars()
    try:
        build_tiny_teacher(tmp_path / "bars", seed=0)
        assert transformers_logging.is_progress_bar_enabled()
        assert huggingface_hub.utils.are_progress_bars_disabled()
    finally:
        (transformers_logging.enable_progress_bar if was_enabled else transformers_logging.disable_progress_bar)()
        if hub_was_disabled:
            huggingface_hub.utils.disable_progress_bars()
        else:
            huggingface_hub.utils.enable_progress_bars()


def test_seed_changes_weights_only(tiny_teacher_dir: Path, tmp_path: Path) -> None:
    other = _files(build_tiny_teacher(tmp_path / "seed1", seed=1))
    first = _files(tiny_teacher_dir)
    assert set(other) == set(first)
    assert other["model.safetensors"] != first["model.safetensors"]
    assert {name for name in first if first[name] != other[name]} == {"model.safetensors"}


def test_building_leaves_the_global_torch_rng_alone(tmp_path: Path) -> None:
    import torch

    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    build_tiny_teacher(tmp_path / "rng", seed=5)
    assert torch.equal(torch.rand(3), expected)


def test_loads_offline_with_auto_classes(tiny_teacher_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(str(tiny_teacher_dir))
    model: Any = AutoModelForCausalLM.from_pretrained(str(tiny_teacher_dir), dtype=torch.float32)
    assert model.config.model_type == "qwen3"
    assert model.config.vocab_size == len(tokenizer)
    assert model.config.hidden_size <= 128
    assert 500 <= len(tokenizer) <= 2048
    assert tokenizer.eos_token == IM_END
    assert tokenizer.pad_token == ENDOFTEXT
    assert tokenizer.convert_tokens_to_ids(IM_START) != tokenizer.unk_token_id
    ids = tokenizer("Alice was born in Lisbon. Ünïcödé 🙂", add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == "Alice was born in Lisbon. Ünïcödé 🙂"
    # Control tokens written as text become their special ids.
    marked = tokenizer("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False).input_ids
    assert marked[0] == tokenizer.convert_tokens_to_ids(IM_START)
    assert marked[-1] == tokenizer.convert_tokens_to_ids(IM_END)
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tokenizer))


def test_generation_config_is_shaped_like_qwen3(tiny_teacher_dir: Path, tiny_tokenizer: Any) -> None:
    data = json.loads((tiny_teacher_dir / "generation_config.json").read_text(encoding="utf-8"))
    im_end = tiny_tokenizer.convert_tokens_to_ids(IM_END)
    endoftext = tiny_tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    assert data["eos_token_id"] == [im_end, endoftext]
    assert data["pad_token_id"] == endoftext
    assert data["do_sample"] is True
    assert {"temperature", "top_p", "top_k"} <= set(data)
    assert data["max_new_tokens"] == TINY_MAX_NEW_TOKENS
    config = json.loads((tiny_teacher_dir / "config.json").read_text(encoding="utf-8"))
    assert config["vocab_size"] == len(tiny_tokenizer)


@pytest.mark.parametrize("enable_thinking", [False, True])
def test_chat_template_has_an_empty_think_block_unless_thinking(tiny_tokenizer: Any, enable_thinking: bool) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is Oslo?"}]
    rendered = tiny_tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=enable_thinking
    )
    head = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhere is Oslo?<|im_end|>\n"
    head += "<|im_start|>assistant\n"
    assert rendered == head if enable_thinking else rendered == head + "<think>\n\n</think>\n\n"
    no_prompt = tiny_tokenizer.apply_chat_template(messages[1:], tokenize=False, add_generation_prompt=False)
    assert no_prompt == "<|im_start|>user\nWhere is Oslo?<|im_end|>\n"
