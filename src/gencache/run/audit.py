"""``gencache audit``: regenerate stored answers one prompt at a time and compare them with what the cache holds.

Each key is regenerated alone (batch size one) with the run's recorded settings and seed, and sampled runs with
the same per-sequence seeds, so the audit of a sampled run is as exact as that of a greedy one.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gencache.config.names import ENGINE_STATIC, ENGINE_VLLM
from gencache.core.errors import ConfigError, DatasetError
from gencache.core.progress import ProgressFactory, StagedProgress
from gencache.data.recorded import (
    RecordedRun,
    load_recorded_tokenizer,
    open_recorded_run,
    rebuild_samples,
    recorded_directory,
)
from gencache.generation.effective import resolve_generation
from gencache.generation.engines.vllm import INSTALL_HINT, installed_build
from gencache.run.session import build_engine

#: Keys audited when neither ``all_keys`` nor ``keys`` is given.
DEFAULT_SAMPLES = 32


@dataclass(frozen=True)
class SequenceAudit:
    """One stored sequence against its regeneration: ``first_difference`` is the first answer position whose
    tokens differ (or the shorter length when one is a prefix of the other), None when they are equal."""

    index: int
    first_difference: int | None
    stored_length: int
    regenerated_length: int
    stored_finish: str
    regenerated_finish: str
    equal: bool


@dataclass(frozen=True)
class KeyAudit:
    """One audited key: its sequences' comparisons; ``first_difference`` is the earliest over them."""

    key: str
    sequences: tuple[SequenceAudit, ...]
    equal: bool
    first_difference: int | None


@dataclass(frozen=True)
class AuditReport:
    """What :func:`audit` found: the artifact, how it regenerated, each chosen key's :class:`KeyAudit`, the time."""

    path: Path
    engine: str
    model_path: str
    device: str
    dtype: str
    sampled: bool
    selection: str
    total_keys: int
    keys: tuple[KeyAudit, ...]
    seconds: float
    load_seconds: float

    @property
    def equal(self) -> int:
        return sum(key.equal for key in self.keys)

    @property
    def differing(self) -> int:
        return len(self.keys) - self.equal

    @property
    def exit_code(self) -> int:
        return 0 if self.differing == 0 else 1

    def divergence(self) -> dict[int, int]:
        """How many differing keys first diverge at each answer position (a finish reason alone: its length)."""
        positions = Counter(
            min(s.stored_length for s in key.sequences) if key.first_difference is None else key.first_difference
            for key in self.keys
            if not key.equal
        )
        return dict(sorted(positions.items()))

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {
            "path": str(self.path),
            "audited": len(self.keys),
            "equal": self.equal,
            "differing": self.differing,
            "ok": self.exit_code == 0,
            "first_divergence": {str(position): count for position, count in self.divergence().items()},
            "seconds": round(self.seconds, 3),
            "seconds_per_key": round(self.seconds / len(self.keys) if self.keys else 0.0, 4),
            "load_seconds": round(self.load_seconds, 3),
        }


def select_keys(
    available: Sequence[str],
    *,
    samples: int = DEFAULT_SAMPLES,
    all_keys: bool = False,
    keys: Sequence[str] | None = None,
    seed: int = 0,
) -> tuple[list[str], str]:
    """The keys to audit and how they were chosen: ``keys`` as given, every key, or ``samples`` keys drawn with
    ``random.Random(seed)`` from the sorted keys."""
    if keys is not None:
        wanted = list(dict.fromkeys(keys))
        if all_keys or not wanted:
            raise ConfigError("audit: give either keys or all_keys, not both." if all_keys else "audit: no keys given.")
        if missing := sorted(set(wanted) - set(available), key=wanted.index):
            raise ConfigError(
                f"audit: {len(missing)} of the {len(wanted)} keys given are not in the artifact (first: "
                f"{missing[0]!r}); list its keys with `gencache export --no-prompts`."
            )
        return wanted, f"{len(wanted)} given key(s)"
    if not all_keys and samples < 1:
        raise ConfigError(f"audit: samples must be a positive integer, got {samples}.")
    ordered = sorted(available)
    if all_keys or samples >= len(ordered):
        return ordered, "every key"
    return sorted(random.Random(seed).sample(ordered, samples)), f"{samples} keys drawn with seed {seed}"


def _choose_engine(run: RecordedRun, requested: str | None) -> str:
    """The engine to regenerate with: ``requested``, else ``vllm`` for a run that sampled with vLLM (only vLLM's
    sampler draws its tokens again), ``transformers`` for every other run."""
    recorded = str(run.resolved.get("engine", {}).get("name", ENGINE_STATIC))
    sampled = bool(run.generation.get("do_sample"))
    chosen = requested or (ENGINE_VLLM if sampled and recorded == ENGINE_VLLM else ENGINE_STATIC)
    if sampled and (chosen == ENGINE_VLLM) != (recorded == ENGINE_VLLM):
        family = "vLLM's sampler" if recorded == ENGINE_VLLM else "gencache's per-sequence sampler"
        fit = "--engine vllm" if recorded == ENGINE_VLLM else '--engine "transformers" or "transformers-continuous"'
        raise ConfigError(
            f'audit: the run sampled with engine "{recorded}" ({family}); engine "{chosen}" draws differently, so '
            f"its answers cannot be compared. Audit with {fit}."
        )
    if chosen == ENGINE_VLLM and installed_build() is None:
        why = "" if requested else " (the run sampled with vLLM, whose sampler only vLLM reproduces)"
        raise ConfigError(f'audit: engine "vllm"{why} needs the vllm package, which is not installed: {INSTALL_HINT}.')
    return chosen


