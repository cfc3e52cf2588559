"""A glossary dataset as a gencache recipe plug-in (registered in pyproject.toml under ``gencache.recipes``)."""

from __future__ import annotations

import random
from typing import Any

from pydantic import Field, StrictBool

from gencache.config import KwargsModel
from gencache.data.recipes.base import DataConfigLike, DatasetRecipe, Question, Selection, Shot
from gencache.data.recipes.columns import Column, field_of


class GlossaryKwargs(KwargsModel):
    """``data_kwargs`` of ``glossary``."""

    with_notes: StrictBool = Field(default=True, description="Show the term's notes as documents.")


class GlossaryRecipe(DatasetRecipe[GlossaryKwargs, Any]):
    """Define a term from its notes."""

    name = "glossary"
    hub_id = ""
    kwargs_model = GlossaryKwargs
    columns = (
        Column("term", "string", True, "The term to define."),
        Column("definition", "string", True, "The gold answer."),
        Column("notes", "list of strings", True, "Notes about the term: the documents."),
        Column("domain", "string", True, "The field the term belongs to: a task field."),
    )

    def select(self, dc: DataConfigLike, kwargs: GlossaryKwargs, tokenizer: Any | None) -> Selection[Any]:
        tables, info = self.tables(dc, splits=(dc.split,), hub_config=None)
        table = tables[dc.split]
        self.check_columns(table)
        order = list(range(len(table)))
        random.Random(dc.seed).shuffle(order)
        self.require_rows(dc, len(order), f"{len(order)} terms, {dc.num_shots} used as few-shot")
        return Selection(info, table, order[: dc.num_shots], order[dc.num_shots :])

    def _read(self, table: Any, kwargs: GlossaryKwargs, index: int) -> tuple[list[str], str, str, dict[str, Any]]:
        row = table[index]
        term = field_of(table, self.name, index, row, "term", "string")
        notes = field_of(table, self.name, index, row, "notes", "list of strings") if kwargs.with_notes else []
        definition = field_of(table, self.name, index, row, "definition", "string")
        domain = field_of(table, self.name, index, row, "domain", "string")
        return notes, f"What does {term} mean?", definition, {"domain": domain}

    def shot(self, rows: Any, kwargs: GlossaryKwargs, index: int) -> Shot:
        notes, query, answer, task = self._read(rows, kwargs, index)
        return Shot(notes, query, answer, f"{query} {answer}", task)

    def sample(self, rows: Any, kwargs: GlossaryKwargs, index: int) -> Question:
        notes, query, answer, task = self._read(rows, kwargs, index)
        return Question(notes, query, answer, f"{query} Answer in one sentence.", task)


RECIPE = GlossaryRecipe()
