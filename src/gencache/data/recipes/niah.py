"""RULER needle-in-a-haystack (``simonjegou/ruler``): long contexts with a short answer.

The key holds the raw context as the single document; the prompt shows it split into sentences and packed into
chunks of at most ``chunk_size`` characters, so chunking never changes a key. See docs/datasets.md.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from gencache.config.datasets import NIAHKwargs
from gencache.core.errors import DatasetError
from gencache.data.recipes.base import DataConfigLike, DatasetRecipe, Question, Selection
from gencache.data.recipes.columns import Column, field_of

# -- sentence splitting and chunking (gencache's own, deterministic; documented in docs/datasets.md) -------------

#: The abbreviations (lowercase) whose "." does not end a sentence.
_ABBREVIATION = re.compile(
    r"mr|mrs|ms|dr|prof|sr|jr|st|mt|ft|vs|etc|e\.g|i\.e|cf|al|a\.m|p\.m|u\.s|u\.k|no|nos|vol|fig|figs|inc|ltd|co"
    r"|corp|dept|approx|est|gen|gov|col|lt|sgt|capt|rev|hon|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_CLOSERS = "\"'\u201d\u2019)]\u300d\u300f"
_BOUNDARY = re.compile(
    r"(?P<paragraph>\n[ \t\r\f\v]*\n)"
    r"|(?P<cjk>[\u3002\uff01\uff1f]+[" + re.escape(_CLOSERS) + r"]*)"
    r"|(?P<stop>(?:[.!?]+|\u2026)[" + re.escape(_CLOSERS) + r"]*)(?=\s|$)"
)
#: What ends the word before a "." (a word: letters, digits, "_" and "."), and the character after the spaces
#: that follow a "."; 64 characters before a "." are enough to tell an abbreviation.
_NOT_WORD = re.compile(r"[^\w.]")
_NEXT_CHAR = re.compile(r"\s*(\S)")


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences, deterministically, with no external model (the rules are in
    docs/datasets.md: a change here changes prompts)."""
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        if match.lastgroup == "paragraph":
            sentences.append(text[start : match.start()])
            start = match.end()
            continue
        if match.lastgroup == "stop" and match.group(0).rstrip(_CLOSERS) == ".":
            word = _NOT_WORD.split(text[max(match.start() - 64, 0) : match.start()])[-1].lower()
            after = _NEXT_CHAR.match(text, match.end())
            if _ABBREVIATION.fullmatch(word) or (len(word) == 1 and word.isalpha()) or (after and after[1].islower()):
                continue
        sentences.append(text[start : match.end()])
        start = match.end()
    sentences.append(text[start:])
    return [sentence.strip() for sentence in sentences if sentence.strip()]


def chunk_sentences(sentences: Sequence[str], chunk_size: int) -> list[str]:
    """Pack sentences greedily, joined by single spaces, into chunks of at most ``chunk_size`` characters; a
    longer sentence is a chunk of its own (sentences are never cut)."""
    chunks: list[str] = []
    for sentence in sentences:
        if chunks and len(chunks[-1]) + len(sentence) + 1 <= chunk_size:
            chunks[-1] = chunks[-1] + " " + sentence
        else:
            chunks.append(sentence)
    return chunks


COLUMNS = (
    Column("context", "string", True, "The haystack: the key's single document, chunked for the prompt."),
    Column("question", "string", True, "The question: the key's query."),
    Column("answer", "list of strings (or a string)", True, "The gold answer, joined by spaces."),
    Column("task", "string", False, "The RULER task name; needed by data_kwargs.tasks."),
    Column("answer_prefix", "string", False, "Not used."),
    Column("max_new_tokens", "integer", False, "Not used."),
    Column("length", "integer", False, "Not used."),
)


class NIAHRecipe(DatasetRecipe[NIAHKwargs, tuple[Any, Any]]):
    name = "niah"
    hub_id = "simonjegou/ruler"
    kwargs_model = NIAHKwargs
    columns = COLUMNS

    def needs_tokenizer(self, kwargs: NIAHKwargs) -> bool:
        return kwargs.max_len >= 0

    def select(self, dc: DataConfigLike, kwargs: NIAHKwargs, tokenizer: Any | None) -> Selection[tuple[Any, Any]]:
        if dc.split not in ("train", "test"):
            raise DatasetError(
                f"Unknown split {dc.split!r} for niah; use 'train' or 'test' (halves of the hub test table)."
            )
        if dc.num_data_strs != 0:
            raise DatasetError("NIAH dataset requires num_data_strs to be 0 to use all passages.")
        if kwargs.max_len >= 0 and tokenizer is None:
            raise DatasetError(
                f"niah data_kwargs.max_len={kwargs.max_len} counts teacher tokens and needs a tokenizer; "
                "pass the teacher's tokenizer or set max_len to -1."
            )
        tables, info = self.tables(dc, splits=("test",), hub_config=dc.subset)
        table = tables["test"]
        self.check_columns(table)
        total = len(table)
        order = list(range(total))
        random.Random(42).shuffle(order)  # the partition's fixed seed
        cut = int(total * 0.5)
        part = order[:cut] if dc.split == "train" else order[cut:]
        random.Random(dc.seed).shuffle(part)
        detail = f"{len(part)} rows in this half of {total}"
        if kwargs.tasks is not None:
            if "task" not in table.column_names:
                raise DatasetError(
                    f"niah data_kwargs.tasks needs a 'task' column (columns: {', '.join(table.column_names)}); omit it."
                )
            tasks = list(table["task"])
            part = [i for i in part if tasks[i] in kwargs.tasks]
            detail += f", {len(part)} of tasks {', '.join(kwargs.tasks)}"
        self.require_rows(dc, len(part), detail)  # num_shots is 0 here
        skipped = f"longer than max_len={kwargs.max_len} tokens"
        return Selection(info, (table, tokenizer), (), part, detail, skipped)

    def sample(self, rows: tuple[Any, Any], kwargs: NIAHKwargs, index: int) -> Question | None:
        table, tokenizer = rows  # the tokenizer is None unless max_len counts tokens
        record = table[index]
        context = field_of(table, self.name, index, record, "context", "string")
        if kwargs.max_len >= 0 and len(tokenizer.encode(context, add_special_tokens=False)) > kwargs.max_len:
            return None
        question = field_of(table, self.name, index, record, "question", "string")
        answer = record.get("answer")
        if not isinstance(answer, str):
            answer = " ".join(field_of(table, self.name, index, record, "answer", "list of strings"))
        shown = question + "\nProvide a short answer directly separated by space. Short Answer:"
        chunks = chunk_sentences(split_sentences(context), kwargs.chunk_size)
        return Question([context], question, answer, shown, shown=shown, context=chunks)


RECIPE = NIAHRecipe()
