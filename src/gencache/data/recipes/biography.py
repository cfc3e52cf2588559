"""Biography (``alex-karev/biographies``): synthetic people with six attributes.

Two row-aligned hub tables, ``train`` (statements) and ``test`` (prefixes, names, labels); the data config's
``split`` is a 50/50 partition of the people kept, not a hub split. See docs/datasets.md.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from gencache.config.datasets import BiographyKwargs
from gencache.core.errors import DatasetError
from gencache.data.recipes.base import DataConfigLike, DatasetRecipe, Question, Selection, Shot
from gencache.data.recipes.columns import Column, field_of, row_error

ATTRIBUTES = ("birth_date", "birth_place", "current_location", "university", "major", "company")
QA_SUFFIX = " Respond with the answer only. Answer:"
QA_TEMPLATES: dict[str, tuple[str, ...]] = {
    "birth_date": (
        "What is the birth date of {name}?",
        "When was {name} born?",
        "When did {name}'s birth occur?",
        "When did {name} come into this world?",
    ),
    "birth_place": (
        "Where was {name} born?",
        "Which place is the birthplace of {name}?",
        "What is the birthplace of {name}?",
        "Where did {name} originate from?",
    ),
    "current_location": (
        "Where is {name} currently located?",
        "What is the current location of {name}?",
        "Where can I find {name} now?",
        "Where does {name} live currently?",
        "Where is {name} residing at present?",
    ),
    "university": (
        "Which university did {name} attend?",
        "What university did {name} go to?",
        "Where did {name} study in higher education?",
        "Where did {name} go for higher education?",
    ),
    "major": (
        "What was {name}'s major in university?",
        "What did {name} study in university?",
        "What field did {name} specialize in at university?",
        "In which subject did {name} major during university?",
    ),
    "company": (
        "Which company does {name} work for?",
        "Where is {name} employed?",
        "What is the name of the company where {name} works?",
        "At which company is {name} employed?",
    ),
}
SPLITS = ("train", "test")
COLUMNS = (
    *(
        Column(attr, "list of strings", True, "Statements about the person; a document takes one at random.", "train")
        for attr in ATTRIBUTES
    ),
    *(
        Column(attr, "list of strings", True, "Completion prefixes (question_type completion).", "test")
        for attr in ATTRIBUTES
    ),
    Column("name", "string", False, "The person's name; question_type QA needs it.", "test"),
    Column("labels", "object of strings", True, "The gold answer per attribute (labels.<attribute>).", "test"),
)


@dataclass(frozen=True)
class _Rows:
    """The row-aligned train/test tables (``kept``: the rows of the people kept), the seeded ``random.Random``
    every step draws from in order, and the pool of people (``per_sample`` per sample) whose documents a sample
    shows."""

    train: Any
    test: Any
    kept: list[int]
    rng: random.Random
    pool: list[int]
    per_sample: int

    def _choice(self, split: str, person: int, attr: str) -> str:
        table, at = getattr(self, split), self.kept[person]
        items = field_of(table, f"biography {split}", at, table[at], attr, "list of strings")
        if not items:
            raise row_error(table, f"biography {split}", at, f"{attr!r} is empty; every person needs one entry or more")
        return self.rng.choice(items)  # type: ignore[no-any-return]

    def document(self, person: int) -> str:
        return " ".join(self._choice("train", person, attr) for attr in ATTRIBUTES)

    def question(self, person: int, question_type: str) -> tuple[str, str, str, str]:
        """(attribute, semantic query, shown question, answer) of ``person``."""
        at = self.kept[person]
        attribute = self.rng.choice(ATTRIBUTES)
        if question_type == "completion":
            semantic = self._choice("test", person, attribute).rstrip()
            shown = "## " + semantic
        else:
            name = field_of(self.test, "biography test", at, self.test[at], "name", "string")
            semantic = self.rng.choice(QA_TEMPLATES[attribute]).replace("{name}", name)
            shown = semantic + QA_SUFFIX
        answer = field_of(self.test, "biography test", at, self.test[at], f"labels.{attribute}", "string")
        return attribute, semantic, shown, answer


class BiographyRecipe(DatasetRecipe[BiographyKwargs, _Rows]):
    name = "biography"
    hub_id = "alex-karev/biographies"
    kwargs_model = BiographyKwargs
    columns = COLUMNS

    def select(self, dc: DataConfigLike, kwargs: BiographyKwargs, tokenizer: Any | None) -> Selection[_Rows]:
        if dc.split not in SPLITS:
            raise DatasetError(
                f"Unknown split {dc.split!r} for biography; use 'train' or 'test' (halves of the people kept)."
            )
        tables, info = self.tables(dc, splits=SPLITS, hub_config=dc.subset)
        train, test = tables["train"], tables["test"]
        if len(train) != len(test):
            raise DatasetError(
                f"biography tables are not row-aligned: train has {len(train)} rows, test has {len(test)}; "
                "row i of both must describe the same person."
            )
        self.check_columns(train, "train")
        self.check_columns(test, "test")
        kept = [i for i, dates in enumerate(test["birth_date"]) if dates and len(set(dates)) > 1]
        cut = int(len(kept) * 0.5)
        bounds = (0, cut) if dc.split == "train" else (cut, len(kept))
        rng = random.Random(dc.seed)
        order = list(range(*bounds))
        rng.shuffle(order)
        detail = f"{len(order)} people in this half of {len(kept)} kept rows, {dc.num_shots} used as few-shot"
        self.require_rows(dc, len(order), detail)
        pool = order[: len(order) - dc.num_shots]
        shot_people = order[len(order) - dc.num_shots :] if dc.num_shots else []
        if dc.num_samples and dc.num_data_strs > len(pool):
            raise DatasetError(
                f"biography num_data_strs is {dc.num_data_strs} but the split's pool holds {len(pool)} people; "
                f"lower num_data_strs to at most {len(pool)}."
            )
        rows = _Rows(train, test, kept, rng, pool, dc.num_data_strs)
        return Selection(info, rows, shot_people, pool[: dc.num_samples])

    def shot(self, rows: _Rows, kwargs: BiographyKwargs, index: int) -> Shot:
        document = rows.document(index)
        attribute, query, shown, answer = rows.question(index, kwargs.question_type)
        return Shot([document], query, answer, f"{document} {shown} {answer}.", {"attribute": attribute})

    def sample(self, rows: _Rows, kwargs: BiographyKwargs, index: int) -> Question:
        attribute, query, shown, answer = rows.question(index, kwargs.question_type)
        chosen = rows.rng.sample(rows.pool, rows.per_sample)
        if rows.per_sample > 0 and index not in chosen:
            chosen[0] = index
        documents = [rows.document(person) for person in chosen]
        row = rows.kept[index]  # candidates index the kept people, not the table's rows
        return Question(documents, query, answer, shown, {"attribute": attribute}, shown=shown, row=row)


RECIPE = BiographyRecipe()
