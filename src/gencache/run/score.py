"""``gencache score`` and ``gencache report``: every stored answer scored against its sample's reference, from the
artifact alone, as a verdict with tables or as one self-contained HTML page.

The references are the samples' gold answers, so the samples are rebuilt from the artifact's checked record: the
recorded sources must be there and unchanged, or pointed at with ``data_root``/``sources`` as for ``export``. The
page aggregates everything and shows a fixed number of examples per data config, so it stays small for any number of
answers; its figures use matplotlib's object-oriented API (no pyplot, no global backend), and without matplotlib
the page is the same without them, and says what they need.
"""

from __future__ import annotations

import html
import importlib.util
import io
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gencache.artifact.store import Location, location
from gencache.core.errors import ConfigError, DatasetError, first_line
from gencache.data.recorded import load_recorded_tokenizer, open_recorded_run, rebuild_samples
from gencache.data.samples import tokenizer_reasons
from gencache.data.scores import METRICS, SCORE_COLUMNS, ScoredAnswer, rules_of, score_cache, score_format
from gencache.run.export import check_out, write_atomic, write_rows

NO_GOLD = "No answer has a gold reference: nothing is scored against the gold."


@dataclass(frozen=True)
class ScoreGroup:
    """Counts and means over some answers (a mean is None when no answer is scored), and the same per finish
    reason."""

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
        data = {"answers": self.answers, "scored": self.scored, "unscored": self.unscored, "means": dict(self.means)}
        if self.data_config_index is not None:
            data |= {"data_config_index": self.data_config_index, "dataset_name": self.dataset_name}
            data |= {"headline": self.headline, "answer_rule": self.rule}
        if self.by_finish_reason:
            data["by_finish_reason"] = {name: group.as_json() for name, group in self.by_finish_reason.items()}
        return data


def _group(label: str, answers: Sequence[ScoredAnswer], *, split: bool = True, **details: Any) -> ScoreGroup:
    scored = [answer.metrics for answer in answers if answer.metrics is not None]
    means = {name: (sum(m[name] for m in scored) / len(scored) if scored else None) for name in METRICS}
    reasons = sorted({answer.finish_reason for answer in answers}) if split else []
    by_reason = {r: _group(r, [a for a in answers if a.finish_reason == r], split=False) for r in reasons}
    return ScoreGroup(label, len(answers), len(scored), means, by_reason, **details)


@dataclass(frozen=True)
class ScoreReport:
    """What :func:`score` found: every answer in run order, the overall group and one per data config; and what
    scoring opened (the reader, the checked record, the rebuilt samples), for ``gencache report``."""

    artifact: Location
    answers: tuple[ScoredAnswer, ...]
    overall: ScoreGroup
    groups: tuple[ScoreGroup, ...]
    max_new_tokens: int
    out: Path | None = None
    reader: Any = field(default=None, repr=False, compare=False)
    resolved: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    samples: Any = field(default=None, repr=False, compare=False)

    @property
    def by_answer(self) -> dict[tuple[str, int], Mapping[str, float] | None]:
        """Each answer's metrics by (key, sequence index): what ``DistillationDataset(..., scores=)`` takes."""
        return {(answer.key, answer.sequence_index): answer.metrics for answer in self.answers}

    @property
    def verdict(self) -> list[tuple[str, str]]:
        """What matters first, as (level, sentence) pairs, the worst first."""
        total = self.overall.answers
        if not total:
            return [("bad", "The artifact holds no answer.")]

        def share(part: int) -> str:
            return f"{part} of {total} answers ({part / total:.0%})"

        cut = sum(answer.finish_reason == "length" for answer in self.answers)
        empty = sum(not answer.answer for answer in self.answers)
        limit = f"max_new_tokens ({self.max_new_tokens})"
        signs = [
            ("bad" if n * 2 >= total else "warn" if n else "good", f"{share(n)} {what}")
            for n, what in ((cut, f"were cut at {limit}."), (empty, "are empty as scored."))
        ]
        means = [(group, group.means[group.headline] or 0.0) for group in self.groups if group.scored]
        if means:
            worst = min(mean for _, mean in means)
            scores = ", ".join(f"{group.headline} {mean:.2f} ({group.dataset_name})" for group, mean in means)
            signs.append(("bad" if worst < 0.2 else "warn" if worst < 0.5 else "good", f"Against the gold: {scores}."))
            unscored = self.overall.unscored
            signs.append(("warn" if unscored * 2 >= total else "good", f"{share(unscored)} have no gold reference."))
        else:
            signs.append(("warn", NO_GOLD))
        return sorted(signs, key=lambda sign: ("bad", "warn", "good").index(sign[0]))  # the worst first

    def as_json(self) -> dict[str, Any]:
        return {
            "artifact": str(self.artifact),
            "metrics": list(METRICS),
            "overall": self.overall.as_json(),
            "data_configs": [group.as_json() for group in self.groups],
            "verdict": [{"level": level, "text": text} for level, text in self.verdict],
            "out": None if self.out is None else str(self.out),
        }