def _compare(key: str, stored: Any, regenerated: Any) -> KeyAudit:
    """The sequences of ``key`` as stored and as regenerated (as many: the run's checked settings made both)."""
    sequences = []
    for index, (old, new) in enumerate(zip(stored.sequences, regenerated.sequences, strict=True)):
        a, b = old.tolist(), new.tolist()
        shorter = min(len(a), len(b))
        first = next((i for i in range(shorter) if a[i] != b[i]), None if len(a) == len(b) else shorter)
        finishes = stored.finish_reasons[index], regenerated.finish_reasons[index]
        equal = first is None and finishes[0] == finishes[1]
        sequences.append(SequenceAudit(index, first, len(a), len(b), *finishes, equal))
    found = [s.first_difference for s in sequences if s.first_difference is not None]
    return KeyAudit(key, tuple(sequences), all(s.equal for s in sequences), min(found, default=None))


def audit(
    path: str | os.PathLike[str],
    *,
    samples: int = DEFAULT_SAMPLES,
    all_keys: bool = False,
    keys: Sequence[str] | None = None,
    seed: int = 0,
    engine: str | None = None,
    model_path: str | None = None,
    tokenizer_path: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    progress: ProgressFactory | None = None,
) -> AuditReport:
    """Audit the artifact or shard base at ``path``; nothing is written. ``engine``, ``model_path``,
    ``tokenizer_path``, ``device`` and ``dtype`` override what the run recorded (the teacher's directory after it
    moved, or the original of a cache made by a modified teacher). Bad input raises before any weights load."""
    reader, run = open_recorded_run(path)
    chosen, selection = select_keys(list(reader), samples=samples, all_keys=all_keys, keys=keys, seed=seed)
    name = _choose_engine(run, engine)
    model = run.config.model
    if tokenizer_path is None and model_path is not None and model.effective_tokenizer_path == model.model_path:
        tokenizer_path = model_path  # a tokenizer that came with the recorded teacher comes with a given one
    teacher = model_path or recorded_directory(model.model_path, "teacher", "audit with --model NEWDIR, its new place")
    tokenizer = load_recorded_tokenizer(run, tokenizer_path, moved="audit with --tokenizer NEWDIR, its new place")
    device, dtype = device or model.device, dtype or model.dtype
    fields = ("model_path", "tokenizer_path", "dtype")  # the tokenizer must be in the state the cache was made with
    reader.check_compatible(**{name: reader.provenance[name] for name in fields}, tokenizer=tokenizer)
    prompts = {
        s.key: [int(t) for t in s.input_ids] for s in rebuild_samples(run, tokenizer).unique if s.input_ids is not None
    }
    if unmatched := [key for key in chosen if key not in prompts]:  # the recipes or datasets changed since
        raise DatasetError(f"audit: {len(unmatched)} audited keys match no rebuilt sample (first: {unmatched[0]}).")
    generation = resolve_generation(
        model.generation_kwargs, model_path=teacher, revision=model.revision, tokenizer=tokenizer
    )
    for setting in sorted(set(run.generation) | set(generation.kwargs)):  # the teacher's generation_config.json
        if run.generation.get(setting) != generation.kwargs.get(setting):
            raise ConfigError(
                f"audit: the teacher {teacher!r} now resolves generation setting {setting} to "
                f"{generation.kwargs.get(setting)!r}, but the run used {run.generation.get(setting)!r} (its "
                "generation_config.json changed); audit against the teacher the run used."
            )
    created = build_engine(
        run.config,
        generation=generation,
        tokenizer=tokenizer,
        device=device,
        name=name,
        model_path=teacher,
        dtype=dtype,
        one_prompt=True,
    )
    created.import_libraries()  # load_seconds is the load's own time
    started = time.monotonic()
    created.load_weights()
    loaded = time.monotonic()
    bar = StagedProgress(progress(len(chosen)) if progress is not None else None, len(chosen))
    results: dict[str, KeyAudit] = {}
    try:
        bar.start(len(chosen))
        for key in sorted(chosen, key=lambda k: -len(prompts[k])):  # longest first: one KV sizing serves all
            with contextlib.closing(created.generate([(key, prompts[key])])) as entries:
                regenerated = next(iter(entries))
            results[key] = _compare(key, reader[key], regenerated)
            bar.advance(1, regenerated.num_tokens)
    finally:
        bar.close()
        if callable(close := getattr(created, "close", None)):  # vLLM's engine holds a process
            close()
    return AuditReport(
        path=Path(os.path.abspath(os.path.expanduser(path))),
        engine=name,
        model_path=teacher,
        device=device,
        dtype=dtype,
        sampled=generation.do_sample,
        selection=selection,
        total_keys=len(reader),
        keys=tuple(results[key] for key in chosen),
        seconds=time.monotonic() - loaded,
        load_seconds=loaded - started,
    )
