"""`gencache score` on the tiny teacher, against an expectation computed here (SQuAD's normalization and token F1
written again in this file, over the answers read from the cache and the golds written into the source), the
selections by score (DistillationDataset, export), the export's join fields without the tokenizer and its format
by extension, and bad input (an --out that exists, a shard base with a missing shard, sources that are gone)."""

from __future__ import annotations

import json
import re
import shutil
import string
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import gencache
from gencache.artifact.names import FINISH_REASONS
from gencache.artifact.reader import CacheReader
from gencache.cli.app import run as cli_run
from gencache.config import load_config
from support.config_factory import config_dict, musique

QUESTIONS = 8


def squad_tokens(text: str) -> list[str]:
    """SQuAD's normalize_answer, written again: lowercase, punctuation, articles, whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return re.sub(r"\b(a|an|the)\b", " ", text).split()


def squad_f1(answer: str, gold: str) -> float:
    predicted, truth = squad_tokens(answer), squad_tokens(gold)
    common = sum((Counter(predicted) & Counter(truth)).values())
    if not predicted or not truth or not common:
        return 0.0
    precision, recall = common / len(predicted), common / len(truth)
    return 2 * precision * recall / (precision + recall)


def first_line_after_thinking(text: str) -> str:
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    elif "<think>" in text:
        return ""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def table_config(teacher: Path, source: Path, directory: Path) -> dict[str, Any]:
    """A table of QUESTIONS questions with their golds and ids, one prompt per generate call (output under
    ``directory / "out"``)."""
    table = musique(
        dataset_name="table",
        num_samples=QUESTIONS,
        seed=0,
        source=str(source),
        data_kwargs={"answer": "gold", "id": "qid"},
    )
    return config_dict(directory, teacher, data_configs=[table], gen_batch_size=1)


def write_rows(path: Path, golds: list[str]) -> None:
    rows = [{"qid": f"q{i}", "question": f"Which city is number {i}?", "gold": gold} for i, gold in enumerate(golds)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def answers_by_row(artifact: Path, config: Path) -> dict[int, str]:
    reader = CacheReader(artifact)
    return {s.row: reader.metadata(s.key)["text"][0] for s in gencache.build_samples(load_config(config))}  # type: ignore[index, misc]


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory, tiny_teacher_dir: Path) -> dict[str, Any]:
    """A run over a table whose golds were written from a first run's answers (the same prompts give the same
    greedy answers): some exactly the answer, some half of it, some wrong, two empty (no reference)."""
    work = tmp_path_factory.mktemp("score")
    first_source = work / "first" / "rows.jsonl"
    first_source.parent.mkdir()
    write_rows(first_source, ["?"] * QUESTIONS)
    first_config = work / "first.json"
    first_config.write_text(json.dumps(table_config(tiny_teacher_dir, first_source, work / "first")))
    first = answers_by_row(gencache.generate(first_config), first_config)  # type: ignore[arg-type]
    cut = {row: first_line_after_thinking(text) for row, text in first.items()}
    golds = []
    for row in range(QUESTIONS):
        words = cut[row].split()
        golds.append(
            [cut[row], f"{words[0] if words else 'x'} zzz qqq", "zzz", "", cut[row], "wrong answer", "", cut[row]][row]
        )
    data = work / "data"
    data.mkdir()
    source = data / "rows.jsonl"
    write_rows(source, golds)
    config = work / "config.json"
    config.write_text(json.dumps(table_config(tiny_teacher_dir, source, work)))
    artifact = gencache.generate(config)
    assert artifact is not None
    stored = answers_by_row(artifact, config)
    assert stored == first  # the precondition: greedy answers do not depend on the golds
    expected = {}
    for row, text in stored.items():
        gold = golds[row]
        answer = first_line_after_thinking(text)
        expected[row] = (
            None
            if not squad_tokens(gold)  # no gold, or one of punctuation and articles only: no reference
            else {"f1": squad_f1(answer, gold), "em": float(squad_tokens(answer) == squad_tokens(gold))}
        )
    return {"artifact": artifact, "config": config, "golds": golds, "expected": expected, "data": data, "work": work}


def test_score_matches_an_expectation_computed_independently(graded: dict[str, Any], tmp_path: Path) -> None:
    expected = graded["expected"]
    report = gencache.score(graded["artifact"])
    assert len(report.answers) == QUESTIONS
    by_row = {answer.row_index: answer for answer in report.answers}
    for row, want in expected.items():
        answer = by_row[row]
        assert answer.reference == (graded["golds"][row] or None) and answer.row_id == f"q{row}"
        if want is None:
            assert answer.metrics is None
        else:
            assert answer.metrics is not None
            assert answer.metrics["f1"] == pytest.approx(want["f1"]) and answer.metrics["exact_match"] == want["em"]
    scored = [want for want in expected.values() if want is not None]
    assert sum(want["f1"] >= 1.0 for want in scored) >= 3 and any(0 < want["f1"] < 1 for want in scored)
    group = report.groups[0]
    assert (group.answers, group.scored, group.unscored) == (QUESTIONS, len(scored), QUESTIONS - len(scored))
    assert group.means["f1"] == pytest.approx(sum(want["f1"] for want in scored) / len(scored))
    assert report.overall.means == group.means
    assert sum(part.answers for part in group.by_finish_reason.values()) == QUESTIONS
    # the command: --out keeps one row per answer, --json the means; nothing is written into the artifact
    before = sorted(p.name for p in Path(graded["artifact"]).iterdir())
    out = tmp_path / "scores.parquet"
    assert cli_run(["score", str(graded["artifact"]), "--out", str(out)]) == 0
    import pyarrow.parquet as pq

    rows = pq.read_table(out).to_pylist()
    assert {r["row_id"]: r["f1"] for r in rows} == {
        f"q{row}": None if want is None else pytest.approx(want["f1"]) for row, want in expected.items()
    }
    assert {r["finish_reason"] for r in rows} <= set(FINISH_REASONS) and {r["data_config_index"] for r in rows} == {0}
    assert sorted(p.name for p in Path(graded["artifact"]).iterdir()) == before


def test_score_json_is_for_scripts(graded: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert cli_run(["score", str(graded["artifact"]), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    scored = [want for want in graded["expected"].values() if want is not None]
    config = document["data_configs"][0]
    assert config["dataset_name"] == "table" and config["headline"] == "f1" and config["unscored"] == 2
    assert config["means"]["f1"] == pytest.approx(sum(want["f1"] for want in scored) / len(scored))
    assert document["overall"]["answers"] == QUESTIONS


def test_a_score_bar_keeps_exactly_the_answers_at_or_above_it(
    graded: dict[str, Any], tiny_tokenizer: Any, tmp_path: Path
) -> None:
    from gencache.training import DistillationDataset

    expected = graded["expected"]
    above = {f"q{row}" for row, want in expected.items() if want is not None and want["f1"] >= 0.5}
    below = sum(1 for want in expected.values() if want is not None and want["f1"] < 0.5)
    assert above and below
    data = DistillationDataset(graded["artifact"], tiny_tokenizer, min_score={"f1": 0.5})
    assert {data[i]["row_id"] for i in range(len(data))} == above
    assert (
        data.left_out.min_score == below
        and data.left_out.unscored == 2
        and data.left_out.samples == QUESTIONS - len(above)
    )
    assert "score below min_score" in data.left_out.describe()
    # from a score file: the same items
    out = tmp_path / "scores.jsonl"
    gencache.score(graded["artifact"], out=out)
    from_file = DistillationDataset(graded["artifact"], tiny_tokenizer, min_score={"f1": 0.5}, scores=out)
    assert [from_file[i]["key"] for i in range(len(from_file))] == [data[i]["key"] for i in range(len(data))]
    report = gencache.score(graded["artifact"])
    from_report = DistillationDataset(graded["artifact"], tiny_tokenizer, min_score={"f1": 0.5}, scores=report)
    assert len(from_report) == len(data) and from_report.left_out == data.left_out
    everything = data.select(min_score=None)
    assert len(everything) == QUESTIONS and not everything.left_out
    from gencache.core.errors import ConfigError

    zero = {"exact_match": 0.0, "f1": 0.0, "contains": 0.0}
    nothing = {(data[i]["key"], 0): zero for i in range(len(data))} | {
        (k, 0): zero for k in CacheReader(graded["artifact"])
    }
    with pytest.raises(
        ConfigError, match=rf"selection \(min_score=\{{'f1': 0.5\}}\) keeps no item: left out {QUESTIONS} of"
    ):
        DistillationDataset(graded["artifact"], tiny_tokenizer, min_score={"f1": 0.5}, scores=nothing)
    # export takes the same bar
    exported = tmp_path / "kept.jsonl"
    assert cli_run(["export", str(graded["artifact"]), "--out", str(exported), "--min-score", "f1=0.5"]) == 0
    records = [json.loads(line) for line in exported.read_text().splitlines()]
    assert {record["row_id"] for record in records} == above


def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    graded: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    artifact = str(graded["artifact"])
    taken = tmp_path / "taken.jsonl"
    taken.write_text("mine\n")
    for command in (["score", artifact, "--out", str(taken)], ["report", artifact, "--out", str(taken)]):
        capsys.readouterr()
        assert cli_run(command) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"error: {taken} already exists; choose another --out path." and taken.read_text() == "mine\n"
    # a shard base with a missing shard
    gencache.generate(graded["config"], shards=2, output_dir=tmp_path / "sharded")
    assert cli_run(["score", str(tmp_path / "sharded")]) == 0  # whole, the base scores
    shutil.rmtree(tmp_path / "sharded-shard-00001-of-00002")
    for command in (
        ["score", str(tmp_path / "sharded"), "--out", str(tmp_path / "a.jsonl")],
        ["report", str(tmp_path / "sharded"), "--out", str(tmp_path / "a.html")],
    ):
        capsys.readouterr()
        assert cli_run(command) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "shard" in err and "internal error" not in err
    # the recorded sources are gone: the references cannot be rebuilt; nothing is scored or written
    moved = tmp_path / "moved"
    shutil.move(str(graded["data"]), moved)
    try:
        for command in (
            ["score", artifact, "--out", str(tmp_path / "b.jsonl")],
            ["report", artifact, "--out", str(tmp_path / "b.html")],
            ["export", artifact, "--out", str(tmp_path / "b.parquet"), "--min-score", "f1=0.5"],
        ):
            capsys.readouterr()
            assert cli_run(command) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and "rows.jsonl" in err and "--data-root" in err, err
        assert not any(p.name.startswith("b.") for p in tmp_path.iterdir())
        # pointed at with --data-root, they are found again
        assert cli_run(["score", artifact, "--data-root", str(moved), "--out", str(tmp_path / "c.jsonl")]) == 0
    finally:
        shutil.move(str(moved), graded["data"])
    capsys.readouterr()
    assert cli_run(["score", artifact, "--answer-pattern", "0=(a)(b)"]) == 2
    assert "name the one that holds the answer" in capsys.readouterr().err


def test_export_format_follows_the_extension(graded: dict[str, Any], tmp_path: Path) -> None:
    artifact = str(graded["artifact"])
    parquet = tmp_path / "answers.parquet"
    assert cli_run(["export", artifact, "--out", str(parquet), "--no-prompts"]) == 0
    assert parquet.read_bytes()[:4] == b"PAR1"
    jsonl = tmp_path / "answers.jsonl"
    assert cli_run(["export", artifact, "--out", str(jsonl), "--no-prompts"]) == 0
    assert json.loads(jsonl.read_text().splitlines()[0])["key"]
    for argv in (
        ["--out", str(tmp_path / "x.parquet"), "--format", "jsonl"],
        ["--out", str(tmp_path / "x.jsonl"), "--format", "parquet"],
        ["--out", str(tmp_path / "x.txt")],
    ):
        assert cli_run(["export", artifact, *argv, "--no-prompts"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.jsonl", "answers.parquet"]
    assert cli_run(["export", artifact, "--out", str(tmp_path / "x.txt"), "--format", "jsonl", "--no-prompts"]) == 0


def test_export_without_prompts_and_score_fill_the_join_fields_without_the_tokenizer(
    graded: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "bare.jsonl"
    probe = (
        "import sys\nfrom gencache.cli.app import run\n"
        f"assert run(['export', {str(graded['artifact'])!r}, '--out', {str(out)!r}, '--no-prompts']) == 0\n"
        f"assert run(['score', {str(graded['artifact'])!r}, '--json']) == 0\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    assert result.stdout.strip().splitlines()[-1] == "[]"
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == QUESTIONS
    for record in records:
        row = int(record["row_id"][1:])
        assert record["row_index"] == row and record["reference"] == (graded["golds"][row] or None)
        assert record["prompt"] is None and record["prompt_ids"] is None and record["dataset_name"] == "table"


def test_an_answer_pattern_given_when_scoring_replaces_the_recipe_rule(graded: dict[str, Any]) -> None:
    stored = answers_by_row(graded["artifact"], graded["config"])
    report = gencache.score(graded["artifact"], answer_patterns={0: r"(?P<answer>\S+)"})
    assert "answer_pattern" in report.groups[0].rule
    for answer in report.answers:
        text = stored[answer.row_index]  # type: ignore[index]
        rest = text.rsplit("</think>", 1)[1] if "</think>" in text else ("" if "<think>" in text else text)
        first_word = rest.split()[0] if rest.split() else ""
        assert answer.answer == first_word


def test_a_think_block_the_prompt_opened_is_thinking_not_the_answer(tiny_teacher_dir: Path, tmp_path: Path) -> None:
    """A teacher whose chat template ends the prompt with ``<think>`` and a newline (DeepSeek-R1 distills, Qwen3
    *-Thinking): its answers, cut by max_new_tokens long before a ``</think>``, are still thinking, so they have no
    answer and score 0, however much of the reference the reasoning names."""
    from transformers import AutoTokenizer

    from gencache.generation.tiny import CHAT_TEMPLATE

    teacher = tmp_path / "thinking-teacher"
    shutil.copytree(tiny_teacher_dir, teacher)
    header = "'<|im_start|>assistant\\n'"
    assert header in CHAT_TEMPLATE
    tokenizer = AutoTokenizer.from_pretrained(str(teacher))
    tokenizer.chat_template = CHAT_TEMPLATE.replace(header, "'<|im_start|>assistant\\n<think>\\n'")
    tokenizer.save_pretrained(str(teacher))
    source = tmp_path / "rows.jsonl"
    write_rows(source, ["Paris"] * 3)
    table = musique(
        dataset_name="table",
        num_samples=3,
        seed=0,
        source=str(source),
        template="tokenizer_chat",
        template_kwargs={"enable_thinking": True},
        data_kwargs={"answer": "gold", "id": "qid"},
    )
    config = tmp_path / "config.json"
    config.write_text(json.dumps(config_dict(tmp_path, teacher, data_configs=[table])))
    samples = gencache.build_samples(load_config(config), tokenizer=tokenizer)
    assert all(sample.prompt_text.endswith("<|im_start|>assistant\n<think>\n") for sample in samples)
    artifact = gencache.generate(config)
    assert artifact is not None
    report = gencache.score(artifact)
    reader = CacheReader(artifact)
    stored = {s.key: reader.metadata(s.key)["text"][0] for s in samples}  # type: ignore[index]
    thinking = [a for a in report.answers if "</think>" not in stored[a.key]]
    assert thinking and all(first_line_after_thinking(stored[a.key]) for a in thinking)
    for answer in thinking:
        assert answer.answer == "" and answer.metrics == {"exact_match": 0.0, "f1": 0.0, "contains": 0.0}
