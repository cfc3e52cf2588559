"""``gencache report``: one self-contained HTML page that shows a run as a whole, from the artifact alone.

The page holds, with inline CSS and inline SVG and nothing fetched when it is viewed (no URL at all): the run's
provenance and its determinism settings (from ``resolved_config.json``); the scores of :func:`gencache.score`
per data config and overall, split by finish reason; per data config one figure (:mod:`.quality_charts`: the
answer-length distribution by finish reason with ``max_new_tokens`` marked, prompt length against answer length,
the headline score's distribution) and a table of examples, the worst first (prompt excerpt, the stored answer,
the answer as scored, the reference, the score); and an audit's result when given (the JSON file ``gencache audit
--report`` writes). Everything is aggregated and the examples are a fixed number per data config, so the page
stays small for any number of answers. Without matplotlib the page is the same without the figures, and says that
they need ``gencache[report]``.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from gencache.core.errors import ConfigError, OutputExistsError
from gencache.data.answers import METRICS
from gencache.data.scores import ScoredAnswer
from gencache.run.quality_charts import ConfigCharts, charts_available, config_figure
from gencache.run.score import ScoredRun, ScoreGroup, score_run

#: Examples shown per data config (the worst first).
EXAMPLES = 12
EXCERPT = 280
LENGTH_BINS = 40
JOINT_BINS = 30
SCORE_BINS = 10
CHARTS_MISSING = "Charts need matplotlib: pip install 'gencache[report]'."

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1180px;color:#1d1d1f;
padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
table.examples td{max-width:330px;white-space:pre-wrap;word-break:break-word;font-size:12px}
.note{color:#6e6e73}.bad{color:#b00020}.good{color:#1b7f3b}figure{margin:8px 0}
"""


@dataclass(frozen=True)
class ReportResult:
    """What :func:`write_report` wrote: the page, its size in bytes, whether it has figures, how many data
    configs it shows and how many answers."""

    out: Path
    size: int
    charts: bool
    data_configs: int
    answers: int


