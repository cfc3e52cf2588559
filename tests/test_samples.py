"""build_samples: the ordered, keyed, rendered (and tokenized) samples generation and training share."""

from __future__ import annotations

import json
import random
import warnings
from typing import Any

import pytest

from gencache.config import DataConfig, parse_config, parse_data_configs
from gencache.core.errors import ConfigError, DatasetError
from gencache.data.samples import (
    DataConfigSummary,
    DuplicatePromptWarning,
    Sample,
    SampleSet,
    build_samples,
    tokenizer_reasons,
)
from support.dataset_helpers import GOLDEN

CASES: list[dict[str, Any]] = json.loads((GOLDEN / "cases.json").read_text(encoding="utf-8"))
CASE = {case["id"]: case for case in CASES}
DC_FIELDS = (
    "dataset_name",
    "num_samples",
    "num_data_strs",
    "num_shots",
    "subset",
    "split",
    "seed",
    "data_kwargs",
    "template",
    "template_kwargs",
)


def data_config(case_id: str, **overrides: Any) -> dict[str, Any]:
    case = CASE[case_id]
    dc = {name: case[name] for name in DC_FIELDS}
    dc["source"] = str(GOLDEN / case["fixture"])
    dc.update(overrides)
    return dc


def parts_json(sample: Sample) -> list[dict[str, str]]:
    return [{"kind": part.kind, "text": part.text} for part in sample.parts]


# -- golden -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case_id", sorted(CASE))
def test_golden_case_through_build_samples(case_id: str, tokenizer: Any) -> None:
    case = CASE[case_id]
    chat = case["template"] == "tokenizer_chat"
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        result = build_samples([data_config(case_id)], tokenizer=tokenizer if chat else None)
    expected = case["samples"]
    assert len(result) == len(expected)
    for index, (sample, want) in enumerate(zip(result, expected, strict=True)):
        assert sample.key == want["key"]
        assert dict(sample.semantic) == want["semantic"]
        assert sample.query == want["query"]
        assert sample.answer == want["answer"]
        assert (sample.data_config_index, sample.sample_index) == (0, index)
        if "prompt_parts" in want:
            assert parts_json(sample) == want["prompt_parts"]
        if "prompt_text" in want:
            assert sample.prompt_text == want["prompt_text"]
        if chat:
            assert sample.input_ids is not None and sample.spans is not None
        else:
            assert sample.input_ids is None and sample.spans is None
    (summary,) = result.summaries
    assert summary.samples == len(expected)
    assert summary.dataset_name == case["dataset_name"]


