"""The dataset recipe skeleton, the types a recipe reads and returns, and a few common checks."""

from __future__ import annotations

import copy
import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from gencache.config import DataConfig, KwargsModel
from gencache.core.errors import DatasetError
from gencache.data.prompts import ContextBlock, Inline, Prompt, compose_default, normalize
from gencache.data.recipes.columns import Column, check_columns, field_of
from gencache.data.sources import SourceInfo, load_tables

#: The data config a recipe reads.
DataConfigLike = DataConfig


@dataclass(frozen=True)
class RawSample:
    """One sample as a recipe yields it, before any template: its key payload ``semantic``, its default prompt
    ``parts``, the query as shown and the gold answer. ``history`` (a chat row only) holds the turns before the final
    user turn; ``row`` and ``row_id`` say which source row it was made of and are not part of the key."""

    semantic: dict[str, Any]
    parts: Prompt
    query: str
    answer: str
    history: tuple[tuple[str, str], ...] | None = None
    row: int | None = None
    row_id: str | int | None = None


KwargsT = TypeVar("KwargsT", bound=KwargsModel)
RowsT = TypeVar("RowsT")


@dataclass(frozen=True)
class Shot:
    """One few-shot example: what its key records (documents, query, answer, task) and its rendered text."""

    documents: list[str]
    query: str
    answer: str
    rendered: str
    task: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Question:
    """One sample before the skeleton adds the shots: its key fields and what its prompt shows (``shown``: the
    query as shown; ``context``: the document blocks, when they differ from the key's documents)."""

    documents: list[str]
    query: str
    answer: str
    task_prompt: str
    task: dict[str, Any] = field(default_factory=dict)
    shown: str | None = None
    context: list[str] | None = None
    history: tuple[tuple[str, str], ...] | None = None
    row_id: str | int | None = None
    row: int | None = None  # the source table's row, when the candidate index is not it


@dataclass(frozen=True)
class Selection(Generic[RowsT]):
    """What a recipe chose from its source: few-shot indices, sample candidates (tried in order until
    ``num_samples`` are made), and ``rows``, whatever its :meth:`~DatasetRecipe.shot` and
    :meth:`~DatasetRecipe.sample` read. When the candidates run out, the shortfall names what they were
    (``detail``) and why a candidate was skipped (``skipped``)."""

    source: SourceInfo
    rows: RowsT
    shots: Sequence[int]
    candidates: Iterable[int]
    detail: str = ""
    skipped: str = "rows skipped"


@dataclass(frozen=True)
class QuestionRows:
    """Rows of a question-answering table: the recipe's documents of a row, its question and its answer."""

    table: Any
    label: str
    documents: Callable[[dict[str, Any], int], list[str]]

    def read(self, index: int) -> tuple[list[str], str, str]:
        record = self.table[index]
        return (
            self.documents(record, index),
            field_of(self.table, self.label, index, record, "question", "string"),
            field_of(self.table, self.label, index, record, "answer", "string"),
        )


def _no_shots(name: str) -> DatasetError:
    return DatasetError(f"{name} has no few-shot examples; set num_shots to 0.", "num_shots")


