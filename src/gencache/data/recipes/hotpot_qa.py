"""HotpotQA (``hotpotqa/hotpot_qa``): multi-hop questions over Wikipedia paragraphs.

The whole split is shuffled with ``random.Random(seed)``, then filtered by ``level`` (``difficulty``), so the
samples of a difficulty filter are the filtered subsequence of the all-levels order. Few-shot examples are the
first ``num_shots`` of the filtered order, samples the next ``num_samples``. One document per context paragraph:
its sentences concatenated with no separator (titles are dropped).
"""

from __future__ import annotations

import copy
import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from gencache.data.prompts import compose_default
from gencache.data.recipes.base import (
    DataConfigLike,
    RawSample,
    SourceInfo,
    check_counts,
    coerce_kwargs,
    require_str,
    require_str_list,
    shortfall,
    warn,
)
from gencache.data.sources import load_tables
from gencache.errors import DatasetError

Difficulty = Literal["easy", "medium", "hard"]

INSTRUCTION = "Answer the following question based on the provided context.\n"
COT = "You should get the final answer by thinking step by step.\n"
ANSWER_FORMAT = "Your response should end with: 'Short Answer: <your final answer>'.\n"


def _hard_only() -> list[Difficulty]:
    return ["hard"]


class HotpotQAKwargs(BaseModel):
    """``data_kwargs`` of ``hotpot_qa``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    add_inst: StrictBool = Field(default=True, description="Prepend the instruction and append the answer format.")
    add_cot: StrictBool = Field(default=True, description="Append the step-by-step sentence to the question.")
    difficulty: list[Difficulty] = Field(
        default_factory=_hard_only,
        min_length=1,
        description="Levels to keep (a non-empty list of easy, medium, hard).",
    )


def _documents(row: dict[str, Any], index: int) -> list[str]:
    context = row.get("context")
    if not isinstance(context, dict) or "sentences" not in context:
        raise DatasetError(f"hotpot_qa row {index} has no context.sentences; check the source's schema.")
    paragraphs = context["sentences"]
    if not isinstance(paragraphs, list):
        raise DatasetError(f"hotpot_qa row {index}: context.sentences must be a list of sentence lists.")
    return ["".join(require_str_list(p, f"hotpot_qa row {index} context.sentences")) for p in paragraphs]


def task_prompt(question: str, add_inst: bool, add_cot: bool) -> str:
    """The reference's task text: instruction, question, step-by-step sentence (glued on), answer format."""
    text = INSTRUCTION + question if add_inst else question
    if add_cot:
        text += COT
    if add_inst:
        text += ANSWER_FORMAT
    return text


class HotpotQARecipe:
    """The ``hotpot_qa`` recipe."""

    name = "hotpot_qa"
    hub_id = "hotpotqa/hotpot_qa"
    kwargs_model: type[BaseModel] = HotpotQAKwargs

    def needs_tokenizer(self, kwargs: BaseModel) -> bool:
        return False

    def load(self, dc: DataConfigLike, kwargs: BaseModel, tokenizer: Any | None) -> tuple[list[RawSample], SourceInfo]:
        kw = coerce_kwargs(HotpotQAKwargs, kwargs, self.name)
        check_counts(dc)
        tables, info = load_tables(
            dc.source,
            self.hub_id,
            label=self.name,
            hub_config=dc.subset,
            dir_config=dc.subset,
            splits=(dc.split,),
        )
        table = tables[dc.split]
        if "level" not in table.column_names:
            raise DatasetError("hotpot_qa source has no 'level' column; it is needed for the difficulty filter.")
        levels = list(table["level"])
        rng = random.Random(dc.seed)
        order = list(range(len(levels)))
        rng.shuffle(order)
        wanted = set(kw.difficulty)
        kept = [i for i in order if levels[i] in wanted]
        if dc.num_shots > 0:
            warn("few_shot_str is not recommended for HotpotQA")
        if dc.num_shots + dc.num_samples > len(kept):
            raise shortfall(
                self.name,
                dc.split,
                dc.num_samples,
                max(len(kept) - dc.num_shots, 0),
                f"{len(kept)} rows of difficulty {', '.join(kw.difficulty)}, {dc.num_shots} used as few-shot",
            )

        def row(index: int) -> tuple[list[str], str, str]:
            record = table[index]
            return (
                _documents(record, index),
                require_str(record.get("question"), f"hotpot_qa row {index} question"),
                require_str(record.get("answer"), f"hotpot_qa row {index} answer"),
            )

        shots: list[dict[str, Any]] = []
        rendered: list[str] = []
        for index in kept[: dc.num_shots]:
            documents, question, answer = row(index)
            rendered.append(f"Context: {' '.join(documents)}\nQuestion: {question}\nAnswer: {answer}\n")
            shots.append({"documents": documents, "query": question, "answer": answer, "task": {}})
        preamble = "\n".join(rendered)
        samples: list[RawSample] = []
        for index in kept[dc.num_shots : dc.num_shots + dc.num_samples]:
            documents, question, answer = row(index)
            semantic = {"documents": documents, "query": question, "shots": copy.deepcopy(shots), "task": {}}
            parts = compose_default(preamble, documents, task_prompt(question, kw.add_inst, kw.add_cot))
            samples.append(RawSample(semantic=semantic, parts=parts, query=question, answer=answer))
        return samples, info


RECIPE = HotpotQARecipe()
