"""``gencache score``: every stored answer scored against its sample's reference, from the artifact alone.

::

    report = gencache.score("generation_cache/artifacts/run")      # an artifact, one shard or a shard base
    report.overall.means["f1"], report.groups[0].by_finish_reason   # means and counts, per data config too
    gencache.score("run", out="scores.parquet")                     # and one row per answer, to keep

The references are the samples' gold answers, so the samples are rebuilt from the artifact's checked
``resolved_config.json`` (:mod:`gencache.data.recorded`; the recorded tokenizer is loaded only for a template or
recipe that renders or counts with it, such as ``tokenizer_chat``): the recorded source files must be
there and unchanged, or pointed at with ``data_root``/``sources`` as for ``export``; when they cannot be read
nothing is scored (a :class:`~gencache.core.errors.DatasetError`, exit 2, naming the file and the ways forward).
The answers are read from the manifest (texts, finish reasons, token lengths), cut and scored by
:mod:`gencache.data.scores`; a sample without a reference is counted (``unscored``) and has no metrics. Nothing is
written into the artifact; ``out`` (``.jsonl`` or ``.parquet``, which must not exist) receives one row per answer
(:data:`gencache.data.scores.SCORE_COLUMNS`), written to a temporary sibling and linked into place.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gencache.core.errors import ConfigError, DatasetError, OutputExistsError, first_line
from gencache.data.answers import METRICS, AnswerRule
from gencache.data.scores import SCORE_COLUMNS, ScoredAnswer, rules_of, score_cache, score_format


@dataclass(frozen=True)
class ScoreGroup:
    """Counts and means over some answers: ``answers`` in all, ``scored`` (with a reference) and ``unscored``,
    each metric's mean over the scored ones (None when none is), and the same per finish reason."""

    label: str
    answers: int
    scored: int
    means: Mapping[str, float | None]
    by_finish_reason: Mapping[str, ScoreGroup] = field(default_factory=dict)
    data_config_index: int | None = None
    dataset_name: str | None = None
    headline: str = "f1"
    rule: str = ""

    @property
    def unscored(self) -> int:
        return self.answers - self.scored

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "answers": self.answers,
            "scored": self.scored,
            "unscored": self.unscored,
            "means": dict(self.means),
        }
        if self.data_config_index is not None:
            data = {
                "data_config_index": self.data_config_index,
                "dataset_name": self.dataset_name,
                "headline": self.headline,
                "answer_rule": self.rule,
                **data,
            }
        if self.by_finish_reason:
            data["by_finish_reason"] = {name: group.as_json() for name, group in self.by_finish_reason.items()}
        return data


def _group(label: str, answers: Sequence[ScoredAnswer], *, split: bool = True, **details: Any) -> ScoreGroup:
    scored = [answer.metrics for answer in answers if answer.metrics is not None]
    means = {name: (sum(m[name] for m in scored) / len(scored) if scored else None) for name in METRICS}
    by_reason: dict[str, ScoreGroup] = {}
    if split:
        reasons: dict[str, list[ScoredAnswer]] = {}
        for answer in answers:
            reasons.setdefault(answer.finish_reason, []).append(answer)
        by_reason = {name: _group(name, reasons[name], split=False) for name in sorted(reasons)}
    return ScoreGroup(label, len(answers), len(scored), means, by_reason, **details)


def summarize(
    answers: Sequence[ScoredAnswer], names: Mapping[int, str], rules: Mapping[int, AnswerRule]
) -> tuple[ScoreGroup, tuple[ScoreGroup, ...]]:
    """The overall group and one group per data config (of ``names``, by index, each with its ``rules``)."""
    per_config: dict[int, list[ScoredAnswer]] = {index: [] for index in names}
    for answer in answers:
        per_config[answer.data_config_index].append(answer)
    groups = tuple(
        _group(
            f"data_configs[{index}] {names[index]}",
            per_config[index],
            data_config_index=index,
            dataset_name=names[index],
            headline=rules[index].headline,
            rule=rules[index].description,
        )
        for index in sorted(names)
    )
    return _group("overall", answers), groups


@dataclass(frozen=True)
class ScoreReport:
    """What :func:`score` found: the ``artifact`` scored, every answer (``answers``, run order), the ``overall``
    group and one group per data config (``groups``), and the score file written (``out``)."""

    artifact: Path
    answers: tuple[ScoredAnswer, ...]
    overall: ScoreGroup
    groups: tuple[ScoreGroup, ...]
    out: Path | None = None

    @property
    def by_answer(self) -> dict[tuple[str, int], Mapping[str, float] | None]:
        """Each answer's metrics by (key, sequence index): what ``DistillationDataset(..., scores=)`` takes."""
        return {(answer.key, answer.sequence_index): answer.metrics for answer in self.answers}

    def as_json(self) -> dict[str, Any]:
        return {
            "artifact": str(self.artifact),
            "metrics": list(METRICS),
            "overall": self.overall.as_json(),
            "data_configs": [group.as_json() for group in self.groups],
            "out": None if self.out is None else str(self.out),
        }