def score(
    artifact: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    answer_patterns: Mapping[int, str] | None = None,
    data_root: str | os.PathLike[str] | None = None,
    sources: Mapping[int, str] | None = None,
) -> ScoreReport:
    """Score every answer of ``artifact`` (an artifact, one shard or a shard base) against its sample's reference.
    ``answer_patterns`` replaces data configs' answer rules by index; ``out`` (``.jsonl`` or ``.parquet``; must not
    exist) receives one row per answer."""
    parquet = out is not None and score_format(out) == "parquet"
    out_path = None if out is None else check_out(out)
    try:
        reader, run = open_recorded_run(artifact)
        tokenizer = load_recorded_tokenizer(run) if tokenizer_reasons(run.config) else None
        samples = rebuild_samples(run, tokenizer, sources=sources, data_root=data_root)
    except (ConfigError, DatasetError) as error:  # no run recorded, sources gone or changed
        raise type(error)(
            f"Cannot score {artifact}: the references come from its samples, rebuilt from the recorded sources, "
            f"and {first_line(error)}"
        ) from None
    rules = rules_of(samples, answer_patterns)
    answers = tuple(score_cache(samples, reader, rules))
    groups = tuple(
        _group(
            f"data_configs[{summary.index}] {summary.dataset_name}",
            [answer for answer in answers if answer.data_config_index == summary.index],
            data_config_index=summary.index,
            dataset_name=summary.dataset_name,
            headline=rules[summary.index].headline,
            rule=rules[summary.index].description,
        )
        for summary in samples.summaries
    )
    absolute = location(artifact)
    if out_path is not None:
        metadata = {"artifact": str(absolute), "run_digest": run.resolved["run_digest"]}
        rows = (answer.row() for answer in answers)
        write_atomic(out_path, lambda handle: write_rows(rows, handle, parquet, metadata, SCORE_COLUMNS))
    overall = _group("overall", answers)
    return ScoreReport(
        absolute, answers, overall, groups, run.generation["max_new_tokens"], out_path, reader, run.resolved, samples
    )


