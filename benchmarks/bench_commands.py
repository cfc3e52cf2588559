"""Fast feedback benchmark: the model-free commands' wall time.

``python benchmarks/bench_commands.py [--quick] [--rounds N] [--before SRC]`` prints one markdown section on stdout
(progress on stderr), a ratio against a baseline measured in the same run:

- ``gencache inspect`` / ``verify`` (and their ``--json``) of a small artifact (8 entries), each a fresh process of
  the installed ``gencache`` script, against a bare ``python -c "import safetensors, numpy"``: the commands are
  run in rounds, every command once per round in turn; the ratio is the median over rounds of each round's ratio
  (target <= 3x for ``inspect`` and ``verify``), which a machine whose load drifts during the run affects least.
  With ``--before SRC`` every command is also run from another gencache source tree (``SRC``, the ``src`` directory
  of, say, a ``git worktree`` of an earlier commit) in the same rounds, as its ``before`` row: a before/after
  comparison in one run.
Nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from _common import gencache_script, installed_env, load_average, load_note, log, section_head, wall

TOKENS = 200
PROVENANCE_TOKENIZER = {"padding_side": "left", "pad_token_id": 0, "eos_token_id": 1}
BASELINE = 'python -c "import safetensors, numpy"'


def build(out: Path, count: int, tokens: int) -> Path:
    """One artifact of ``count`` entries of one ``tokens``-token sequence, through the real writer."""
    from gencache.artifact.header import header_capacity
    from gencache.artifact.manifest import make_provenance
    from gencache.artifact.writer import ArtifactBuild

    provenance = make_provenance("bench/teacher", "bench/teacher", "bfloat16", PROVENANCE_TOKENIZER)
    with ArtifactBuild(out, provenance=provenance, header_capacity=header_capacity(count, 1, tokens)) as build:
        for i in range(count):
            key = hashlib.sha256(f"bench-{i}".encode()).hexdigest()
            build.writer.add(key, [(i % 50_000).to_bytes(8, "little") * tokens], [f"answer {i}"], ["eos"])
        build.writer.finalize(resolved_config={"bench": "commands"}, summary={})
        build.publish()
    return out


TARGETED = ("gencache inspect DIR", "gencache verify DIR")
TARGET = 3.0


def before_script(src: Path) -> list[str]:
    """``python -m gencache`` run from the gencache source tree ``src`` instead of the installed one."""
    code = f"import runpy, sys; sys.path.insert(0, {str(src)!r}); runpy.run_module('gencache', run_name='__main__')"
    return [sys.executable, "-c", code]


def commands_section(root: Path, rounds: int, before: Path | None = None) -> list[str]:
    artifact = build(root / "small", 8, 16)
    arguments = {
        "gencache inspect DIR": ["inspect", str(artifact)],
        "gencache inspect --json DIR": ["inspect", "--json", str(artifact)],
        "gencache verify DIR": ["verify", str(artifact)],
        "gencache verify --json DIR": ["verify", "--json", str(artifact)],
        "gencache --help": ["--help"],
    }
    commands = {BASELINE: [sys.executable, "-c", "import safetensors, numpy"]}
    for name, argv in arguments.items():
        commands[name] = [*gencache_script(), *argv]
        if before is not None:
            commands[f"{name}, before"] = [*before_script(before), *argv]
    env = installed_env(root)
    for command in commands.values():  # warm the page cache and the bytecode caches
        wall(command, env)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for index in range(rounds):
        log(f"commands: round {index + 1}/{rounds}")
        for name, command in commands.items():
            times[name].append(wall(command, env))
    lines = [
        "| command | median | fastest | ratio to the baseline (median of rounds) | target | |",
        "|---|---|---|---|---|---|",
    ]
    for name, measured in times.items():
        median = statistics.median(measured)
        ratio = statistics.median(m / b for m, b in zip(measured, times[BASELINE], strict=True))
        targeted = name in TARGETED
        verdict = ("meets" if ratio <= TARGET else "**falls short**") if targeted else ""
        lines.append(
            f"| `{name}` | {median * 1000:.0f} ms | {min(measured) * 1000:.0f} ms | {ratio:.2f}x | "
            f"{f'<= {TARGET}x' if targeted else '-'} | {verdict} |"
        )
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and entries (a smoke run)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of the command timings (default 21)")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="SRC",
        help="also time every gencache command from this gencache source tree (the src directory of an earlier "
        "checkout), in the same rounds, as its 'before' row",
    )
    args = parser.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 21)
    before = args.before.expanduser().absolute() if args.before else None
    if before is not None and not (before / "gencache" / "__main__.py").is_file():
        parser.error(f"--before {before}: not a gencache source tree (no gencache/__main__.py)")
    root = Path(tempfile.mkdtemp(prefix="gencache-bench-commands-"))
    load_before = load_average()
    try:
        command_lines = commands_section(root, rounds, before)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_after = load_average()

    options = (" --quick" if args.quick else "") + (f" --before {args.before}" if before else "")
    section = [
        *section_head("Fast feedback: model-free commands", "bench_commands.py", options),
        f"Wall time of fresh processes on an artifact of 8 entries, {rounds} rounds (each command once per round, in "
        "turn, after one warm-up run each that writes the byte code the timed runs import, as an installed package "
        f"has it), against `{BASELINE}` measured in the same rounds:",
        "",
        *command_lines,
        "",
        f"Notes: {load_note(load_before, load_after)}, so single times vary; each ratio is the median over rounds "
        "(passes) of that round's time divided by the baseline's in the same round. `inspect`, `verify`, `clean`, "
        "`export` without prompts and `--help` import neither torch, transformers nor datasets (pinned by "
        "`tests/test_command_imports.py`). Every command goes through the typer app (typer below 0.29, whose parameter "
        "checks would import pydantic first) and prints through rich, to a pipe as plain text (pinned by "
        "`tests/test_inspect_plain.py`); what they add to the baseline is mostly those imports. `--help` is "
        "not a target."
        + (
            f" The `before` rows run the same commands from `{before}` (`python -m gencache` through `python -c`), "
            "in the same rounds."
            if before
            else ""
        ),
    ]
    print("\n".join(section))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
