"""``chat``: rows that already are conversations (``messages``, or ShareGPT's ``conversations``).

The key is the conversation without its final assistant turn (the gold answer); the final user turn is the query
and the earlier turns are ``task.history``. Only chat templates render it. See docs/datasets.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gencache.config.datasets import HISTORY, ChatKwargs
from gencache.core.errors import DatasetError
from gencache.data.recipes.base import DataConfigLike, DatasetRecipe, Question, Selection
from gencache.data.recipes.columns import Column, check_columns, field_of, json_cell, require_type, row_error
from gencache.data.recipes.table import documents_of, filtered_order, load_table, named_columns, row_id_of, task_of

ROLES = ("system", "user", "assistant")
#: ShareGPT's ``from`` values and the roles they stand for.
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


@dataclass(frozen=True)
class ChatRows:
    """The table a ``chat`` data config reads and the column holding its conversations."""

    table: Any
    column: str


def messages_column(table: Any, kwargs: ChatKwargs) -> str:
    """``data_kwargs.messages``, or ShareGPT's ``conversations`` when the default ``messages`` column is absent."""
    names = list(getattr(table, "column_names", []) or [])
    default = ChatKwargs.model_fields["messages"].default
    if kwargs.messages == default and default not in names and SHAREGPT_COLUMN in names:
        return SHAREGPT_COLUMN
    return kwargs.messages


def _turn(table: Any, label: str, index: int, turn: Any, where: str, sharegpt: bool) -> tuple[str, str]:
    """The ``(role, content)`` of one turn: ``{role, content}``, or ShareGPT's ``{from, value}`` mapped."""
    require_type(table, label, index, turn, where, "object")
    if not sharegpt:
        role = field_of(table, label, index, {where: turn}, f"{where}.role", "string")
        if role not in ROLES:
            raise row_error(table, label, index, f"{where}.role is {role!r}; chat rows take {', '.join(ROLES)}")
        return role, field_of(table, label, index, {where: turn}, f"{where}.content", "string")
    speaker = field_of(table, label, index, {where: turn}, f"{where}.from", "string")
    if speaker not in SHAREGPT_ROLES:
        shown = ", ".join(SHAREGPT_ROLES)
        raise row_error(table, label, index, f"{where}.from is {speaker!r}; ShareGPT rows take {shown}")
    return SHAREGPT_ROLES[speaker], field_of(table, label, index, {where: turn}, f"{where}.value", "string")


def conversation(table: Any, label: str, index: int, row: Mapping[str, Any], column: str) -> list[tuple[str, str]]:
    """The ``(role, content)`` turns of row ``index``, checked; a row whose first turn has ``from`` is ShareGPT's."""
    turns: list[tuple[str, str]] = []
    values = field_of(table, label, index, json_cell(table, label, index, row, column), column, "list")
    first = values[0] if values and isinstance(values[0], Mapping) else {}
    sharegpt = first.get("from") is not None and first.get("role") is None  # Arrow gives absent fields as nulls
    for position, turn in enumerate(values):
        where = f"{column}[{position}]"
        role, content = _turn(table, label, index, turn, where, sharegpt)
        if role == "system" and position:
            raise row_error(table, label, index, f"{where} is a system turn; only the first turn may be one")
        turns.append((role, content))
    return turns


class ChatRecipe(DatasetRecipe[ChatKwargs, ChatRows]):
    """The ``chat`` recipe."""

    name = "chat"
    hub_id = ""
    kwargs_model = ChatKwargs
    columns = COLUMNS

    def select(self, dc: DataConfigLike, kwargs: ChatKwargs, tokenizer: Any | None) -> Selection[ChatRows]:
        if dc.num_shots:
            raise DatasetError(
                "chat rows have no few-shot examples (a conversation is its own context); set num_shots to 0."
            )
        table, info = load_table(self, dc)
        column = messages_column(table, kwargs)
        check_columns(table, self.name, named_columns(kwargs, column, "data_kwargs.messages"))
        order, detail = filtered_order(table, dc, kwargs.shuffle, kwargs.filters)
        self.require_rows(dc, len(order), detail)  # num_shots is 0 here
        return Selection(info, ChatRows(table, column), (), order[: dc.num_samples])

    def sample(self, rows: ChatRows, kwargs: ChatKwargs, index: int) -> Question:
        table = rows.table
        row = table[index]
        turns = conversation(table, self.name, index, row, rows.column)
        answer = ""
        if turns and turns[-1][0] == "assistant":
            answer = turns.pop()[1]
        if not turns or turns[-1][0] != "user":
            problem = f"{rows.column!r} must end with a user turn (after its final assistant turn)"
            raise row_error(table, self.name, index, problem)
        query = turns[-1][1]
        if not query:
            raise row_error(table, self.name, index, "the final user turn is empty; every sample needs a query")
        history = tuple(turns[:-1])
        task: dict[str, Any] = {HISTORY: [{"role": role, "content": content} for role, content in history]}
        task.update(task_of(table, self.name, index, row, kwargs.task))
        documents = documents_of(table, self.name, index, row, kwargs)
        row_id = row_id_of(table, self.name, index, row, kwargs.id)
        return Question(documents, query, answer, query, task, history=history, row_id=row_id)


RECIPE = ChatRecipe()