#: Examples shown per data config: the worst scored first, then some without gold.
EXAMPLES = 12
EXCERPT = 280
CHARTS_MISSING = "Charts need matplotlib: pip install 'gencache[report]'."
#: One colour per finish reason, the same in every figure (others take matplotlib's colour cycle).
REASON_COLOURS = {"eos": "#4c72b0", "stop": "#55a868", "length": "#c44e52"}
_SVG_NOISE = re.compile(
    r'<\?xml[^>]*\?>\s*|<!DOCTYPE[^>]*>\s*|\s+xmlns(?::\w+)?="[^"]*"|<metadata>.*?</metadata>\s*', re.DOTALL
)

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1180px;padding:0 16px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
td.num{text-align:right;white-space:nowrap}
table.examples td{max-width:330px;white-space:pre-wrap;word-break:break-word;font-size:12px}
table.examples td.num{white-space:nowrap;word-break:normal}
figure.chart svg{width:100%;height:auto}
.note{color:#6e6e73}.bad{color:#b00020;font-weight:600}.warn{color:#9a6700}.good{color:#1b7f3b}
"""


@dataclass(frozen=True)
class ReportResult:
    out: Path
    size: int
    charts: bool
    data_configs: int
    answers: int


def _e(value: Any) -> str:
    if isinstance(value, (dict, list)):
        value = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return html.escape("" if value is None else str(value))


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _rows(pairs: Iterable[tuple[str, Any]]) -> str:
    cells = "".join(f"<tr><th>{_e(name)}</th><td>{_e(value)}</td></tr>" for name, value in pairs)
    return f"<table>{cells}</table>"


def _provenance(resolved: Mapping[str, Any]) -> str:
    config, recorded = resolved.get("config") or {}, resolved.get("model") or {}
    model = config.get("model") or {}
    runtime = dict(resolved.get("runtime") or {})
    determinism = runtime.pop("determinism", None)
    provenance = [
        ("teacher", model.get("model_path")),
        ("revision", recorded.get("revision")),
        ("commit", recorded.get("commit_hash")),
        ("tokenizer", model.get("tokenizer_path")),
        ("dtype", model.get("dtype")),
        ("engine", config.get("engine")),
        ("seed", config.get("seed")),
        ("gencache", resolved.get("gencache_version")),
        ("format", resolved.get("format_version")),
        ("run digest", resolved.get("run_digest")),
        ("samples", resolved.get("samples")),
        ("sources", [source.get("location") for source in resolved.get("sources") or []]),
    ]
    return (
        f"<h2>Provenance</h2>{_rows(provenance)}"
        f"<h3>Generation settings</h3>{_rows(sorted((resolved.get('generation') or {}).items()))}<h3>Determinism</h3>"
        + (_rows(sorted(determinism.items())) if determinism else '<p class="note">not recorded</p>')
        + (f"<h3>Runtime</h3>{_rows(sorted(runtime.items()))}" if runtime else "")
    )


def _score_table(groups: Sequence[ScoreGroup], metrics: Sequence[str]) -> str:
    head = "".join(f"<th>{_e(name)}</th>" for name in ("", "finish", "answers", "scored", "unscored", *metrics))
    rows = []
    for group in groups:
        for label, part in [("all", group), *group.by_finish_reason.items()]:
            means = "".join(f'<td class="num">{_number(part.means[name])}</td>' for name in metrics)
            rows.append(
                f"<tr><th>{_e(group.label if label == 'all' else '')}</th><td>{_e(label)}</td>"
                f'<td class="num">{part.answers}</td><td class="num">{part.scored}</td>'
                f'<td class="num">{part.unscored}</td>{means}</tr>'
            )
    return f"<table class=scores><tr>{head}</tr>{''.join(rows)}</table>"


def _excerpt(text: str | None, *, tail: bool = False) -> str:
    if text is None or len(text) <= EXCERPT:
        return text or ""
    return "…" + text[-EXCERPT:] if tail else text[:EXCERPT] + "…"


def _examples(answers: Sequence[ScoredAnswer], headline: str, report: ScoreReport) -> str:
    """The examples of a data config: the scored answers with the lowest headline score first (then the longest),
    then, with room kept for them (a quarter of the rows at least), the answers without gold in run order."""
    unscored = [answer for answer in answers if answer.metrics is None]
    scored = sorted(
        (a for a in answers if a.metrics is not None), key=lambda a: ((a.metrics or {})[headline], -a.token_length)
    )
    room = min(len(unscored), max(EXAMPLES // 4, EXAMPLES - len(scored)))
    names = ("key", "finish", "tokens", headline, "prompt (end)", "stored answer", "as scored", "reference")
    rows = []
    for answer in scored[: EXAMPLES - room] + unscored[:room]:
        stored = report.reader.metadata(answer.key)["text"][answer.sequence_index]
        prompt = report.samples.by_key(answer.key).prompt_text  # joined only for the examples shown
        value = "no gold" if answer.metrics is None else _number(answer.metrics[headline])
        rows.append(
            f"<tr><td>{_e(answer.key[:12])}…</td><td>{_e(answer.finish_reason)}</td>"
            f'<td class="num">{answer.token_length}</td><td class="num">{value}</td>'
            f"<td>{_e(_excerpt(prompt, tail=True))}</td><td>{_e(_excerpt(stored))}</td>"
            f"<td>{_e(answer.answer)}</td><td>{_e(answer.reference)}</td></tr>"
        )
    head = "".join(f"<th>{name}</th>" for name in names)
    return f'<table class="examples"><tr>{head}</tr>{"".join(rows)}</table>'


def _integer_edges(top: int, bins: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Bin edges over the whole numbers 0..``top``, each bin as wide as the others (at most ``bins`` bins): edges
    on whole numbers, so no bin holds more values than another."""
    width = -(-(top + 1) // bins)
    return np.arange(0, top + width + 1, width, dtype=np.float64)


def _figure(group: ScoreGroup, answers: Sequence[ScoredAnswer], prompt_chars: Mapping[str, int], max_new: int) -> str:
    """One data config's figure as an inline SVG element: the answer lengths stacked by finish reason, prompt
    length against answer length, and the headline score's histogram when some answer is scored."""
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    lengths = np.array([a.token_length for a in answers], dtype=np.int64)
    top = max(int(lengths.max()), max_new)
    reasons = sorted({a.finish_reason for a in answers})
    with matplotlib.rc_context(
        {"svg.fonttype": "none", "font.size": 8, "xtick.labelsize": 7, "ytick.labelsize": 7, "axes.titlesize": 9}
    ):
        figure = Figure(figsize=(10, 2.9), layout="constrained")
        panels = figure.subplots(1, 3 if group.scored else 2)
        panels[0].hist(
            [lengths[[a.finish_reason == reason for a in answers]] for reason in reasons],
            bins=_integer_edges(top, 40),
            stacked=True,
            histtype="stepfilled",
            color=[REASON_COLOURS.get(r, f"C{i + 4}") for i, r in enumerate(reasons)],
            label=reasons,
        )
        panels[0].axvline(max_new, color="#222222", linestyle="--", linewidth=1, label="max_new_tokens")
        panels[0].set(title="answer length (tokens)", ylabel="answers")
        panels[0].legend(fontsize=7, loc="upper left", framealpha=0.85)
        prompts = np.array([prompt_chars[a.key] for a in answers], dtype=np.float64)
        low, high = float(prompts.min()), float(prompts.max())
        edges = (np.linspace(low, max(high, low + 1.0), 31), _integer_edges(top, 30))
        joint = np.ma.masked_equal(np.histogram2d(prompts, lengths, bins=edges)[0].T, 0)
        extent = (edges[0][0], edges[0][-1], edges[1][0], edges[1][-1])
        panels[1].imshow(joint, origin="lower", extent=extent, aspect="auto", interpolation="nearest", cmap="viridis")
        panels[1].set(title="prompt vs answer length", xlabel="prompt (characters)", ylabel="answer (tokens)")
        if group.scored:
            values = [a.metrics[group.headline] for a in answers if a.metrics is not None]
            panels[2].hist(values, bins=np.linspace(0.0, 1.0, 11), histtype="stepfilled", color="#4c72b0")
            panels[2].set(xlim=(0, 1), title=f"{group.headline} (scored answers)", ylabel="answers")
        for position, axes in enumerate(panels):
            axes.yaxis.set_major_locator(MaxNLocator(integer=True))
            if position < 2:
                axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    return _SVG_NOISE.sub("", buffer.getvalue()).strip()  # an element for an HTML page, which knows SVG's namespace


def _audit_section(audit: Mapping[str, Any]) -> str:
    fields = ("engine", "model_path", "device", "dtype", "sampled", "selection", "total_keys", "seconds_per_key")
    parts = [
        f'<h2>Audit</h2><p class="{"good" if audit.get("differing") == 0 else "bad"}">{_e(audit.get("equal"))} of '
        f"{_e(audit.get('audited'))} audited keys regenerated identically; {_e(audit.get('differing'))} differ.</p>",
        _rows((name, audit.get(name)) for name in fields),
    ]
    if isinstance(divergence := audit.get("first_divergence"), dict) and divergence:
        parts += ["<h3>First divergence (answer position: keys)</h3>", _rows(sorted(divergence.items()))]
    keys = [key for key in audit.get("keys") or [] if isinstance(key, dict) and not key.get("equal")][:EXAMPLES]
    if differing := [(f"{k.get('key', '')[:12]}…", f"first difference at {k.get('first_difference')}") for k in keys]:
        parts += ["<h3>Differing keys</h3>", _rows(differing)]
    return "\n".join(parts)


def _page(report: ScoreReport, audit: Mapping[str, Any] | None, charts: bool) -> str:
    prompt_chars = {sample.key: sample.prompt_chars for sample in report.samples.unique}
    sections = []
    for group in report.groups:
        index = group.data_config_index
        answers = [answer for answer in report.answers if answer.data_config_index == index]
        figure = ""
        if charts and answers:
            svg = _figure(group, answers, prompt_chars, report.max_new_tokens)
            figure = f'<figure class="chart" data-config="{index}">{svg}</figure>'
        gold = "" if group.scored or not answers else f'<p class="warn no-gold">{_e(NO_GOLD)}</p>'
        examples = _examples(answers, group.headline, report) if answers else '<p class="note">no answers</p>'
        sections.append(
            f'<section class="data-config" id="data-config-{index}"><h2>{_e(group.label)}</h2>'
            f'<p class="note">answer rule: {_e(group.rule)}; headline metric: {_e(group.headline)}</p>'
            f"{gold}{figure}<h3>Examples{', the worst first' if group.scored else ''}</h3>{examples}</section>"
        )
    verdict = "".join(f'<li class="{level}">{_e(text)}</li>' for level, text in report.verdict)
    missing = "" if charts else f'<p class="note" id="charts-missing">{_e(CHARTS_MISSING)}</p>'
    metrics = METRICS if report.overall.scored else ()
    title = f"gencache report: {report.artifact.name}"
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_STYLE}</style></head><body>"
        f'<h1>{_e(title)}</h1><ul class="verdict">{verdict}</ul>'
        f"<p class='note'>{_e(report.artifact)}: {report.overall.answers} answers, "
        f"{report.overall.scored} scored against a reference, {report.overall.unscored} without one.</p>"
        f"{missing}<h2>Scores</h2>{_score_table([report.overall, *report.groups], metrics)}"
        f"{''.join(sections)}{'' if audit is None else _audit_section(audit)}{_provenance(report.resolved)}"
        "</body></html>\n"
    )


