"""MuSiQue (``dgslibisey/MuSiQue``): multi-hop questions over a list of paragraphs (docs/datasets.md)."""

from __future__ import annotations

import functools
import random
import warnings
from typing import Any

from gencache.config.datasets import MuSiQueKwargs
from gencache.data.recipes.base import DataConfigLike, DatasetRecipe, Question, QuestionRows, Selection, Shot
from gencache.data.recipes.columns import Column, field_of, require_type

INSTRUCTION = "Answer the following question based on the provided context.\n"
COT = (
    "You should get the final answer by thinking step by step."
    "\nThe answer is a word or short phrase. Your response should end with: 'Answer: <your final answer>'.\n"
)


COLUMNS = (
    Column("question", "string", True, "The question: the key's query and the task text."),
    Column("answer", "string", True, "The gold answer (few-shot examples show it)."),
    Column(
        "paragraphs[].paragraph_text",
        "list of objects with a string paragraph_text",
        True,
        "One document per paragraph, in order.",
    ),
    Column("paragraphs[].title", "string", False, "Not used."),
    Column("id", "string", False, "Not used."),
    Column("answer_aliases", "list of strings", False, "Not used."),
)


def _paragraphs(table: Any, record: dict[str, Any], index: int) -> list[str]:
    out = []
    for position, paragraph in enumerate(field_of(table, "musique", index, record, "paragraphs", "list")):
        where = f"paragraphs[{position}]"
        require_type(table, "musique", index, paragraph, where, "object")
        out.append(field_of(table, "musique", index, {where: paragraph}, f"{where}.paragraph_text", "string"))
    return out


class MuSiQueRecipe(DatasetRecipe[MuSiQueKwargs, QuestionRows]):
    name = "musique"
    hub_id = "dgslibisey/MuSiQue"
    kwargs_model = MuSiQueKwargs
    columns = COLUMNS

    def select(self, dc: DataConfigLike, kwargs: MuSiQueKwargs, tokenizer: Any | None) -> Selection[QuestionRows]:
        tables, info = self.tables(dc, splits=(dc.split,), hub_config=None)
        table = tables[dc.split]
        self.check_columns(table)
        total = len(table)
        order = list(range(total))
        random.Random(dc.seed).shuffle(order)
        if dc.num_shots > 0 and kwargs.add_cot:
            warnings.warn("Do not recommend using few-shot with CoT for MuSiQue dataset.", stacklevel=3)
        self.require_rows(dc, total, f"{total} rows, {dc.num_shots} used as few-shot")
        shots = order[total - dc.num_shots :] if dc.num_shots else []
        candidates = order[: total - dc.num_shots][: dc.num_samples]
        return Selection(info, QuestionRows(table, self.name, functools.partial(_paragraphs, table)), shots, candidates)

    def shot(self, rows: QuestionRows, kwargs: MuSiQueKwargs, index: int) -> Shot:
        documents, question, answer = rows.read(index)
        shown = INSTRUCTION + question if kwargs.add_inst else "Question: " + question
        context = "\n".join(documents)
        return Shot(documents, question, answer, f"Context: {context}\n{shown}\nAnswer: {answer}\n")

    def sample(self, rows: QuestionRows, kwargs: MuSiQueKwargs, index: int) -> Question:
        documents, question, answer = rows.read(index)
        text = INSTRUCTION + question + "\n" if kwargs.add_inst else question  # the SemPIC research code's task text
        return Question(documents, question, answer, text + (COT if kwargs.add_cot else ""))


RECIPE = MuSiQueRecipe()
