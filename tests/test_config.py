"""The config model: defaults, strictness, one-line field-path errors, the _default.json merge, loading."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gencache.cli.app import run as cli_run
from gencache.config import (
    CacheConfig,
    DataConfig,
    ModelConfig,
    config_to_json,
    load_config,
    merge_defaults,
    parse_config,
    parse_data_configs,
)
from gencache.config.generation import LOGIT_FIELDS, NO_LOGITS_MESSAGE
from gencache.core.canonical import canonical_json
from gencache.core.errors import ConfigError, GencacheError
from support.config_factory import musique, write_config

REPO = Path(__file__).resolve().parents[1]


def hotpot(**overrides: Any) -> dict[str, Any]:
    dc: dict[str, Any] = {
        "dataset_name": "hotpot_qa",
        "num_samples": 4,
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "fullwiki",
    }
    dc.update(overrides)
    return dc


def valid_config() -> dict[str, Any]:
    return {
        "model": {"model_path": "Qwen/Qwen3-8B", "generation_kwargs": {"max_new_tokens": 64}},
        "data_configs": [hotpot(), hotpot(dataset_name="biography", num_data_strs=2, subset="10k")],
        "output_dir": "out/artifact",
    }


def mutated(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    cfg = valid_config()
    change(cfg)
    return cfg


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation setting ``a.b[1].c`` to ``value`` (creating objects on the way)."""

    def change(cfg: dict[str, Any]) -> None:
        target: Any = cfg
        parts: list[str | int] = []
        for piece in path.replace("]", "").replace("[", ".").split("."):
            parts.append(int(piece) if piece.isdigit() else piece)
        for part in parts[:-1]:
            if isinstance(part, str) and isinstance(target, dict) and part not in target:
                target[part] = {}
            target = target[part]
        target[parts[-1]] = value

    return change


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def change(cfg: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = cfg
        for part in parents:
            target = target[part]
        del target[last]

    return change


# (id, mutation, fragments the one-line message must contain)
MALFORMED: list[tuple[str, Callable[[dict[str, Any]], None], tuple[str, ...]]] = [
    # reference 10.3 rejects_invalid_owned_fields
    ("store_logits_string", _set("store_logits", "true"), ("store_logits:", NO_LOGITS_MESSAGE, "Delete this field")),
    (
        "gen_batch_size_zero",
        _set("gen_batch_size", 0),
        ("gen_batch_size: input should be greater than or equal to 1 (got 0)",),
    ),
    ("cache_device_not_a_device", _set("cache_device", "not a device"), ("cache_device: input should be 'cpu'",)),
    ("data_configs_empty", _set("data_configs", []), ("data_configs: list should have at least 1 item",)),
    ("seed_true", _set("seed", True), ("seed: input should be a valid integer (got true)",)),
    # logits and friends, wherever they are
    ("store_logits_true", _set("store_logits", True), ("store_logits:", "KL training computes teacher logits online")),
    ("model_store_logits", _set("model.store_logits", False), ("model.store_logits:", NO_LOGITS_MESSAGE)),
    ("gen_output_scores", _set("model.generation_kwargs.output_scores", True), ("generation_kwargs.output_scores:",)),
    ("gen_output_logits", _set("model.generation_kwargs.output_logits", False), ("generation_kwargs.output_logits:",)),
    (
        "gen_return_dict",
        _set("model.generation_kwargs.return_dict_in_generate", True),
        ("model.generation_kwargs.return_dict_in_generate: format 3 never collects",),
    ),
    ("data_config_store_logits", _set("data_configs[1].store_logits", True), ("data_configs[1].store_logits:",)),
    # unknown keys at every level
    ("unknown_top", _set("outptu_dir", "x"), ("outptu_dir: unknown field", "did you mean 'output_dir'")),
    ("unknown_model", _set("model.dtpye", "float32"), ("model.dtpye: unknown field", "did you mean 'dtype'")),
    ("unknown_data_config", _set("data_configs[1].splt", "test"), ("data_configs[1].splt: unknown field",)),
    (
        "unknown_data_kwargs",
        _set("data_configs[0].data_kwargs", {"dificulty": ["hard"]}),
        ("data_configs[0].data_kwargs.dificulty: unknown field", "'difficulty'"),
    ),
    (
        "unknown_template_kwargs",
        _set("data_configs[1].template_kwargs", {"system_prompt": "x"}),
        ("data_configs[1].template_kwargs.system_prompt: unknown field (allowed: none)",),
    ),
    (
        "tokenizer_chat_unknown_kwarg",
        _set("data_configs[0]", hotpot(template="tokenizer_chat", template_kwargs={"systm_prompt": "x"})),
        ("data_configs[0].template_kwargs.systm_prompt: unknown", "allowed: enable_thinking, system_prompt"),
    ),
    (
        "enable_thinking_int",
        _set("data_configs[0]", hotpot(template="tokenizer_chat", template_kwargs={"enable_thinking": 1})),
        ("data_configs[0].template_kwargs.enable_thinking: input should be a valid boolean (got 1)",),
    ),
    # bools and floats where ints go
    (
        "gen_batch_size_true",
        _set("gen_batch_size", True),
        ("gen_batch_size: input should be a valid integer (got true)",),
    ),
    (
        "gen_batch_size_float",
        _set("gen_batch_size", 2.0),
        ("gen_batch_size: input should be a valid integer (got 2.0)",),
    ),
    ("num_samples_true", _set("data_configs[0].num_samples", True), ("num_samples: input should be a valid integer",)),
    (
        "num_samples_negative",
        _set("data_configs[1].num_samples", -1),
        ("data_configs[1].num_samples: input should be greater than or equal to 0",),
    ),
    (
        "num_shots_string",
        _set("data_configs[0].num_shots", "1"),
        ("data_configs[0].num_shots: input should be a valid integer",),
    ),
    (
        "data_seed_false",
        _set("data_configs[0].seed", False),
        ("data_configs[0].seed: input should be a valid integer (got false)",),
    ),
    # dtype and device forms
    (
        "dtype_float64",
        _set("model.dtype", "float64"),
        ("model.dtype: input should be 'bfloat16', 'float16' or 'float32'",),
    ),
    ("dtype_torch_name", _set("model.dtype", "torch.bfloat16"), ("model.dtype:",)),
    ("device_gpu", _set("model.device", "gpu"), ('model.device: must be "cpu", "cuda", "cuda:N" or "auto"',)),
    ("device_cuda_letter", _set("model.device", "cuda:x"), ("model.device:", '"cuda:x"')),
    ("device_uppercase", _set("model.device", "CUDA:0"), ("model.device:",)),
    ("device_int", _set("model.device", 0), ("model.device: input should be a valid string (got 0)",)),
    ("cache_device_cuda", _set("cache_device", "cuda:0"), ("cache_device: input should be 'cpu' (got \"cuda:0\")",)),
    ("cache_device_cpu0", _set("cache_device", "cpu:0"), ("cache_device: input should be 'cpu'", "did you mean 'cpu'")),
    # hotpot difficulty forms (reference 10.5 hotpot_validates_difficulty)
    ("difficulty_null", _set("data_configs[0].data_kwargs", {"difficulty": None}), ("data_kwargs.difficulty:",)),
    (
        "difficulty_empty",
        _set("data_configs[0].data_kwargs", {"difficulty": []}),
        ("data_configs[0].data_kwargs.difficulty: list should have at least 1 item",),
    ),
    (
        "difficulty_string",
        _set("data_configs[0].data_kwargs", {"difficulty": "hard"}),
        ("data_configs[0].data_kwargs.difficulty: input should be a valid list",),
    ),
    (
        "difficulty_unknown",
        _set("data_configs[0].data_kwargs", {"difficulty": ["unknown"]}),
        ("data_configs[0].data_kwargs.difficulty[0]:", "'easy', 'medium' or 'hard'"),
    ),
    (
        "difficulty_int_item",
        _set("data_configs[0].data_kwargs", {"difficulty": ["hard", 1]}),
        ("data_configs[0].data_kwargs.difficulty[1]:",),
    ),
    (
        "biography_question_type",
        _set("data_configs[1].data_kwargs", {"question_type": "qa"}),
        ("data_configs[1].data_kwargs.question_type:", "'completion' or 'QA'"),
    ),
    (
        "niah_max_len_bool",
        _set("data_configs[1]", hotpot(dataset_name="niah", subset="4096", data_kwargs={"max_len": True})),
        ("data_configs[1].data_kwargs.max_len: input should be a valid integer (got true)",),
    ),
    (
        "data_kwargs_list",
        _set("data_configs[0].data_kwargs", ["hard"]),
        ("data_kwargs: must be a JSON object",),
    ),
    # registries
    (
        "unknown_dataset",
        _set("data_configs[0].dataset_name", "hotpotqa"),
        ("data_configs[0].dataset_name: unknown dataset 'hotpotqa'", "biography, chat, hotpot_qa, musique, niah"),
    ),
    (
        "unknown_template",
        _set("data_configs[1].template", "chatml"),
        ("data_configs[1].template: unknown template 'chatml'", "default", "tokenizer_chat"),
    ),
    # max_new_tokens and other generation settings
    (
        "max_new_tokens_zero",
        _set("model.generation_kwargs.max_new_tokens", 0),
        ("max_new_tokens: input should be greater than or equal to 1",),
    ),
    (
        "max_new_tokens_true",
        _set("model.generation_kwargs.max_new_tokens", True),
        ("model.generation_kwargs.max_new_tokens: input should be a valid integer (got true)",),
    ),
    (
        "max_new_tokens_string",
        _set("model.generation_kwargs.max_new_tokens", "64"),
        ('model.generation_kwargs.max_new_tokens: input should be a valid integer (got "64")',),
    ),
    (
        "max_new_tokens_float",
        _set("model.generation_kwargs.max_new_tokens", 64.0),
        ("max_new_tokens: input should be a valid integer (got 64.0)",),
    ),
    (
        "max_length_refused",
        _set("model.generation_kwargs.max_length", 64),
        ("max_length: not supported", "max_new_tokens"),
    ),
    ("diversity_penalty_refused", _set("model.generation_kwargs.diversity_penalty", 0.5), ("custom_generate",)),
    ("max_time_refused", _set("model.generation_kwargs.max_time", 5.0), ("machine speed",)),
    (
        "do_sample_string",
        _set("model.generation_kwargs.do_sample", "false"),
        ("generation_kwargs.do_sample: input should be a valid boolean",),
    ),
    (
        "temperature_zero",
        _set("model.generation_kwargs.temperature", 0),
        ("generation_kwargs.temperature: input should be greater than 0",),
    ),
    ("stop_strings_empty", _set("model.generation_kwargs.stop_strings", []), ("generation_kwargs.stop_strings:",)),
    ("eos_negative", _set("model.generation_kwargs.eos_token_id", [1, -2]), ("generation_kwargs.eos_token_id:",)),
    ("streamer", _set("model.generation_kwargs.streamer", "tqdm"), ("generation_kwargs.streamer: not allowed",)),
    (
        "generation_kwargs_list",
        _set("model.generation_kwargs", [1]),
        ("model.generation_kwargs: must be a JSON object",),
    ),
    # required and non-empty strings, wrong shapes
    ("output_dir_empty", _set("output_dir", ""), ("output_dir: string should have at least 1 character",)),
    ("output_dir_missing", _delete("output_dir"), ("output_dir: is required",)),
    ("output_dir_null", _set("output_dir", None), ("output_dir: input should be a valid string (got null)",)),
    ("model_path_empty", _set("model.model_path", ""), ("model.model_path: string should have at least 1 character",)),
    ("model_path_missing", _delete("model.model_path"), ("model.model_path: is required",)),
    ("model_not_object", _set("model", "Qwen/Qwen3-8B"), ("model: must be a JSON object",)),
    ("data_configs_object", _set("data_configs", {"a": 1}), ("data_configs: input should be a valid list",)),
    (
        "data_config_not_object",
        _set("data_configs[1]", "hotpot"),
        ("data_configs[1]: must be a JSON object",),
    ),
    (
        "tokenizer_path_empty",
        _set("model.tokenizer_path", ""),
        ("model.tokenizer_path: string should have at least 1 character",),
    ),
    (
        "subset_empty",
        _set("data_configs[0].subset", ""),
        ("data_configs[0].subset: string should have at least 1 character",),
    ),
    (
        "source_empty",
        _set("data_configs[0].source", ""),
        ("data_configs[0].source: string should have at least 1 character",),
    ),
    (
        "data_config_missing_fields",
        _set("data_configs[1]", {"dataset_name": "musique"}),
        tuple(
            f"data_configs[1].{name}: is required" for name in ("num_samples", "num_data_strs", "num_shots", "subset")
        ),
    ),
]


def test_malformed_table_is_large() -> None:
    assert len(MALFORMED) >= 25
    assert len({case[0] for case in MALFORMED}) == len(MALFORMED)


@pytest.mark.parametrize(("change", "fragments"), [case[1:] for case in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_config_gives_one_line_naming_the_field(
    change: Callable[[dict[str, Any]], None], fragments: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(mutated(change), origin="bad.json")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("bad.json: ")
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, GencacheError)
    assert info.value.exit_code == 2
    assert "pydantic" not in message and "Value error," not in message


def test_every_logit_field_is_rejected_with_the_no_logits_message() -> None:
    for name in sorted(LOGIT_FIELDS):
        for path in (name, f"model.{name}", f"model.generation_kwargs.{name}", f"data_configs[0].{name}"):
            with pytest.raises(ConfigError, match="never collects or stores logits") as info:
                parse_config(mutated(_set(path, False)))
            assert f"{path}:" in str(info.value)


def test_several_errors_are_reported_on_one_line() -> None:
    cfg = mutated(_set("gen_batch_size", 0))
    cfg["model"]["dtype"] = "fp8"
    with pytest.raises(ConfigError) as info:
        parse_config(cfg)
    message = str(info.value)
    assert "model.dtype:" in message and "gen_batch_size:" in message and "; " in message
    assert "\n" not in message


# -- defaults -------------------------------------------------------------------------------------------
def test_defaults_are_normalized() -> None:
    cfg = parse_config(
        {
            "model": {"model_path": "org/teacher"},
            "data_configs": [hotpot()],
            "output_dir": "out",
        }
    )
    assert cfg.model.tokenizer_path == "org/teacher"
    assert cfg.model.effective_tokenizer_path == "org/teacher"
    assert cfg.model.dtype == "bfloat16"
    assert cfg.model.device == "cuda:0"
    assert cfg.model.revision is None and cfg.model.attn_implementation is None
    assert cfg.model.generation_kwargs == {}
    assert cfg.gen_batch_size == 1
    assert cfg.cache_device == "cpu"
    assert cfg.seed == 42
    (dc,) = cfg.data_configs
    assert (dc.split, dc.seed, dc.template, dc.source) == ("train", 42, "default", None)
    assert dc.data_kwargs.model_dump(mode="json") == {"add_inst": True, "add_cot": True, "difficulty": ["hard"]}
    assert dc.template_kwargs.model_dump(mode="json") == {}


def test_explicit_tokenizer_path_is_kept() -> None:
    model = ModelConfig(model_path="a", tokenizer_path="b")
    assert model.tokenizer_path == "b" and model.effective_tokenizer_path == "b"


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:0", "cuda:7", "cuda:12", "auto"])
def test_valid_device_forms(device: str) -> None:
    assert ModelConfig(model_path="m", device=device).device == device


def test_effective_kwargs_defaults_are_recorded_for_every_dataset_and_template() -> None:
    cfg = parse_config(
        {
            "model": {"model_path": "m"},
            "data_configs": [
                hotpot(template="tokenizer_chat"),
                hotpot(dataset_name="biography", subset="10k", num_data_strs=2, template="qwen_3_chat"),
                hotpot(dataset_name="musique", subset="default", data_kwargs={"add_cot": False}),
                hotpot(dataset_name="niah", subset="4096", data_kwargs={"chunk_size": 2048}, template="llama_chat"),
            ],
            "output_dir": "o",
        }
    )
    hp, bio, mus, niah = cfg.data_configs
    assert hp.data_kwargs.difficulty == ["hard"]
    assert hp.template_kwargs.model_dump(mode="json") == {"system_prompt": "", "enable_thinking": False}
    assert bio.data_kwargs.question_type == "completion"
    assert bio.template_kwargs.model_dump(mode="json") == {"system_prompt": ""}
    assert mus.data_kwargs.model_dump(mode="json") == {"add_inst": True, "add_cot": False, "cache_dataset": True}
    assert niah.data_kwargs.chunk_size == 2048 and niah.data_kwargs.max_len == -1
    assert niah.data_kwargs.tasks is None
    resolved = config_to_json(cfg)
    assert resolved["data_configs"][0]["data_kwargs"]["difficulty"] == ["hard"]
    canonical_json(resolved)  # plain JSON, no NaN
    assert parse_config(json.loads(json.dumps(resolved))) == cfg  # effective kwargs validate again unchanged


def test_data_configs_keep_the_typed_kwargs_of_their_dataset_and_template() -> None:
    from gencache.data.prompts import TEMPLATES
    from gencache.data.recipes import BUILTIN_DATASETS as DATASETS

    cfg = parse_config(
        {
            "model": {"model_path": "m"},
            "data_configs": [
                hotpot(template="tokenizer_chat", data_kwargs={"difficulty": ["easy"]}),
                hotpot(dataset_name="niah", subset="4096", data_kwargs={"chunk_size": 2048}, template="llama_chat"),
            ],
            "output_dir": "o",
        }
    )
    hp, niah = cfg.data_configs
    assert type(hp.data_kwargs) is DATASETS["hotpot_qa"].kwargs_model and hp.data_kwargs.difficulty == ["easy"]
    assert type(niah.data_kwargs) is DATASETS["niah"].kwargs_model and niah.data_kwargs.chunk_size == 2048
    assert type(hp.template_kwargs) is TEMPLATES["tokenizer_chat"].kwargs_model
    assert type(niah.template_kwargs) is TEMPLATES["llama_chat"].kwargs_model
    again = parse_data_configs([hp, config_to_json(niah)])
    assert again[0].data_kwargs is hp.data_kwargs  # an already validated model is kept as it is
    assert again[1] == niah
    with pytest.raises(ConfigError, match=r"data_configs\[0\]\.data_kwargs\.difficulty: unknown field"):
        parse_data_configs([hotpot(dataset_name="niah", subset="4096", data_kwargs=hp.data_kwargs)])


def test_config_to_json_is_explicit_and_round_trips() -> None:
    cfg = parse_config(valid_config())
    resolved = config_to_json(cfg)
    assert set(resolved) == {
        "model",
        "data_configs",
        "gen_batch_size",
        "engine",
        "engine_options",
        "cache_device",
        "seed",
        "output_dir",
    }
    assert set(resolved["model"]) == set(ModelConfig.model_fields)
    assert all(set(dc) == set(DataConfig.model_fields) for dc in resolved["data_configs"])
    assert resolved["model"]["tokenizer_path"] == "Qwen/Qwen3-8B"
    again = parse_config(json.loads(json.dumps(resolved)))
    assert again == cfg
    assert config_to_json(again) == resolved


def test_validation_does_not_mutate_the_input() -> None:
    raw = valid_config()
    before = copy.deepcopy(raw)
    cfg = parse_config(raw)
    assert raw == before
    raw["model"]["generation_kwargs"]["max_new_tokens"] = 1
    assert cfg.model.generation_kwargs["max_new_tokens"] == 64


def test_models_are_frozen() -> None:
    cfg = parse_config(valid_config())
    with pytest.raises(ValueError):
        cfg.gen_batch_size = 3  # type: ignore[misc]


def test_num_samples_zero_is_allowed_in_the_config() -> None:
    cfg = parse_config(mutated(_set("data_configs[0].num_samples", 0)))
    assert cfg.data_configs[0].num_samples == 0


def test_null_max_new_tokens_unsets_an_inherited_value() -> None:
    cfg = parse_config(mutated(_set("model.generation_kwargs.max_new_tokens", None)))
    assert cfg.model.generation_kwargs == {"max_new_tokens": None}


def test_unlisted_generation_kwargs_pass_through() -> None:
    cfg = parse_config(mutated(_set("model.generation_kwargs.cache_implementation", "static")))
    assert cfg.model.generation_kwargs["cache_implementation"] == "static"


# -- generation_kwargs through the config model ----------------------------------------------------------
def parse_generation_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    return parse_config(mutated(_set("model.generation_kwargs", kwargs))).model.generation_kwargs


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        (
            {"max_new_tokens": 0},
            "model.generation_kwargs.max_new_tokens: input should be greater than or equal to 1 (got 0)",
        ),
        ({"max_new_tokens": True}, "max_new_tokens: input should be a valid integer (got true)"),
        ({"max_new_tokens": "64"}, 'max_new_tokens: input should be a valid integer (got "64")'),
        ({"output_scores": True}, NO_LOGITS_MESSAGE),
        ({"return_dict_in_generate": False}, "model.generation_kwargs.return_dict_in_generate"),
        ({"top_p": 1.5}, "model.generation_kwargs.top_p: input should be less than or equal to 1"),
        ({"top_p": 0}, "model.generation_kwargs.top_p: input should be greater than 0"),
        ({"temperature": float("nan")}, "model.generation_kwargs.temperature: input should be a finite number"),
        ({"num_return_sequences": 0}, "num_return_sequences: input should be greater than or equal to 1"),
        ({"eos_token_id": [1, "2"]}, "eos_token_id: must be a token id"),
        ({"stop_strings": ["ok", ""]}, "stop_strings: must be"),
        ({"custom": object()}, "model.generation_kwargs.custom: input was not a valid JSON value"),
        ({"stopping_criteria": [], "streamer": 1}, "stopping_criteria: not allowed here: "),
        ({"stopping_criteria": [], "streamer": 1}, "streamer: not allowed here: "),
        ({"max_length": 50}, "max_length: not supported: it counts the prompt tokens"),
        ({"max_time": 5.0}, "max_time: not supported"),
        ({"penalty_alpha": 0.6, "top_k": 4}, "penalty_alpha: not supported"),
        ({"do_sample": "yes"}, "do_sample: input should be a valid boolean"),
        ({"do_sample": True, "temperature": 0.0}, "temperature: input should be greater than 0 (got 0.0)"),
        ({"temperature": "hot"}, "temperature: input should be a valid number"),
        ({"num_beams": 0}, "num_beams: input should be greater than or equal to 1"),
    ],
)
def test_bad_generation_kwargs_are_refused_when_the_config_loads(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_generation_kwargs(kwargs)
    assert fragment in str(info.value)


def test_typical_generation_kwargs_load_as_written() -> None:
    assert parse_generation_kwargs({}) == {}
    assert parse_generation_kwargs({"max_new_tokens": None}) == {"max_new_tokens": None}
    typical = {
        "max_new_tokens": 512,
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 20,
        "num_return_sequences": 2,
        "eos_token_id": [151645, 151643],
        "stop_strings": ["\n\n"],
        "use_cache": True,
        "repetition_penalty": 1,
    }
    loaded = parse_generation_kwargs(typical)
    assert loaded == typical  # every value kept as given: the run generates with exactly these settings
    assert [type(loaded[name]) for name in ("max_new_tokens", "temperature", "repetition_penalty")] == [int, float, int]


# -- parse_data_configs (training) ------------------------------------------------------------------------
def test_parse_data_configs_validates_with_paths() -> None:
    dcs = parse_data_configs([hotpot(), DataConfig.model_validate(hotpot(seed=3))])
    assert [dc.seed for dc in dcs] == [42, 3]
    assert dcs[0].data_kwargs.difficulty == ["hard"]
    with pytest.raises(ConfigError, match=r"data_configs\[1\]\.data_kwargs\.difficulty"):
        parse_data_configs([hotpot(), hotpot(data_kwargs={"difficulty": []})])
    with pytest.raises(ConfigError, match="data_configs: list should have at least 1 item"):
        parse_data_configs([])
    with pytest.raises(ConfigError, match="data_configs: input should be a valid list"):
        parse_data_configs("hotpot")  # type: ignore[arg-type]


# -- merge and loading -----------------------------------------------------------------------------------
def test_merge_defaults_reference_example() -> None:
    defaults = {
        "model": {
            "model_path": "Qwen/Qwen3-8B",
            "generation_kwargs": {"max_new_tokens": 64, "do_sample": False, "use_cache": True},
        },
        "gen_batch_size": 8,
    }
    config = {"model": {"generation_kwargs": {"max_new_tokens": 512}}, "output_dir": "o"}
    merged = merge_defaults(config, defaults)
    assert merged == {
        "model": {
            "model_path": "Qwen/Qwen3-8B",
            "generation_kwargs": {"max_new_tokens": 512, "do_sample": False, "use_cache": True},
        },
        "gen_batch_size": 8,
        "output_dir": "o",
    }
    assert config == {"model": {"generation_kwargs": {"max_new_tokens": 512}}, "output_dir": "o"}
    merged["model"]["generation_kwargs"]["use_cache"] = False
    assert defaults["model"]["generation_kwargs"]["use_cache"] is True  # deep copies


@pytest.mark.parametrize(
    ("config", "defaults", "expected"),
    [
        ({"a": [1]}, {"a": [2, 3]}, {"a": [1]}),  # lists replace whole
        ({"a": None}, {"a": {"b": 1}}, {"a": None}),  # explicit null stays
        ({"a": 1}, {"a": {"b": 1}}, {"a": 1}),  # type mismatch: the config wins
        ({"a": {"b": 1}}, {"a": 5}, {"a": {"b": 1}}),
        ({}, {"a": {"b": [1]}}, {"a": {"b": [1]}}),
        ({"a": {"b": {"c": 1}}}, {"a": {"b": {"d": 2}, "e": 3}}, {"a": {"b": {"c": 1, "d": 2}, "e": 3}}),
        ({"a": "x"}, {}, {"a": "x"}),
    ],
)
def test_merge_defaults_rules(config: dict[str, Any], defaults: dict[str, Any], expected: dict[str, Any]) -> None:
    assert merge_defaults(config, defaults) == expected


def _write(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def test_load_config_merges_sibling_default(tmp_path: Path) -> None:
    _write(
        tmp_path / "teacher" / "_default.json",
        {
            "model": {
                "model_path": "Qwen/Qwen3-8B",
                "generation_kwargs": {"max_new_tokens": 64, "do_sample": False, "use_cache": True},
            },
            "gen_batch_size": 8,
            "data_configs": [hotpot(num_samples=1)],
        },
    )
    path = _write(
        tmp_path / "teacher" / "run.json",
        {
            "model": {"generation_kwargs": {"max_new_tokens": 512}},
            "data_configs": [hotpot(num_samples=2), hotpot(num_samples=3)],
            "output_dir": "out",
        },
    )
    cfg = load_config(path)
    assert cfg.model.model_path == "Qwen/Qwen3-8B"
    assert cfg.model.generation_kwargs == {"max_new_tokens": 512, "do_sample": False, "use_cache": True}
    assert cfg.gen_batch_size == 8
    assert [dc.num_samples for dc in cfg.data_configs] == [2, 3]  # lists replace whole
    assert isinstance(load_config(str(path)), CacheConfig)


def test_load_config_without_default_file(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path / "c.json", valid_config()))
    assert cfg.output_dir == "out/artifact"


def test_default_merge_is_one_level_only(tmp_path: Path) -> None:
    _write(tmp_path / "_default.json", {"gen_batch_size": 4})
    cfg = load_config(_write(tmp_path / "sub" / "c.json", valid_config()))
    assert cfg.gen_batch_size == 1


def test_explicit_null_in_config_is_not_filled_from_default(tmp_path: Path) -> None:
    _write(tmp_path / "_default.json", {"model": {"model_path": "m", "generation_kwargs": {"max_new_tokens": 64}}})
    raw = valid_config()
    raw["model"] = {"generation_kwargs": {"max_new_tokens": None}}
    cfg = load_config(_write(tmp_path / "c.json", raw))
    assert cfg.model.generation_kwargs == {"max_new_tokens": None}
    raw["output_dir"] = None
    with pytest.raises(ConfigError, match=r"output_dir: input should be a valid string \(got null\)"):
        load_config(_write(tmp_path / "d.json", raw))


def test_default_file_can_supply_any_field_and_errors_name_both_files(tmp_path: Path) -> None:
    _write(tmp_path / "_default.json", {"store_logits": True, "model": {"model_path": "m"}})
    path = _write(tmp_path / "c.json", {k: v for k, v in valid_config().items() if k != "model"})
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message and "_default.json" in message
    assert "store_logits:" in message and "Delete this field" in message


def test_loading_the_default_file_itself(tmp_path: Path) -> None:
    path = _write(tmp_path / "_default.json", valid_config())
    assert load_config(path).output_dir == "out/artifact"


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{\n  "model": {"model_path": "m",}\n}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"c\.json: invalid JSON at line 2 column \d+"):
        load_config(path)


def test_invalid_default_json_is_reported(tmp_path: Path) -> None:
    (tmp_path / "_default.json").write_text("{oops", encoding="utf-8")
    path = _write(tmp_path / "c.json", valid_config())
    with pytest.raises(ConfigError, match=r"_default\.json: invalid JSON at line 1 column 2"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[1, 2]", r"must be a JSON object \(got \[1, 2\]\)"),
        ('"x"', r'must be a JSON object \(got "x"\)'),
        ('{"seed": NaN}', "NaN is not valid JSON"),
        ('{"seed": 1, "seed": 2}', "duplicate key 'seed'"),
        ("", "invalid JSON at line 1 column 1"),
    ],
)
def test_bad_json_documents(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=fragment):
        load_config(path)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.json")
    with pytest.raises(ConfigError, match="is not a regular file"):
        load_config(tmp_path)