def test_tokenized_samples_have_per_part_ids_and_spans(tokenizer: Any) -> None:
    result = build_samples([data_config("biography-2")], tokenizer=tokenizer)
    for sample in result:
        assert sample.input_ids is not None and sample.spans is not None
        assert len(sample.spans) == len(sample.parts)
        position = 0
        for (kind, start, end), part in zip(sample.spans, sample.parts, strict=True):
            assert kind == part.kind and start == position and end > start
            expected = tokenizer(part.text, add_special_tokens=False)["input_ids"]
            assert list(sample.input_ids[start:end]) == expected
            position = end
        assert position == len(sample.input_ids)
    (summary,) = result.summaries
    assert summary.prompt_tokens is not None
    lengths = sorted(len(s.input_ids or ()) for s in result)
    assert summary.prompt_tokens == (lengths[0], lengths[(len(lengths) - 1) // 2], lengths[-1])


def test_summary_statistics_and_effective_kwargs() -> None:
    result = build_samples([data_config("hotpot_qa-1", data_kwargs={})])
    (summary,) = result.summaries
    assert isinstance(summary, DataConfigSummary)
    chars = sorted(len(s.prompt_text) for s in result)
    assert summary.prompt_chars == (chars[0], chars[(len(chars) - 1) // 2], chars[-1])
    assert summary.prompt_tokens is None
    assert summary.data_kwargs == {"add_inst": True, "add_cot": True, "difficulty": ["hard"]}
    assert summary.source.kind == "file"
    assert summary.source.files and summary.source.files[0][0].endswith("hotpot_qa.jsonl")
    assert (summary.index, summary.samples, summary.unique, summary.duplicates) == (0, 6, 6, 0)


# -- duplicates -------------------------------------------------------------------------------------------
def test_identical_duplicates_across_data_configs_are_counted_without_warning() -> None:
    first = data_config("hotpot_qa-1")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DuplicatePromptWarning)
        result = build_samples([first, dict(first), dict(first, num_samples=3)])
    assert len(result) == 15
    assert result.duplicates == 9
    assert len(result.unique) == 6
    assert result.keys() == [s.key for s in result.samples[:6]]
    assert all(s.data_config_index == 0 for s in result.unique)
    assert result.conflicting_prompts == ()
    assert [(s.samples, s.unique, s.duplicates) for s in result.summaries] == [(6, 6, 0), (6, 6, 6), (3, 3, 3)]


def test_duplicates_with_different_prompts_warn_and_first_occurrence_wins() -> None:
    plain = data_config("hotpot_qa-1")
    no_cot = data_config("hotpot_qa-1", data_kwargs={"add_cot": False})
    with pytest.warns(DuplicatePromptWarning, match=r"6 key\(s\) occur more than once with different rendered"):
        result = build_samples([plain, no_cot])
    assert result.duplicates == 6
    assert result.conflicting_prompts == tuple(result.keys())
    first_parts = [s.parts for s in result.samples[:6]]
    assert [s.parts for s in result.unique] == first_parts
    assert [s.parts for s in result.samples[6:]] != first_parts
    assert result.summaries[1].data_kwargs["add_cot"] is False


def test_template_change_gives_same_keys_and_a_conflict_warning() -> None:
    with pytest.warns(DuplicatePromptWarning):
        result = build_samples([data_config("musique-1"), data_config("musique-1", template="qwen_3_chat")])
    assert len(result.unique) == 6 and len(result.conflicting_prompts) == 6
    assert result.samples[6].prompt_text.startswith("<|im_start|>user\n")


def test_thinking_markup_and_tokenizer_never_change_keys(tiny_tokenizer: Any) -> None:
    """Keys through build_samples: the same with think markup on or off, with or without a tokenizer, and whatever
    tokenizer renders the prompt (the golden one and the tiny teacher's)."""
    plain = build_samples([data_config("hotpot_qa-1")])
    thinking = [
        build_samples(
            [data_config("hotpot_qa-1", template="tokenizer_chat", template_kwargs={"enable_thinking": flag})],
            tokenizer=tiny_tokenizer,
        )
        for flag in (False, True)
    ]
    assert "<think>" in thinking[0].samples[0].prompt_text and "<think>" not in thinking[1].samples[0].prompt_text
    tokenized = build_samples([data_config("hotpot_qa-1")], tokenizer=tiny_tokenizer)
    assert tokenized.samples[0].input_ids is not None and plain.samples[0].input_ids is None
    keys = [s["key"] for s in CASE["hotpot_qa-1"]["samples"]]
    for result in (plain, tokenized, *thinking):
        assert [s.key for s in result.samples] == keys


# -- tokenizer requirements -------------------------------------------------------------------------------
def test_tokenizer_chat_without_tokenizer_names_the_data_config() -> None:
    configs = [data_config("hotpot_qa-1"), data_config("hotpot_qa-1-chat")]
    assert tokenizer_reasons(configs)
    assert not tokenizer_reasons(configs[:1])
    with pytest.raises(ConfigError) as info:
        build_samples(configs)
    message = str(info.value)
    assert "data_configs[1]" in message and "tokenizer_chat" in message and "data_configs[0]" not in message


def test_niah_max_len_needs_a_tokenizer(tokenizer: Any) -> None:
    configs = [data_config("hotpot_qa-1"), data_config("niah-1", data_kwargs={"max_len": 100_000})]
    reasons = tokenizer_reasons(configs)
    assert len(reasons) == 1 and reasons[0].startswith("data_configs[1]: dataset 'niah'") and "max_len" in reasons[0]
    with pytest.raises(ConfigError, match=r"data_configs\[1\]: dataset 'niah'"):
        build_samples(configs)
    result = build_samples(configs, tokenizer=tokenizer)
    assert [s.key for s in result.samples[6:]] == [s["key"] for s in CASE["niah-1"]["samples"]]
    assert result.summaries[1].data_kwargs["max_len"] == 100_000


def test_needs_tokenizer_accepts_a_whole_config() -> None:
    cfg = parse_config(
        {"model": {"model_path": "m"}, "data_configs": [data_config("hotpot_qa-1-chat")], "output_dir": "o"}
    )
    assert tokenizer_reasons(cfg)


# -- inputs and errors ------------------------------------------------------------------------------------
def test_accepts_config_models_and_mappings() -> None:
    mapping = data_config("musique-3")
    model = DataConfig.model_validate(mapping)
    cfg = parse_config({"model": {"model_path": "m"}, "data_configs": [mapping], "output_dir": "o"})
    keys = [s["key"] for s in CASE["musique-3"]["samples"]]
    for given in ([mapping], [model], [model, mapping][:1], cfg, parse_data_configs([mapping])):
        assert [s.key for s in build_samples(given)] == keys  # type: ignore[arg-type]
    mixed = build_samples([model, mapping])
    assert mixed.duplicates == 4


@pytest.mark.parametrize("bad", [{"dataset_name": "musique"}, "musique", 3, []])
def test_rejects_other_inputs(bad: Any) -> None:
    with pytest.raises(ConfigError):
        build_samples(bad)


def test_invalid_mapping_is_a_config_error_with_its_path() -> None:
    with pytest.raises(ConfigError, match=r"data_configs\[1\]\.data_kwargs\.difficulty"):
        build_samples([data_config("hotpot_qa-1"), data_config("hotpot_qa-1", data_kwargs={"difficulty": "hard"})])


def test_zero_samples_in_total_is_an_error_but_one_empty_config_is_fine() -> None:
    with pytest.raises(ConfigError, match="No samples"):
        build_samples([data_config("musique-1", num_samples=0)])
    result = build_samples([data_config("musique-1", num_samples=0), data_config("musique-3")])
    assert len(result) == 4
    empty = result.summaries[0]
    assert (empty.samples, empty.unique, empty.duplicates, empty.prompt_chars) == (0, 0, 0, (0, 0, 0))
    assert all(s.data_config_index == 1 for s in result)


def test_dataset_errors_name_the_data_config() -> None:
    with pytest.raises(DatasetError, match=r"^data_configs\[1\]: .*num_samples"):
        build_samples([data_config("musique-3"), data_config("musique-1", num_samples=10_000)])
    with pytest.raises(DatasetError, match=r"^data_configs\[0\]: .*few-shot"):
        build_samples([data_config("niah-1", num_shots=1)])


def test_sample_set_sequence_api() -> None:
    result = build_samples([data_config("biography-4"), data_config("biography-4")])
    assert isinstance(result, SampleSet)
    assert len(result) == 6 and len(list(result)) == 6
    assert result[0] is result.samples[0] and result[-1] is result.samples[-1]
    assert result[1:3] == result.samples[1:3]
    assert result.keys() == [s.key for s in result.unique]
    assert result.by_key(result.keys()[1]) is result.samples[1]
    with pytest.raises(KeyError):
        result.by_key("0" * 64)
    assert [s.sample_index for s in result] == [0, 1, 2, 0, 1, 2]


@pytest.mark.filterwarnings("ignore:few_shot_str is not recommended")
def test_building_samples_leaves_the_global_rng_untouched() -> None:
    random.seed(1234)
    state = random.getstate()
    build_samples([data_config("hotpot_qa-2"), data_config("biography-2"), data_config("niah-2")])
    assert random.getstate() == state


def test_samples_are_deterministic() -> None:
    configs = [data_config("hotpot_qa-4"), data_config("biography-3")]
    assert build_samples(configs).samples == build_samples(configs).samples


def test_data_configs_over_one_source_load_and_hash_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import gencache.data.sources as source

    loads: list[str | None] = []
    real = source._load_tables

    def counting(src: str | None, *args: Any, **kwargs: Any) -> Any:
        loads.append(src)
        return real(src, *args, **kwargs)

    monkeypatch.setattr(source, "_load_tables", counting)
    configs = [data_config("biography-1"), data_config("biography-1", seed=5), data_config("hotpot_qa-1")]
    result = build_samples(configs)
    assert len(loads) == 2  # biography once for both of its data configs, hotpot_qa once
    assert result.summaries[0].source == result.summaries[1].source
    assert [s.key for s in result.samples[:5]] == [s["key"] for s in CASE["biography-1"]["samples"]]
    build_samples(configs[:1])
    assert len(loads) == 3  # nothing is kept between runs


def test_samples_remember_their_source_row() -> None:
    from gencache.data.recipes import sample_source

    source = sample_source("musique")
    config = {
        "dataset_name": "musique",
        "num_samples": 4,
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "default",
        "split": "train",
        "seed": 2,
        "source": str(source),
    }
    rows = [json.loads(line) for line in (source / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    for sample in build_samples([config]):
        assert sample.row is not None and rows[sample.row]["question"] == sample.query
        assert sample.row_id is None and sample.source_id == sample.row
        assert sample.reference == rows[sample.row]["answer"] == sample.answer
    people = sample_source("biography")
    config = {
        "dataset_name": "biography",
        "num_samples": 3,
        "num_data_strs": 0,
        "num_shots": 0,
        "subset": "1k",
        "split": "train",
        "seed": 0,
        "source": str(people),
        "data_kwargs": {"question_type": "QA"},
    }
    table = [json.loads(line) for line in (people / "1k" / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    for sample in build_samples([config]):  # the row of the person asked about, not a position among kept people
        assert sample.row is not None
        name = table[sample.row]["birth_date"][0].split(" was born")[0]
        assert name in sample.query
