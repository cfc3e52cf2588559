"""``gencache init``: a starting point to edit rather than a page to read.

Writes, into one directory, two small data files in the formats gencache reads (a question-answering table and a
chat dataset, JSON Lines) and a config over them that runs as is (``gencache generate DIR/config.json``) with the
demo's tiny teacher, built there unless another teacher is named. Paths in the config are absolute, so it runs
from any working directory; replace the teacher, the sources and the columns with your own.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gencache.core.errors import InputPathError, OutputExistsError, WriteError

QA_ROWS: list[dict[str, Any]] = [
    {
        "id": "q1",
        "question": "Which river flows through Oslo?",
        "answer": "Akerselva",
        "passages": ["Oslo is the capital of Norway.", "The Akerselva river runs through the city centre."],
        "topic": "geography",
    },
    {
        "id": "q2",
        "question": "What do glaciers carve?",
        "answer": "Fjords",
        "passages": ["Glaciers carved deep fjords along the coast during the last ice age."],
        "topic": "geography",
    },
    {
        "id": "q3",
        "question": "What does distillation train?",
        "answer": "A small student model",
        "passages": ["Distillation trains a small student model on a large teacher's outputs."],
        "topic": "ml",
    },
    {
        "id": "q4",
        "question": "What is 12 + 13?",
        "answer": "25",
        "passages": ["Addition combines two numbers."],
        "topic": "math",
    },
    {
        "id": "q5",
        "question": "Where was Alice Hartley born?",
        "answer": "Bergen",
        "passages": ["Alice Hartley was born in Bergen.", "She studied physics in Oslo."],
        "topic": "people",
    },
    {
        "id": "q6",
        "question": "What erupted?",
        "answer": "The volcano",
        "passages": ["The volcano erupted at dawn.", "Ash fell on the nearby villages."],
        "topic": "geography",
    },
]
CHAT_ROWS: list[dict[str, Any]] = [
    {
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "What is the capital of Norway?"},
            {"role": "assistant", "content": "Oslo."},
        ]
    },
    {
        "messages": [
            {"role": "user", "content": "Name a fjord."},
            {"role": "assistant", "content": "Geirangerfjord."},
            {"role": "user", "content": "Where is it?"},
        ]
    },
    {"messages": [{"role": "user", "content": "Say hello."}]},
]


@dataclass(frozen=True)
class Starter:
    """What ``gencache init`` wrote: the config, the data files, and the teacher it points at (built or not)."""

    config: Path
    data: tuple[Path, ...]
    teacher: str
    built_teacher: bool


def starter_config(teacher: str, qa: Path, chat: Path, output_dir: Path) -> dict[str, Any]:
    """The starter config: the tiny teacher on CPU in float32, one ``table`` and one ``chat`` data config."""
    return {
        "model": {
            "model_path": teacher,
            "dtype": "float32",
            "device": "cpu",
            "generation_kwargs": {"max_new_tokens": 32, "do_sample": False},
        },
        "data_configs": [
            {
                "dataset_name": "table",
                "num_samples": 4,
                "num_data_strs": 0,
                "num_shots": 1,
                "subset": "default",
                "split": "train",
                "seed": 0,
                "source": str(qa),
                "data_kwargs": {
                    "query": "question",
                    "documents": "passages",
                    "answer": "answer",
                    "task": ["topic"],
                    "instruction": "Answer from the passages in a few words.",
                    "id": "id",
                },
                "template": "tokenizer_chat",
            },
            {
                "dataset_name": "chat",
                "num_samples": 3,
                "num_data_strs": 0,
                "num_shots": 0,
                "subset": "default",
                "split": "train",
                "seed": 0,
                "source": str(chat),
                "template": "tokenizer_chat",
            },
        ],
        "gen_batch_size": 4,
        "seed": 0,
        "output_dir": str(output_dir),
    }


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_starter(directory: str | os.PathLike[str], *, teacher: str | None = None) -> Starter:
    """Write the starter files into ``directory`` (created if needed) and return what was written.

    ``teacher`` (a local directory or a hub id) goes into ``model.model_path``; without it the demo's tiny
    teacher is built in ``directory/tiny-teacher`` (or reused when one is there). Existing starter files are never
    overwritten: an :class:`OutputExistsError` names them.
    """
    root = Path(directory).absolute()
    if os.path.lexists(root) and not root.is_dir():
        raise InputPathError(f"{root} exists and is not a directory; choose a directory for gencache init.")
    config = root / "config.json"
    qa, chat = root / "data" / "qa.jsonl", root / "data" / "chat.jsonl"
    existing = [str(p) for p in (config, qa, chat) if os.path.lexists(p)]
    if existing:
        raise OutputExistsError(
            f"gencache init never overwrites: {', '.join(existing)} already exist; choose another directory."
        )
    built = False
    if teacher is None:
        location = root / "tiny-teacher"
        if not (location / "config.json").is_file():
            from gencache.generation.tiny import TINY_CPU_ATTENTION_HEAD_DIM, build_tiny_teacher

            build_tiny_teacher(location, head_dim=TINY_CPU_ATTENTION_HEAD_DIM)  # vLLM's CPU build takes it too
            built = True
        teacher = str(location)
    try:
        qa.parent.mkdir(parents=True, exist_ok=True)
        qa.write_text(_jsonl(QA_ROWS), encoding="utf-8")
        chat.write_text(_jsonl(CHAT_ROWS), encoding="utf-8")
        body = starter_config(teacher, qa, chat, root / "artifacts" / "first-cache")
        config.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise WriteError(f"gencache init could not write into {root}: {exc.strerror or exc}.") from exc
    return Starter(config=config, data=(qa, chat), teacher=teacher, built_teacher=built)