class DatasetRecipe(ABC, Generic[KwargsT, RowsT]):
    """A dataset: its name, canonical hub id, ``data_kwargs`` model, and the steps that turn a data config into
    samples. :meth:`load` is the one skeleton: :meth:`select` (read and shuffle the source), one :meth:`shot` per
    few-shot index, :meth:`preamble`, then :meth:`sample` per candidate until ``num_samples`` are made, each
    becoming a :class:`RawSample` whose key holds the shots."""

    name: ClassVar[str]
    hub_id: ClassVar[str]
    kwargs_model: ClassVar[type[KwargsModel]]
    #: The columns the recipe reads (docs/datasets.md renders them; :meth:`check_columns` checks them).
    columns: ClassVar[tuple[Column, ...]] = ()

    def check_columns(self, table: Any, table_name: str | None = None) -> None:
        """Refuse ``table`` when it lacks a required column of :attr:`columns` (of ``table_name``)."""
        check_columns(table, self.name, self.columns, table_name)

    def needs_tokenizer(self, kwargs: KwargsT) -> bool:
        """Whether building the samples counts teacher tokens."""
        return False

    @abstractmethod
    def select(self, dc: DataConfigLike, kwargs: KwargsT, tokenizer: Any | None) -> Selection[RowsT]:
        """Load the source and choose the few-shot rows and the sample candidates (raising any shortfall)."""

    @abstractmethod
    def sample(self, rows: RowsT, kwargs: KwargsT, index: int) -> Question | None:
        """The sample made of candidate ``index``, or None to skip it."""

    def shot(self, rows: RowsT, kwargs: KwargsT, index: int) -> Shot:
        """The few-shot example made of row ``index`` (a recipe with few-shot examples overrides this)."""
        raise _no_shots(self.name)

    def preamble(self, rendered: list[str]) -> str:
        return "\n".join(rendered) + "\n" if rendered else ""

    def tables(
        self, dc: DataConfigLike, *, splits: Sequence[str], hub_config: str | None
    ) -> tuple[dict[str, Any], SourceInfo]:
        """The data config's tables from its ``source`` (the hub dataset :attr:`hub_id` when null), by split."""
        return load_tables(dc, self.hub_id, self.name, hub_config, splits)

    def require_rows(self, dc: DataConfigLike, available: int, detail: str) -> None:
        """A shortfall error unless ``available`` rows cover the few-shot examples and the samples."""
        if dc.num_shots + dc.num_samples > available:
            raise shortfall(self.name, dc.split, dc.num_samples, max(available - dc.num_shots, 0), detail)

    def load(self, dc: DataConfigLike, kwargs: KwargsT, tokenizer: Any | None) -> tuple[list[RawSample], SourceInfo]:
        if dc.num_shots and type(self).shot is DatasetRecipe.shot:  # refused before the source is read
            raise _no_shots(self.name)
        selection = self.select(dc, kwargs, tokenizer)
        shots = [self.shot(selection.rows, kwargs, index) for index in selection.shots]
        preamble = self.preamble([shot.rendered for shot in shots])
        recorded = [{k: v for k, v in dataclasses.asdict(shot).items() if k != "rendered"} for shot in shots]
        samples: list[RawSample] = []
        skipped = 0
        for index in selection.candidates:
            if len(samples) == dc.num_samples:
                break
            question = self.sample(selection.rows, kwargs, index)
            if question is None:
                skipped += 1
                continue
            semantic = {
                "documents": question.documents,
                "query": question.query,
                "shots": copy.deepcopy(recorded),
                "task": question.task,
            }
            context = question.documents if question.context is None else question.context
            if question.history is None:
                parts = compose_default(preamble, context, question.task_prompt)
            else:  # a chat row's final user turn: no preamble, no leading space
                blocks = [part for text in context for part in (ContextBlock(text), Inline(" "))]
                parts = normalize([*blocks, Inline(question.task_prompt)])
            samples.append(
                RawSample(
                    semantic,
                    parts,
                    query=question.query if question.shown is None else question.shown,
                    answer=question.answer,
                    history=question.history,
                    row=index if question.row is None else question.row,
                    row_id=question.row_id,
                )
            )
        if len(samples) < dc.num_samples:
            detail = ", ".join(filter(None, (selection.detail, f"{skipped} {selection.skipped}")))
            raise shortfall(self.name, dc.split, dc.num_samples, len(samples), detail)
        return samples, selection.source


def shortfall(dataset: str, split: str, asked: int, available: int, detail: str) -> DatasetError:
    return DatasetError(
        f"{dataset} split {split!r} holds {available} usable samples ({detail}) but num_samples is {asked}; "
        f"lower num_samples to at most {available} or choose a larger split.",
        "num_samples",
    )
