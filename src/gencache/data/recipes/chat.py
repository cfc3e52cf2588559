"""``chat``: rows that already are conversations (``messages``, or ShareGPT's ``conversations``).

The key is the conversation without its final assistant turn (the gold answer); the final user turn is the query
and the earlier turns are ``task.history``. Only chat templates render it. See docs/datasets.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gencache.config.datasets import HISTORY, ChatKwargs
from gencache.data.recipes.base import DataConfigLike, DatasetRecipe, Question, Selection
from gencache.data.recipes.columns import Column, check_columns, field_of, require_type, row_error
from gencache.data.recipes.table import documents_of, filtered_order, load_table, named_columns
from gencache.data.sources import DELIMITERS, origin_of

#: The roles of a turn, and ShareGPT's ``from`` values: the roles they stand for.
ROLES = {role: role for role in ("system", "user", "assistant")}
SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system"}
#: The column ShareGPT files hold their turns in, read when the default ``messages`` column is absent.
SHAREGPT_COLUMN = "conversations"
COLUMNS = (
    Column(
        "<messages>",
        "list of objects {role, content}",
        True,
        "The column data_kwargs.messages names (default messages): roles system, user, assistant; contents strings.",
    ),
    Column(
        SHAREGPT_COLUMN,
        "list of objects {from, value}",
        False,
        "ShareGPT rows instead of messages (read when the default messages column is absent): from human, gpt, system.",
    ),
    Column(
        "<documents>", "string, list of strings or list of objects", False, "The columns data_kwargs.documents names."
    ),
    Column("<task>", "any JSON", False, "The columns data_kwargs.task names: the key's task fields."),
    Column("<id>", "string or integer", False, "The column data_kwargs.id names: the row's id (row_id), not keyed."),
)


def conversation(table: Any, label: str, index: int, row: Mapping[str, Any], column: str) -> list[tuple[str, str]]:
    """The ``(role, content)`` turns of row ``index``, checked: ``{role, content}``, or ShareGPT's ``{from, value}``
    mapped (a row whose first turn has ``from`` is ShareGPT's)."""
    files = origin_of(table, label).files
    if isinstance(row.get(column), str) and any(p.suffix.lower() in DELIMITERS for p in files):  # a list as JSON text
        try:
            row = {**row, column: json.loads(row[column])}
        except ValueError as error:
            problem = f"{column!r} is not JSON ({error}); in a CSV or TSV file write it as JSON text in its cell"
            raise row_error(table, label, index, problem) from None
    values = field_of(table, label, index, row, column, "list")
    first = values[0] if values and isinstance(values[0], Mapping) else {}
    sharegpt = first.get("from") is not None and first.get("role") is None  # Arrow gives absent fields as nulls
    said, content, roles = ("from", "value", SHAREGPT_ROLES) if sharegpt else ("role", "content", ROLES)
    turns: list[tuple[str, str]] = []
    for position, turn in enumerate(values):
        where = f"{column}[{position}]"
        require_type(table, label, index, turn, where, "object")
        speaker = field_of(table, label, index, {where: turn}, f"{where}.{said}", "string")
        if speaker not in roles:
            rows = "ShareGPT rows" if sharegpt else "chat rows"
            raise row_error(table, label, index, f"{where}.{said} is {speaker!r}; {rows} take {', '.join(roles)}")
        if roles[speaker] == "system" and position:
            raise row_error(table, label, index, f"{where} is a system turn; only the first turn may be one")
        turns.append((roles[speaker], field_of(table, label, index, {where: turn}, f"{where}.{content}", "string")))
    return turns


class ChatRecipe(DatasetRecipe[ChatKwargs, tuple[Any, str]]):
    name = "chat"
    hub_id = ""
    kwargs_model = ChatKwargs
    columns = COLUMNS

    def select(self, dc: DataConfigLike, kwargs: ChatKwargs, tokenizer: Any | None) -> Selection[tuple[Any, str]]:
        table, info = load_table(self, dc)
        column = kwargs.messages  # or ShareGPT's, when the default column is absent
        default = ChatKwargs.model_fields["messages"].default
        if column == default and default not in table.column_names and SHAREGPT_COLUMN in table.column_names:
            column = SHAREGPT_COLUMN
        check_columns(table, self.name, named_columns(kwargs, column, "data_kwargs.messages"))
        order, detail = filtered_order(table, dc, kwargs.shuffle, kwargs.filters)
        self.require_rows(dc, len(order), detail)  # num_shots is 0 here
        return Selection(info, (table, column), (), order[: dc.num_samples])

    def sample(self, rows: tuple[Any, str], kwargs: ChatKwargs, index: int) -> Question:
        table, column = rows  # the table and the column holding its conversations
        row = table[index]
        turns = conversation(table, self.name, index, row, column)
        answer = ""
        if turns and turns[-1][0] == "assistant":
            answer = turns.pop()[1]
        if not turns or turns[-1][0] != "user":
            problem = f"{column!r} must end with a user turn (after its final assistant turn)"
            raise row_error(table, self.name, index, problem)
        query = turns[-1][1]
        if not query:
            raise row_error(table, self.name, index, "the final user turn is empty; every sample needs a query")
        history = tuple(turns[:-1])
        task: dict[str, Any] = {HISTORY: [{"role": role, "content": content} for role, content in history]}
        task.update({column: field_of(table, self.name, index, row, column, "any") for column in kwargs.task})
        documents = documents_of(table, self.name, index, row, kwargs)
        row_id = kwargs.id and field_of(table, self.name, index, row, kwargs.id, "string or integer")
        return Question(documents, query, answer, query, task, history=history, row_id=row_id)


RECIPE = ChatRecipe()