def test_parse_config_rejects_non_mapping() -> None:
    with pytest.raises(ConfigError, match="must be a JSON object"):
        parse_config([1])  # type: ignore[arg-type]


SHIPPED = sorted(p for p in (REPO / "configs").glob("*/*.json") if p.name != "_default.json")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_configs_load(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.cache_device == "cpu"
    assert cfg.model.generation_kwargs.get("max_new_tokens")


def test_config_module_imports_no_heavy_libraries() -> None:
    code = (
        "import sys, gencache.config, gencache.data.samples, gencache.docgen.config\n"
        "from gencache.config import parse_config\n"
        "parse_config({'model': {'model_path': 'm'}, 'output_dir': 'o', 'data_configs': [{'dataset_name': 'niah',"
        " 'num_samples': 1, 'num_data_strs': 0, 'num_shots': 0, 'subset': '4096'}]})\n"
        "print(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_url_is_refused_in_one_line_never_taken_for_a_path(
    tmp_path: Path, tiny_teacher_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    urls = {"output_dir": "gs://bucket/runs/x", "model": "s3://bucket/teacher", "source": "hf://datasets/org/rows"}
    config = write_config(
        tmp_path,
        urls["model"],
        output_dir=urls["output_dir"],
        data_configs=[musique(source=urls["source"])],
    )
    assert cli_run(["generate", str(config)]) == 2
    err = capsys.readouterr().err
    for field, url in [("output_dir", urls["output_dir"]), ("model_path", urls["model"]), ("source", urls["source"])]:
        assert f"{field}: {url!r} is a URL ({url.split('//')[0]}//), which gencache does not read or write" in err
    assert "give a local path or an s3://BUCKET/PREFIX URL" in err  # output_dir may name a bucket
    good = write_config(tmp_path, tiny_teacher_dir)
    assert cli_run(["generate", str(good), "--output-dir", "s3://b/runs/x"]) == 2
    assert "'s3://b/runs/x' names no valid bucket" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([config.name, good.name])  # no directory "s3:"