def read_audit(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON report ``gencache audit --report`` wrote (a :class:`ConfigError` naming the file when it is not
    one)."""
    file = Path(path)
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"--audit {file}: cannot read it ({error.strerror or error}).") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"--audit {file}: not JSON ({error}); pass the file gencache audit --report wrote.") from None
    needed = ("audited", "equal", "differing", "engine")
    if not isinstance(document, dict) or not all(name in document for name in needed):
        raise ConfigError(f"--audit {file}: not a report of gencache audit --report (it lacks {', '.join(needed)}).")
    return document


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _rows(pairs: Iterable[tuple[str, Any]]) -> str:
    cells = "".join(f"<tr><th>{_e(name)}</th><td>{_e(_plain(value))}</td></tr>" for name, value in pairs)
    return f"<table>{cells}</table>"


def _plain(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return "" if value is None else str(value)


def _provenance(resolved: Mapping[str, Any]) -> str:
    config = resolved.get("config") or {}
    model = config.get("model") or {}
    recorded = resolved.get("model") or {}
    runtime = resolved.get("runtime") or {}
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
        ("sources", [source.get("location") for source in resolved.get("sources") or [] if isinstance(source, dict)]),
    ]
    determinism = runtime.get("determinism") if isinstance(runtime, dict) else None
    other = {k: v for k, v in runtime.items() if k != "determinism"} if isinstance(runtime, dict) else {}
    parts = [
        "<h2>Provenance</h2>",
        _rows(provenance),
        "<h3>Generation settings</h3>",
        _rows(sorted((resolved.get("generation") or {}).items())),
        "<h3>Determinism</h3>",
        _rows(sorted((determinism or {}).items())) if determinism else '<p class="note">not recorded</p>',
    ]
    if other:
        parts += ["<h3>Runtime</h3>", _rows(sorted(other.items()))]
    return "\n".join(parts)


def _score_table(groups: Sequence[ScoreGroup]) -> str:
    head = "".join(f"<th>{_e(name)}</th>" for name in ("", "finish", "answers", "scored", "unscored", *METRICS))
    rows = []
    for group in groups:
        for label, part in [("all", group), *group.by_finish_reason.items()]:
            means = "".join(f'<td class="num">{_number(part.means[name])}</td>' for name in METRICS)
            rows.append(
                f"<tr><th>{_e(group.label if label == 'all' else '')}</th><td>{_e(label)}</td>"
                f'<td class="num">{part.answers}</td><td class="num">{part.scored}</td>'
                f'<td class="num">{part.unscored}</td>{means}</tr>'
            )
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _excerpt(text: str | None, *, tail: bool = False) -> str:
    if text is None:
        return ""
    if len(text) <= EXCERPT:
        return text
    return "…" + text[-EXCERPT:] if tail else text[:EXCERPT] + "…"


def _worst(answers: Sequence[ScoredAnswer], headline: str) -> list[ScoredAnswer]:
    """The examples of a data config: the scored answers with the lowest headline score first (then the longest),
    else the unscored ones in run order."""
    scored = [answer for answer in answers if answer.metrics is not None]
    if not scored:
        return list(answers[:EXAMPLES])
    ranked = sorted(scored, key=lambda a: (a.metrics[headline] if a.metrics else 0.0, -a.token_length))
    return ranked[:EXAMPLES]


def _examples(answers: Sequence[ScoredAnswer], headline: str, prompt: Callable[[str], str], texts: Any) -> str:
    head = "".join(
        f"<th>{name}</th>"
        for name in ("key", "finish", "tokens", headline, "prompt (end)", "stored answer", "as scored", "reference")
    )
    rows = []
    for answer in _worst(answers, headline):
        stored = texts(answer.key)[answer.sequence_index]
        score = None if answer.metrics is None else answer.metrics[headline]
        rows.append(
            f"<tr><td>{_e(answer.key[:12])}…</td><td>{_e(answer.finish_reason)}</td>"
            f'<td class="num">{answer.token_length}</td><td class="num">{_number(score)}</td>'
            f"<td>{_e(_excerpt(prompt(answer.key), tail=True))}</td><td>{_e(_excerpt(stored))}</td>"
            f"<td>{_e(answer.answer)}</td><td>{_e(answer.reference)}</td></tr>"
        )
    return f'<table class="examples"><tr>{head}</tr>{"".join(rows)}</table>'


def _integer_edges(top: int, bins: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Bin edges over the whole token counts 0..``top``, each bin as wide as the others (at most ``bins`` bins):
    edges on whole numbers, so no bin holds more lengths than another."""
    width = -(-(top + 1) // bins)
    return np.arange(0, top + width + 1, width, dtype=np.float64)


def _charts_of(
    group: ScoreGroup, answers: Sequence[ScoredAnswer], prompt_chars: Mapping[str, int], max_new: int | None
) -> ConfigCharts:
    lengths = np.fromiter((a.token_length for a in answers), dtype=np.int64, count=len(answers))
    top = max(int(lengths.max()) if len(lengths) else 1, max_new or 1)
    length_edges = _integer_edges(top, LENGTH_BINS)
    reasons: dict[str, list[int]] = {}
    for answer in answers:
        reasons.setdefault(answer.finish_reason, []).append(answer.token_length)
    length_counts = {
        reason: np.histogram(np.asarray(values), bins=length_edges)[0].astype(np.int64)
        for reason, values in reasons.items()
    }
    prompts = np.fromiter((prompt_chars[a.key] for a in answers), dtype=np.float64, count=len(answers))
    low, high = float(prompts.min()), float(prompts.max())
    prompt_edges = np.linspace(low, max(high, low + 1.0), JOINT_BINS + 1)
    joint_edges = _integer_edges(top, JOINT_BINS)
    joint = np.histogram2d(prompts, lengths, bins=(prompt_edges, joint_edges))[0].astype(np.int64)
    headline = group.headline
    values = [a.metrics[headline] for a in answers if a.metrics is not None]
    score_edges = np.linspace(0.0, 1.0, SCORE_BINS + 1)
    score_counts = np.histogram(np.asarray(values, dtype=np.float64), bins=score_edges)[0].astype(np.int64)
    return ConfigCharts(
        group.label,
        max_new,
        length_edges,
        length_counts,
        prompt_edges,
        joint_edges,
        joint,
        headline,
        score_edges,
        score_counts,
    )


def _audit_section(audit: Mapping[str, Any] | None) -> str:
    if audit is None:
        return ""
    ok = audit.get("differing") == 0
    verdict = (
        f'<p class="{"good" if ok else "bad"}">{_e(audit.get("equal"))} of {_e(audit.get("audited"))} audited keys '
        f"regenerated identically; {_e(audit.get('differing'))} differ.</p>"
    )
    fields = ("engine", "model_path", "device", "dtype", "sampled", "selection", "total_keys", "seconds_per_key")
    parts = ["<h2>Audit</h2>", verdict, _rows((name, audit.get(name)) for name in fields)]
    divergence = audit.get("first_divergence") or {}
    if isinstance(divergence, dict) and divergence:
        parts += ["<h3>First divergence (answer position: keys)</h3>", _rows(sorted(divergence.items()))]
    keys = [key for key in audit.get("keys") or [] if isinstance(key, dict) and not key.get("equal")]
    if keys:
        rows = (
            (str(key.get("key", ""))[:12] + "…", f"first difference at {key.get('first_difference')}") for key in keys
        )
        parts += ["<h3>Differing keys</h3>", _rows(list(rows)[:EXAMPLES])]
    return "\n".join(parts)


def _page(scored: ScoredRun, audit: Mapping[str, Any] | None, charts: bool) -> str:
    report = scored.report
    resolved = scored.resolved
    generation = resolved.get("generation") or {}
    max_new = generation.get("max_new_tokens") if isinstance(generation.get("max_new_tokens"), int) else None
    samples = scored.samples
    prompt_chars: dict[str, int] = {}
    for sample in samples.unique:
        prompt_chars.setdefault(sample.key, sample.prompt_chars)
    per_config: dict[int, list[ScoredAnswer]] = {group.data_config_index or 0: [] for group in report.groups}
    for answer in report.answers:
        per_config[answer.data_config_index].append(answer)
    reader = scored.reader

    def texts(key: str) -> list[str]:
        return list(reader.metadata(key)["text"])

    def prompt(key: str) -> str:
        return str(samples.by_key(key).prompt_text)  # joined only for the examples shown

    sections = []
    for group in report.groups:
        index = group.data_config_index or 0
        answers = per_config[index]
        figure = ""
        if charts and answers:
            svg = config_figure(_charts_of(group, answers, prompt_chars, max_new))
            figure = f'<figure class="chart" data-config="{index}">{svg}</figure>'
        sections.append(
            f'<section class="data-config" id="data-config-{index}"><h2>{_e(group.label)}</h2>'
            f'<p class="note">answer rule: {_e(group.rule)}; headline metric: {_e(group.headline)}</p>'
            f"{figure}<h3>Examples, the worst first</h3>"
            f"{_examples(answers, group.headline, prompt, texts) if answers else '<p class=note>no answers</p>'}"
            "</section>"
        )
    missing = "" if charts else f'<p class="note" id="charts-missing">{_e(CHARTS_MISSING)}</p>'
    title = f"gencache report: {report.artifact.name}"
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>{_e(title)}</h1><p class='note'>{_e(report.artifact)}: {report.overall.answers} answers, "
        f"{report.overall.scored} scored against a reference, {report.overall.unscored} without one.</p>"
        f"{missing}<h2>Scores</h2>{_score_table([report.overall, *report.groups])}"
        f"{''.join(sections)}{_audit_section(audit)}{_provenance(resolved)}</body></html>\n"
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
    """Score ``artifact`` (:func:`gencache.run.score.score_run`) and write its page to ``out`` (which must not
    exist), with the audit report ``audit`` when given (see the module docstring)."""
    from gencache.run.export import check_out_parent, write_atomic

    out_path = Path(os.path.abspath(out))
    if os.path.lexists(out_path):
        raise OutputExistsError(f"{out_path} already exists; choose another --out path.")
    check_out_parent(out_path)
    audit_document = None if audit is None else read_audit(audit)
    scored = score_run(artifact, answer_patterns=answer_patterns, data_root=data_root, sources=sources)
    charts = charts_available()
    page = _page(scored, audit_document, charts).encode("utf-8")

    def write(handle: IO[bytes]) -> int:
        handle.write(page)
        return len(page)

    size = write_atomic(out_path, write)
    return ReportResult(out_path, size, charts, len(scored.report.groups), scored.report.overall.answers)
