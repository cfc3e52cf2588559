"""HotpotQA (``hotpotqa/hotpot_qa``): multi-hop questions over Wikipedia paragraphs (docs/datasets.md)."""

from __future__ import annotations

import functools
import random
import warnings
from typing import Any

from gencache.config.datasets import HotpotQAKwargs
from gencache.data.recipes.base import DataConfigLike, DatasetRecipe, Question, QuestionRows, Selection, Shot
from gencache.data.recipes.columns import Column, field_of, require_type

INSTRUCTION = "Answer the following question based on the provided context.\n"
COT = "You should get the final answer by thinking step by step.\n"
ANSWER_FORMAT = "Your response should end with: 'Short Answer: <your final answer>'.\n"


COLUMNS = (
    Column("question", "string", True, "The question: the key's query and the task text."),
    Column("answer", "string", True, "The gold answer (few-shot examples show it)."),
    Column(
        "context.sentences",
        "list of lists of strings",
        True,
        "One list of sentences per paragraph; each paragraph's sentences, concatenated, are one document.",
    ),
    Column("level", "string", True, "easy, medium or hard; the difficulty filter reads it."),
    Column("context.title", "list of strings", False, "Paragraph titles; not used."),
    Column("id", "string", False, "Not used."),
)


def _documents(table: Any, row: dict[str, Any], index: int) -> list[str]:
    paragraphs = field_of(table, "hotpot_qa", index, row, "context.sentences", "list")
    return [
        "".join(require_type(table, "hotpot_qa", index, p, f"context.sentences[{n}]", "list of strings"))
        for n, p in enumerate(paragraphs)
    ]


class HotpotQARecipe(DatasetRecipe[HotpotQAKwargs, QuestionRows]):
    name = "hotpot_qa"
    hub_id = "hotpotqa/hotpot_qa"
    kwargs_model = HotpotQAKwargs
    columns = COLUMNS

    def select(self, dc: DataConfigLike, kwargs: HotpotQAKwargs, tokenizer: Any | None) -> Selection[QuestionRows]:
        tables, info = self.tables(dc, splits=(dc.split,), hub_config=dc.subset)
        table = tables[dc.split]
        self.check_columns(table)
        levels = list(table["level"])
        order = list(range(len(levels)))
        random.Random(dc.seed).shuffle(order)
        kept = [i for i in order if levels[i] in kwargs.difficulty]
        if dc.num_shots > 0:
            warnings.warn("few_shot_str is not recommended for HotpotQA", stacklevel=3)  # the caller of load
        detail = f"{len(kept)} rows of difficulty {', '.join(kwargs.difficulty)}, {dc.num_shots} used as few-shot"
        self.require_rows(dc, len(kept), detail)
        rows = QuestionRows(table, self.name, functools.partial(_documents, table))
        return Selection(info, rows, kept[: dc.num_shots], kept[dc.num_shots : dc.num_shots + dc.num_samples])

    def shot(self, rows: QuestionRows, kwargs: HotpotQAKwargs, index: int) -> Shot:
        documents, question, answer = rows.read(index)
        rendered = f"Context: {' '.join(documents)}\nQuestion: {question}\nAnswer: {answer}\n"
        return Shot(documents, question, answer, rendered)

    def preamble(self, rendered: list[str]) -> str:
        return "\n".join(rendered)  # each shot already ends with a newline

    def sample(self, rows: QuestionRows, kwargs: HotpotQAKwargs, index: int) -> Question:
        documents, question, answer = rows.read(index)
        # the SemPIC research code's task text: instruction, question, step-by-step sentence (glued on), format
        text = (INSTRUCTION if kwargs.add_inst else "") + question + (COT if kwargs.add_cot else "")
        return Question(documents, question, answer, text + (ANSWER_FORMAT if kwargs.add_inst else ""))


RECIPE = HotpotQARecipe()
