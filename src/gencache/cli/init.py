"""``gencache init``: a starting point to edit rather than a page to read.

Copies the starter (``starter/``: a question-answering table and a chat dataset, JSON Lines, and a config over them)
into one directory, with the config's paths made absolute so it runs from any working directory, and the demo's
tiny teacher built there unless another teacher is named.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from gencache.core.errors import InputPathError, OutputExistsError, WriteError

STARTER = Path(__file__).parent / "starter"


@dataclass(frozen=True)
class Starter:
    """What ``gencache init`` wrote: the config, the data files, and the teacher it points at (built or not)."""

    config: Path
    data: tuple[Path, ...]
    teacher: str
    built_teacher: bool


def write_starter(directory: str | os.PathLike[str], *, teacher: str | None = None) -> Starter:
    """Write the starter files into ``directory`` (created if needed), never over existing ones.

    ``teacher`` (a local directory or a hub id) goes into ``model.model_path``; without it the demo's tiny
    teacher is built in ``directory/tiny-teacher`` (or reused when one is there).
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
    body = json.loads((STARTER / "config.json").read_text(encoding="utf-8"))
    body["model"]["model_path"] = teacher
    body["output_dir"] = str(root / body["output_dir"])
    for data_config in body["data_configs"]:
        data_config["source"] = str(root / data_config["source"])
    try:
        qa.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(STARTER / "data" / "qa.jsonl", qa)
        shutil.copyfile(STARTER / "data" / "chat.jsonl", chat)
        config.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise WriteError(f"gencache init could not write into {root}: {exc.strerror or exc}.") from exc
    return Starter(config=config, data=(qa, chat), teacher=teacher, built_teacher=built)
