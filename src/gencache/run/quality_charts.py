"""The charts of ``gencache report``: one figure per data config, drawn with matplotlib into inline SVG (the 2-D
histogram as one embedded PNG image, a ``data:`` URI).

Each figure has three panels, all drawn from aggregates (:class:`ConfigCharts`), so a figure's size does not grow
with the number of answers: the answer-length histogram stacked by finish reason with ``max_new_tokens`` marked,
the prompt length against the answer length as a 2-D histogram, and the histogram of the data config's headline
score. matplotlib is the optional ``report`` extra (``pip install gencache[report]``): :func:`charts_available`
says whether it is there, and it is imported inside :func:`config_figure` only, through its object-oriented API
(no pyplot, no global backend), with its settings changed only inside a ``rc_context``. The SVG is made
self-contained for an HTML page: no XML prolog, no DOCTYPE, no namespace URLs, no metadata; filled step outlines
and one image keep its size independent of the number of bins.
"""

from __future__ import annotations

import importlib.util
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: One colour per finish reason, the same in every figure (others take the next of the palette).
REASON_COLOURS = {"eos": "#4c72b0", "stop": "#55a868", "length": "#c44e52"}
_PALETTE = ("#8172b2", "#ccb974", "#64b5cd", "#937860")
_PROLOG = re.compile(r"<\?xml[^>]*\?>\s*|<!DOCTYPE[^>]*>\s*", re.DOTALL)
_NAMESPACES = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
_SIZE = re.compile(r'<svg([^>]*?)\swidth="[^"]*"\s+height="[^"]*"')


@dataclass(frozen=True)
class ConfigCharts:
    """What one data config's figure draws, aggregated: ``length_edges`` and per finish reason the answer-length
    counts in those bins; ``prompt_edges`` × ``length_edges2`` with the 2-D counts ``joint`` (prompt characters
    by answer tokens); ``score_edges`` with the headline score's counts (``headline``); ``max_new_tokens``."""

    title: str
    max_new_tokens: int | None
    length_edges: np.ndarray[Any, np.dtype[np.float64]]
    length_counts: Mapping[str, np.ndarray[Any, np.dtype[np.int64]]]
    prompt_edges: np.ndarray[Any, np.dtype[np.float64]]
    joint_length_edges: np.ndarray[Any, np.dtype[np.float64]]
    joint: np.ndarray[Any, np.dtype[np.int64]]
    headline: str
    score_edges: np.ndarray[Any, np.dtype[np.float64]]
    score_counts: np.ndarray[Any, np.dtype[np.int64]]


def charts_available() -> bool:
    """Whether matplotlib (the ``report`` extra) can be imported."""
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):  # a module entry of None (blocked) or without a spec
        return False


def inline_svg(svg: str) -> str:
    """matplotlib's SVG document as an element for an HTML page: without the XML prolog, DOCTYPE, namespace
    declarations (the HTML parser knows SVG) and metadata, and scaling to the page's width."""
    svg = _PROLOG.sub("", svg)
    svg = _NAMESPACES.sub("", svg)
    svg = _METADATA.sub("", svg)
    return _SIZE.sub(r'<svg\1 style="width:100%;height:auto"', svg, count=1).strip()


def _colour(reason: str, position: int) -> str:
    return REASON_COLOURS.get(reason, _PALETTE[position % len(_PALETTE)])


def _lengths(axes: Any, charts: ConfigCharts) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    edges = charts.length_edges
    bottom = np.zeros(len(edges) - 1)
    handles: list[Any] = []
    for position, (reason, counts) in enumerate(sorted(charts.length_counts.items())):
        top = bottom + counts  # stacked: one filled outline per finish reason, whatever the number of bins
        colour = _colour(reason, position)
        axes.stairs(top, edges, baseline=bottom, fill=True, color=colour)
        handles.append(Patch(color=colour, label=reason))
        bottom = top
    if charts.max_new_tokens is not None:
        axes.axvline(charts.max_new_tokens, color="#222222", linestyle="--", linewidth=1)
        handles.append(Line2D([], [], color="#222222", linestyle="--", linewidth=1, label="max_new_tokens"))
    axes.set_title("answer length (tokens)", fontsize=9)
    axes.set_ylabel("answers", fontsize=8)
    axes.legend(handles=handles, fontsize=7, loc="upper left", framealpha=0.85)


def _joint(axes: Any, charts: ConfigCharts) -> None:
    counts = np.ma.masked_equal(charts.joint.T, 0)
    if counts.count():  # one embedded image, whatever the number of bins
        extent = (
            charts.prompt_edges[0],
            charts.prompt_edges[-1],
            charts.joint_length_edges[0],
            charts.joint_length_edges[-1],
        )
        axes.imshow(counts, origin="lower", extent=extent, aspect="auto", interpolation="nearest", cmap="viridis")
    axes.set_title("prompt vs answer length", fontsize=9)
    axes.set_xlabel("prompt (characters)", fontsize=8)
    axes.set_ylabel("answer (tokens)", fontsize=8)


def _scores(axes: Any, charts: ConfigCharts) -> None:
    axes.stairs(charts.score_counts, charts.score_edges, fill=True, color="#4c72b0")
    axes.set_xlim(0, 1)
    axes.set_title(f"{charts.headline} (scored answers)", fontsize=9)


def config_figure(charts: ConfigCharts) -> str:
    """One data config's figure as an inline SVG element (needs matplotlib)."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"svg.fonttype": "none", "font.size": 8}):
        figure = Figure(figsize=(10, 2.9), layout="constrained")
        lengths, joint, scores = figure.subplots(1, 3)
        _lengths(lengths, charts)
        _joint(joint, charts)
        _scores(scores, charts)
        for axes in (lengths, joint, scores):
            axes.tick_params(labelsize=7)
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    return inline_svg(buffer.getvalue())
