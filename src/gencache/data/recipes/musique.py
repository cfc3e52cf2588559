"""MuSiQue (``dgslibisey/MuSiQue``): multi-hop questions over a list of paragraphs.

``subset`` is not a hub config here (the reference never passed it); in a local directory it is only the first
folder tried. The split is shuffled with ``random.Random(seed)``; few-shot examples are the last ``num_shots`` of
that order and samples the first ``num_samples``. One document per paragraph (``paragraph_text``), in order.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from gencache.data.prompts import compose_default
from gencache.data.recipes.base import (
    DataConfigLike,
    RawSample,
    SourceInfo,
    check_counts,
    coerce_kwargs,
    require_str,
    shortfall,
    warn,
)
from gencache.data.sources import load_tables
from gencache.errors import DatasetError

INSTRUCTION = "Answer the following question based on the provided context.\n"
COT = (
    "You should get the final answer by thinking step by step."
    "\nThe answer is a word or short phrase. Your response should end with: 'Answer: <your final answer>'.\n"
)


class MuSiQueKwargs(BaseModel):
    """``data_kwargs`` of ``musique``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    add_inst: StrictBool = Field(default=True, description="Wrap the question in the instruction.")
    add_cot: StrictBool = Field(default=True, description="Append the step-by-step sentence and answer format.")
    cache_dataset: StrictBool = Field(default=True, description="Accepted for reference configs; has no effect.")


def task_prompt(question: str, add_inst: bool, add_cot: bool) -> str:
    """The reference's task text for one question."""
    text = INSTRUCTION + question + "\n" if add_inst else question
    if add_cot:
        text += COT
    return text


def _paragraphs(record: dict[str, Any], index: int) -> list[str]:
    paragraphs = record.get("paragraphs")
    if not isinstance(paragraphs, list):
        raise DatasetError(f"musique row {index} has no paragraphs list; check the source's schema.")
    out = []
    for position, paragraph in enumerate(paragraphs):
        if not isinstance(paragraph, dict):
            raise DatasetError(f"musique row {index} paragraphs[{position}] must be an object with paragraph_text.")
        out.append(require_str(paragraph.get("paragraph_text"), f"musique row {index} paragraph_text"))
    return out


class MuSiQueRecipe:
    """The ``musique`` recipe."""

    name = "musique"
    hub_id = "dgslibisey/MuSiQue"
    kwargs_model: type[BaseModel] = MuSiQueKwargs

    def needs_tokenizer(self, kwargs: BaseModel) -> bool:
        return False

    def load(self, dc: DataConfigLike, kwargs: BaseModel, tokenizer: Any | None) -> tuple[list[RawSample], SourceInfo]:
        kw = coerce_kwargs(MuSiQueKwargs, kwargs, self.name)
        check_counts(dc)
        tables, info = load_tables(
            dc.source,
            self.hub_id,
            label=self.name,
            hub_config=None,
            dir_config=dc.subset,
            splits=(dc.split,),
        )
        table = tables[dc.split]
        total = len(table)
        rng = random.Random(dc.seed)
        order = list(range(total))
        rng.shuffle(order)
        if dc.num_shots > 0 and kw.add_cot:
            warn("Do not recommend using few-shot with CoT for MuSiQue dataset.")
        if dc.num_shots > total or total - dc.num_shots < dc.num_samples:
            raise shortfall(
                self.name,
                dc.split,
                dc.num_samples,
                max(total - dc.num_shots, 0),
                f"{total} rows, {dc.num_shots} used as few-shot",
            )

        def row(index: int) -> tuple[list[str], str, str]:
            record = table[index]
            return (
                _paragraphs(record, index),
                require_str(record.get("question"), f"musique row {index} question"),
                require_str(record.get("answer"), f"musique row {index} answer"),
            )

        shot_indices = order[total - dc.num_shots :] if dc.num_shots else []
        shots: list[dict[str, Any]] = []
        rendered: list[str] = []
        for index in shot_indices:
            documents, question, answer = row(index)
            shown = INSTRUCTION + question if kw.add_inst else "Question: " + question
            context = "\n".join(documents)
            rendered.append(f"Context: {context}\n{shown}\nAnswer: {answer}\n")
            shots.append({"documents": documents, "query": question, "answer": answer, "task": {}})
        preamble = "\n".join(rendered) + "\n" if rendered else ""
        samples: list[RawSample] = []
        for index in order[: total - dc.num_shots][: dc.num_samples]:
            documents, question, answer = row(index)
            semantic = {"documents": documents, "query": question, "shots": copy.deepcopy(shots), "task": {}}
            parts = compose_default(preamble, documents, task_prompt(question, kw.add_inst, kw.add_cot))
            samples.append(RawSample(semantic=semantic, parts=parts, query=question, answer=answer))
        return samples, info


RECIPE = MuSiQueRecipe()
