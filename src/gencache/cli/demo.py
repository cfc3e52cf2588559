"""``gencache demo`` (the whole path on a tiny generated teacher, offline, on CPU, in seconds: generate over the
bundled sample data, inspect the artifact, read one entry back as training does) and ``gencache init`` (the
``starter/`` files copied into one directory with the config's paths made absolute, to run from anywhere)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, cast

import typer
from rich.console import Console

from gencache.core.errors import InputPathError, OutputExistsError
from gencache.data.recipes import sample_source

#: The bundled sample sets the demo generates from, each over ``_DEFAULTS`` unless it says otherwise.
DEMO_DATASETS: list[dict[str, Any]] = [
    {
        "dataset_name": "biography",
        "num_samples": 4,
        "num_data_strs": 2,
        "subset": "1k",
        "data_kwargs": {"question_type": "QA"},
    },
    {
        "dataset_name": "hotpot_qa",
        "num_samples": 3,
        "subset": "fullwiki",
        "data_kwargs": {"difficulty": ["easy", "medium", "hard"]},
    },
    {"dataset_name": "musique", "num_samples": 3, "subset": "default", "template": "default"},
    {"dataset_name": "niah", "num_samples": 2, "subset": "4096", "data_kwargs": {"chunk_size": 256}},
]
_DEFAULTS = {"num_data_strs": 0, "num_shots": 0, "split": "train", "seed": 0, "template": "tokenizer_chat"}


def demo_config(teacher: Path, output_dir: Path) -> dict[str, Any]:
    """A config over the bundled sample data for the tiny teacher, on CPU in float32."""
    data_configs = [
        {**_DEFAULTS, **entry, "source": str(sample_source(entry["dataset_name"]))} for entry in DEMO_DATASETS
    ]
    return {
        "model": {
            "model_path": str(teacher),
            "dtype": "float32",
            "device": "cpu",
            "generation_kwargs": {"max_new_tokens": 24},
        },
        "data_configs": data_configs,
        "gen_batch_size": 4,
        "seed": 0,
        "output_dir": str(output_dir),
    }


def _directory(path: str | os.PathLike[str], option: str, purpose: str) -> Path:
    root = Path(path).absolute()
    if os.path.lexists(root) and not root.is_dir():
        raise InputPathError(f"{option}{root} exists and is not a directory; choose a directory for {purpose}.")
    return root


def _tiny_teacher(root: Path) -> tuple[Path, bool]:
    """``root/tiny-teacher``, built unless there, with a head size every engine takes (vLLM's CPU build too); and
    whether it was built."""
    from gencache.generation.tiny import TINY_CPU_ATTENTION_HEAD_DIM, build_tiny_teacher

    teacher = root / "tiny-teacher"
    if (teacher / "config.json").is_file():
        return teacher, False
    build_tiny_teacher(teacher, head_dim=TINY_CPU_ATTENTION_HEAD_DIM)
    return teacher, True


def run_demo(workdir: str | os.PathLike[str], *, console: Console | None = None) -> Path:
    from gencache.artifact.reader import CacheReader
    from gencache.artifact.report import inspect_report
    from gencache.cli.render import make_console, render_inspect, render_notice
    from gencache.run.api import generate

    console = console or make_console()
    workdir = _directory(workdir, "--workdir ", "the demo")
    workdir.mkdir(parents=True, exist_ok=True)  # an OSError is one error line, exit 1
    teacher, built = _tiny_teacher(workdir)
    console.print(f"[bold]1.[/bold] {'built' if built else 'reusing'} a tiny random Qwen3-style teacher in {teacher}")
    n = 1
    while os.path.lexists(workdir / "artifacts" / f"demo-{n}"):
        n += 1
    output_dir = workdir / "artifacts" / f"demo-{n}"
    config_path = workdir / "demo-config.json"
    config_path.write_text(json.dumps(demo_config(teacher, output_dir), indent=2) + "\n", encoding="utf-8")
    console.print(f"[bold]2.[/bold] generating from {config_path}")
    published = cast(Path, generate(config_path, notify=lambda level, text: render_notice(console, level, text)))
    console.print(f"[bold]3.[/bold] gencache inspect {published}")
    render_inspect(inspect_report([published]), console)
    reader = CacheReader(published)
    key = next(iter(reader.keys()))
    generation = reader[key]
    console.print("[bold]4.[/bold] reading one entry, as a training loop does:")
    snippet = (
        "    from gencache import CacheReader\n"
        f"    reader = CacheReader({str(published)!r})\n"
        f"    generation = reader[{key!r}]\n"
        f"    tokens: {generation.sequences[0].tolist()}\n"
        f"    text: {generation.texts[0]!r}\n"
        f"    finish reason: {generation.finish_reasons[0]}"
    )
    console.print(snippet, markup=False, soft_wrap=True)  # pasted as is: no markup, unwrapped
    console.print(f"done: {published}")
    return published


STARTER = Path(__file__).parent / "starter"


def write_starter(directory: str | os.PathLike[str], *, teacher: str | None = None) -> Path:
    """Write the starter files into ``directory`` (created if needed), never over existing ones, with ``teacher``
    (a local directory or a hub id; default: the demo's tiny teacher in ``directory``) as ``model.model_path``;
    say what was written and return the config's path."""
    root = _directory(directory, "", "gencache init")
    config = root / "config.json"
    qa, chat = root / "data" / "qa.jsonl", root / "data" / "chat.jsonl"
    if existing := [str(p) for p in (config, qa, chat) if os.path.lexists(p)]:
        raise OutputExistsError(
            f"gencache init never overwrites: {', '.join(existing)} already exist; choose another directory."
        )
    if teacher is None:
        location, built = _tiny_teacher(root)
        teacher = str(location)
        if built:
            typer.echo(f"built the demo's tiny teacher in {teacher}")
    body = json.loads((STARTER / "config.json").read_text(encoding="utf-8"))
    body["model"]["model_path"] = teacher
    body["output_dir"] = str(root / body["output_dir"])
    for data_config in body["data_configs"]:
        data_config["source"] = str(root / data_config["source"])
    qa.parent.mkdir(parents=True, exist_ok=True)  # an OSError is one error line naming the path, exit 1
    for target in (qa, chat):  # only these two: the check above covers nothing else
        shutil.copyfile(STARTER / "data" / target.name, target)
        typer.echo(f"wrote {target}")
    config.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    typer.echo(f"wrote {config}")
    typer.echo(f"next: gencache generate {config} --dry-run   (then without --dry-run)")
    return config