def write_report(
    artifact: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    audit: str | os.PathLike[str] | None = None,
    answer_patterns: Mapping[int, str] | None = None,
    data_root: str | os.PathLike[str] | None = None,
    sources: Mapping[int, str] | None = None,
) -> ReportResult:
    """Score ``artifact`` and write its page to ``out`` (which must not exist), with the audit report ``audit``."""
    out_path = check_out(out)
    audit_document = None
    if audit is not None:  # the JSON report gencache audit --report wrote
        try:
            audit_document = json.loads(Path(audit).read_text(encoding="utf-8"))
            if not {"audited", "equal", "differing", "engine"} <= audit_document.keys():
                raise ValueError("it lacks audited, equal, differing or engine")
        except (OSError, ValueError, AttributeError) as error:  # unreadable, not JSON, not an object, not the report
            raise ConfigError(
                f"--audit {audit}: not a report of gencache audit --report ({error}); pass the file it wrote."
            ) from None
    report = score(artifact, answer_patterns=answer_patterns, data_root=data_root, sources=sources)
    charts = importlib.util.find_spec("matplotlib") is not None
    page = _page(report, audit_document, charts).encode("utf-8")
    size = write_atomic(out_path, lambda handle: handle.write(page))
    return ReportResult(out_path, size, charts, len(report.groups), report.overall.answers)