@dataclass(frozen=True)
class ScoredRun:
    """A scored artifact with what scoring it opened: its reader, its checked record, the rebuilt samples and each
    data config's rule (what ``gencache report`` draws from)."""

    report: ScoreReport
    reader: Any
    resolved: Mapping[str, Any]
    samples: Any
    rules: Mapping[int, AnswerRule]


def _check_out(out: str | os.PathLike[str]) -> Path:
    path = Path(out)
    score_format(path)
    if os.path.lexists(path):
        raise OutputExistsError(f"{os.path.abspath(path)} already exists; choose another --out path.")
    from gencache.run.export import check_out_parent

    check_out_parent(path)
    return Path(os.path.abspath(path))


def _write_scores(out: Path, answers: Sequence[ScoredAnswer], metadata: Mapping[str, Any]) -> None:
    from gencache.run.export import parquet_schema, write_atomic, write_jsonl, write_parquet

    def write(handle: IO[bytes]) -> int:
        rows = (answer.row() for answer in answers)
        if score_format(out) == "parquet":
            return write_parquet(rows, handle, parquet_schema(metadata=metadata, columns=SCORE_COLUMNS))
        return write_jsonl(rows, handle)

    write_atomic(out, write)


def _tokenizer_if_needed(run: Any) -> Any:
    """The recorded tokenizer when a data config's template or recipe needs one to build its samples, else None."""
    from gencache.data.samples import needs_tokenizer

    if not needs_tokenizer(run.config):
        return None
    from gencache.data.recorded import load_recorded_tokenizer

    return load_recorded_tokenizer(run)


def score_run(
    artifact: str | os.PathLike[str],
    *,
    answer_patterns: Mapping[int, str] | None = None,
    data_root: str | os.PathLike[str] | None = None,
    sources: Mapping[int, str] | None = None,
    out: str | os.PathLike[str] | None = None,
) -> ScoredRun:
    """:func:`score`, with the reader, record and samples it opened."""
    from gencache.artifact.mixture import MultiCacheReader, open_caches
    from gencache.data.recorded import checked_resolved_config, rebuild_samples, run_of_readers

    out_path = None if out is None else _check_out(out)
    reader = open_caches(artifact)
    readers = list(reader.readers) if isinstance(reader, MultiCacheReader) else [reader]
    resolved = checked_resolved_config(readers[0])
    try:
        run = run_of_readers(artifact, readers, resolved=resolved)
        samples = rebuild_samples(run, _tokenizer_if_needed(run), sources=sources, data_root=data_root)
    except (
        ConfigError,
        DatasetError,
    ) as error:  # no run recorded, sources gone or changed (a damaged record: its own line)
        raise type(error)(
            f"Cannot score {artifact}: the references come from its samples, rebuilt from the recorded sources, "
            f"and {first_line(error)}"
        ) from None
    rules = rules_of(samples, answer_patterns)
    answers = tuple(score_cache(samples, reader, rules))
    names = {summary.index: summary.dataset_name for summary in samples.summaries}
    overall, groups = summarize(answers, names, rules)
    if out_path is not None:
        metadata = {"artifact": str(Path(os.path.abspath(artifact))), "run_digest": resolved.get("run_digest")}
        _write_scores(out_path, answers, metadata)
    report = ScoreReport(Path(os.path.abspath(artifact)), answers, overall, groups, out_path)
    return ScoredRun(report, reader, resolved, samples, rules)


def score(
    artifact: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    answer_patterns: Mapping[int, str] | None = None,
    data_root: str | os.PathLike[str] | None = None,
    sources: Mapping[int, str] | None = None,
) -> ScoreReport:
    """Score every answer of ``artifact`` (an artifact, one shard or a shard base) against its sample's reference
    (see the module docstring). ``answer_patterns`` replaces data configs' answer rules by index (a regular
    expression each, as ``answer_pattern``); ``data_root`` and ``sources`` find moved datasets as for
    ``export``; ``out`` (``.jsonl`` or ``.parquet``; must not exist) receives one row per answer."""
    return score_run(artifact, answer_patterns=answer_patterns, data_root=data_root, sources=sources, out=out).report
