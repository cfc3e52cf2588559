"""``table``: a declarative recipe over any JSON, JSON Lines, parquet, CSV or TSV table, local or on the hub.

``data_kwargs`` name the columns; see docs/datasets.md for the selection rule and a worked example.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from gencache.config.datasets import ChatKwargs, TableKwargs
from gencache.core.errors import DatasetError
from gencache.data.recipes.base import DataConfigLike, DatasetRecipe, Question, Selection, Shot
from gencache.data.recipes.columns import Column, check_columns, field_of, require_type, row_error

COLUMNS = (
    Column("<query>", "string", True, "The column data_kwargs.query names (default question): the key's query."),
    Column(
        "<documents>",
        "string, list of strings or list of objects",
        False,
        "The column(s) data_kwargs.documents names: the key's documents, in column order.",
    ),
    Column("<answer>", "string", False, "The column data_kwargs.answer names (default answer): the gold answer."),
    Column("<task>", "any JSON", False, "The columns data_kwargs.task names: the key's task fields."),
    Column("<filter>", "string, number or boolean", False, "The columns data_kwargs.filters names."),
    Column("<id>", "string or integer", False, "The column data_kwargs.id names: the row's id (row_id), not keyed."),
)


def document_columns(kwargs: TableKwargs | ChatKwargs) -> list[str]:
    return [kwargs.documents] if isinstance(kwargs.documents, str) else list(kwargs.documents or ())


def named_columns(kwargs: Any, first: str, first_field: str) -> list[Column]:
    """The columns a row must have under ``kwargs`` (``first``: the query or messages column), with their fields."""
    named: list[tuple[str, str]] = [(first, first_field)]
    named += [(name, "data_kwargs.documents") for name in document_columns(kwargs)]
    named += [(name, "data_kwargs.task") for name in kwargs.task]
    named += [(name, f"data_kwargs.filters.{name}") for name in kwargs.filters]
    for optional, field in ((getattr(kwargs, "answer", None), "data_kwargs.answer"), (kwargs.id, "data_kwargs.id")):
        if optional is not None:
            named.append((optional, field))
    fields = dict(reversed(named))  # the first field that names a column is the one to change
    return [Column(name, "", True, "", field=fields[name]) for name in dict.fromkeys(name for name, _ in named)]


def documents_of(table: Any, label: str, index: int, row: Mapping[str, Any], kwargs: Any) -> list[str]:
    """The documents of row ``index``: each document column in order; a string is one document, a list gives
    its strings (or its objects' ``document_field``) in order."""
    documents: list[str] = []
    for column in document_columns(kwargs):
        value = field_of(table, label, index, row, column, "any")
        if isinstance(value, str):
            documents.append(value)
            continue
        require_type(table, label, index, value, column, "list")
        for position, item in enumerate(value):
            where = f"{column}[{position}]"
            if isinstance(item, Mapping):
                text = field_of(table, label, index, {where: item}, f"{where}.{kwargs.document_field}", "string")
                documents.append(text)
            else:
                documents.append(require_type(table, label, index, item, where, "string"))
    return documents


def filtered_order(table: Any, dc: DataConfigLike, shuffle: bool, filters: Mapping[str, Any]) -> tuple[list[int], str]:
    """Row indices in selection order (seeded shuffle, then the filters keeping that order) and what they are."""
    order = list(range(len(table)))
    if shuffle:
        random.Random(dc.seed).shuffle(order)
    detail = f"{len(order)} rows"
    for column, wanted in filters.items():
        allowed = wanted if isinstance(wanted, list) else [wanted]
        values = table[column]
        order = [  # true never equals 1
            i
            for i in order
            if any(values[i] == a and isinstance(values[i], bool) == isinstance(a, bool) for a in allowed)
        ]
    if filters:
        shown = ", ".join(f"{column} in {wanted!r}" for column, wanted in filters.items())
        detail += f", {len(order)} where {shown}"
    return order, detail


def load_table(recipe: DatasetRecipe[Any, Any], dc: DataConfigLike) -> tuple[Any, Any]:
    """The data config's table (from ``source``; there is no canonical hub dataset) and its source info."""
    if dc.source is None:
        raise DatasetError(
            f"{recipe.name} reads your own table: set source to a JSON Lines, JSON, parquet, CSV or TSV file, a "
            "directory laid out by split, or a hub dataset id."
        )
    tables, info = recipe.tables(dc, splits=(dc.split,), hub_config=None if dc.subset == "default" else dc.subset)
    return tables[dc.split], info


class TableRecipe(DatasetRecipe[TableKwargs, Any]):
    name = "table"
    hub_id = ""
    kwargs_model = TableKwargs
    columns = COLUMNS

    def select(self, dc: DataConfigLike, kwargs: TableKwargs, tokenizer: Any | None) -> Selection[Any]:
        if dc.num_shots and kwargs.answer is None:
            raise DatasetError("table few-shot examples show the answer: set data_kwargs.answer or num_shots to 0.")
        table, info = load_table(self, dc)
        check_columns(table, self.name, named_columns(kwargs, kwargs.query, "data_kwargs.query"))
        order, detail = filtered_order(table, dc, kwargs.shuffle, kwargs.filters)
        self.require_rows(dc, len(order), f"{detail}, {dc.num_shots} used as few-shot")
        shots = order[: dc.num_shots]
        return Selection(info, table, shots, order[dc.num_shots : dc.num_shots + dc.num_samples])

    def _read(self, table: Any, kwargs: TableKwargs, index: int) -> tuple[list[str], str, str, dict[str, Any]]:
        row = table[index]
        documents = documents_of(table, self.name, index, row, kwargs)
        query = field_of(table, self.name, index, row, kwargs.query, "string")
        answer = "" if kwargs.answer is None else field_of(table, self.name, index, row, kwargs.answer, "string")
        task = {column: field_of(table, self.name, index, row, column, "any") for column in kwargs.task}
        return documents, query, answer, task

    def shot(self, table: Any, kwargs: TableKwargs, index: int) -> Shot:
        documents, query, answer, task = self._read(table, kwargs, index)
        context = "".join(document + "\n" for document in documents)
        return Shot(documents, query, answer, f"{context}Question: {query}\nAnswer: {answer}\n", task)

    def sample(self, table: Any, kwargs: TableKwargs, index: int) -> Question:
        documents, query, answer, task = self._read(table, kwargs, index)
        if not query:
            raise row_error(table, self.name, index, f"{kwargs.query!r} is empty; every sample needs a query")
        shown = f"{kwargs.instruction}\n{query}" if kwargs.instruction else query
        row_id = kwargs.id and field_of(table, self.name, index, table[index], kwargs.id, "string or integer")
        return Question(documents, query, answer, shown, task, row_id=row_id)


RECIPE = TableRecipe()
