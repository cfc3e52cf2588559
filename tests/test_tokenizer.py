"""prepare_tokenizer and tokenizer_state: the tokenizer state generation records and training compares."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gencache.core.errors import ConfigError
from gencache.core.tokenizer import prepare_tokenizer, tokenizer_state


def test_left_padding_and_an_existing_pad_token_is_kept(golden_tokenizer: Any) -> None:
    tok = prepare_tokenizer(copy.deepcopy(golden_tokenizer))
    assert tok.padding_side == "left"
    assert tok.pad_token == "<|endoftext|>"
    assert tokenizer_state(tok) == {
        "padding_side": "left",
        "pad_token_id": tok.convert_tokens_to_ids("<|endoftext|>"),
        "eos_token_id": tok.convert_tokens_to_ids("<|im_end|>"),
    }


def test_pad_falls_back_to_eos(golden_tokenizer: Any) -> None:
    tok = copy.deepcopy(golden_tokenizer)
    tok.pad_token = None
    assert tok.pad_token_id is None
    prepare_tokenizer(tok)
    assert tok.pad_token == tok.eos_token == "<|im_end|>"
    assert tokenizer_state(tok)["pad_token_id"] == tok.eos_token_id


def test_neither_pad_nor_eos_is_an_error(golden_tokenizer: Any) -> None:
    tok = copy.deepcopy(golden_tokenizer)
    tok.pad_token = None
    tok.eos_token = None
    with pytest.raises(ConfigError, match="neither a pad token nor an EOS token"):
        prepare_tokenizer(tok)


def test_state_from_a_mapping_and_bad_inputs() -> None:
    state = {"padding_side": "left", "pad_token_id": 0, "eos_token_id": None}
    assert tokenizer_state(state) == state
    with pytest.raises(ConfigError, match="missing eos_token_id"):
        tokenizer_state({"padding_side": "left", "pad_token_id": 0})
    with pytest.raises(ConfigError, match="integer or null"):
        tokenizer_state({"padding_side": "left", "pad_token_id": True, "eos_token_id": 1})
    with pytest.raises(ConfigError, match="Expected a tokenizer"):
        tokenizer_state(None)
