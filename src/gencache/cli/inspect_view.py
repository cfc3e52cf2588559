"""What ``gencache inspect`` shows of a report: tables and lines, built by report type, and their plain text.

:func:`inspect_blocks` turns an :class:`~gencache.artifact.report_types.InspectReport` into :class:`Table` and
:class:`Line` blocks of styled :class:`Span` text; :func:`gencache.cli.render.render_inspect` prints them through
rich. :func:`write_plain` writes, without importing rich, the very bytes that the console of
:func:`gencache.core.progress.make_console` prints to a stream that is not a terminal: the same box characters and
column widths, no styles. It writes only what it can write exactly, and otherwise nothing (it returns False and
rich prints the blocks): on a terminal, with colours forced, in an encoding other than UTF-8, for text that rich
changes (emoji codes, control characters, backslashes) or measures from its tables (characters beyond Latin and
the ellipsis), and for a table wider than the console.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any, Literal, NamedTuple

from gencache.artifact.report_types import (
    ArtifactReport,
    DataConfigCounts,
    InspectReport,
    NotAnArtifact,
    Overlap,
    ShardedReport,
    UnreadableArtifact,
)
from gencache.core.progress import PIPE_WIDTH, is_terminal

__all__ = ["Block", "Column", "Line", "Span", "Table", "Text", "inspect_blocks", "write_plain"]


class Span(NamedTuple):
    """A run of text and its rich style (None: unstyled)."""

    text: str
    style: str | None = None


Text = tuple[Span, ...]


class Column(NamedTuple):
    """A table column: its header, how its cells are justified and their rich style."""

    header: str
    justify: Literal["left", "right"] = "left"
    style: str | None = None


class Table(NamedTuple):
    """A table with a left-justified title, drawn as rich draws its default box (one without a header row when
    ``show_header`` is False)."""

    title: Text
    columns: tuple[Column, ...]
    rows: tuple[tuple[Text, ...], ...]
    show_header: bool = True


class Line(NamedTuple):
    """One line of text, on stderr when ``err``; ``highlight`` lets rich colour numbers and paths on a terminal."""

    text: Text
    err: bool = False
    highlight: bool = False


Block = Table | Line


def _text(text: str, style: str | None = None) -> Text:
    return (Span(text, style),)


# -- the blocks of a report -----------------------------------------------------------------------------------
def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _on(value: Any) -> str:
    return {True: "on", False: "off", None: "unknown"}.get(value, str(value))


def _determinism_block(facts: Mapping[str, Any] | None) -> str:
    """What decides whether the run's tokens can change between runs, one fact per line."""
    if facts is None:
        return "not recorded"
    sampling = facts.get("sampling")
    gpu = facts.get("gpu_name")
    lines = [
        f"sampling: {sampling['scope'] if isinstance(sampling, dict) else str(sampling or 'not recorded')}",
        f"batch-invariant kernels {_on(facts.get('batch_invariant'))}, torch deterministic algorithms "
        f"{_on(facts.get('torch_deterministic_algorithms'))}, CUBLAS_WORKSPACE_CONFIG "
        f"{facts.get('cublas_workspace_config') or 'unset'}",
        f"prefix caching {_on(facts.get('prefix_caching'))}, chunked prefill {_on(facts.get('chunked_prefill'))}, "
        f"tensor parallel {facts.get('tensor_parallel_size')}, attention {facts.get('attention_backend') or 'unknown'}",
        f"GPU {gpu} (compute capability {facts.get('gpu_compute_capability')})" if gpu else "GPU none",
    ]
    return "\n".join(lines)


def _counts(items: Sequence[DataConfigCounts] | None) -> str:
    """Counts per data config: ``#0: 3 samples, 3 unique; #1: ...`` (``-`` when there are none)."""
    if items is None:
        return "not recorded"
    return "; ".join(f"#{d.data_config}: {d.samples:,} samples, {d.unique:,} unique" for d in items) or "-"


def _data_config_rows(report: ArtifactReport) -> list[tuple[str, Text]]:
    """An artifact's counts per data config: a shard's own (as its run recorded them) and its whole run's."""
    if report.shard is None:
        return [("data configs", _text(_counts(report.data_configs)))]
    return [
        ("data configs (shard)", _text(_counts(report.shard_data_configs))),
        ("data configs (run)", _text(_counts(report.data_configs))),
    ]


def _duplicates(report: ArtifactReport) -> Text:
    if not report.conflicting_prompts:
        return _text(f"{report.duplicates:,}")
    conflicting = f"{report.conflicting_prompts:,} rendered different prompts; the first was generated"
    return (Span(f"{report.duplicates:,} ("), Span(conflicting, "yellow"), Span(")"))


def _artifact_table(report: ArtifactReport) -> Table:
    tok, lengths, shard = report.tokenizer, report.token_length, report.shard
    rows: list[tuple[str, Text]] = [
        ("format", _text(str(report.format_version))),
        ("teacher", _text(report.teacher)),
        ("tokenizer", _text(report.tokenizer_path)),
        (
            "tokenizer state",
            _text(f"padding {tok['padding_side']}, pad id {tok['pad_token_id']}, eos id {tok['eos_token_id']}"),
        ),
        ("dtype", _text(report.dtype)),
        ("entries", _text(f"{report.entries:,}")),
        ("sequences", _text(f"{report.sequences:,}")),
        ("tokens", _text(f"{report.tokens:,}")),
        (
            "token length",
            _text(f"min {lengths.min}, median {lengths.median:g}, max {lengths.max}" if lengths else "-"),
        ),
        ("finish reasons", _text(", ".join(f"{k} {v:,}" for k, v in report.finish_reasons.items()))),
        ("duplicates", _duplicates(report)),
        *_data_config_rows(report),
        (
            "shard",
            _text(f"{shard['index']} of {shard['count']} (run {shard['run_digest'][:12]})" if shard else "none"),
        ),
        ("engine", _text(report.engine or "not recorded")),
        ("determinism", _text(_determinism_block(report.determinism))),
        (
            "payload",
            _text(f"{_size(report.payload_bytes)}, header {report.header_used:,} of {report.header_capacity:,} bytes"),
        ),
    ]
    return Table(
        title=_text(report.path),
        columns=(Column("field", style="bold"), Column("value")),
        rows=tuple((_text(field), value) for field, value in rows),
        show_header=False,
    )


def _shard_status(name: str, report: ShardedReport) -> Text:
    if name in report.shards.other_run:
        return _text("other run", "yellow")
    if name in report.shards.mislabeled:
        return _text("misnamed", "yellow")
    return _text("ok", "green")


def _sharded_table(report: ShardedReport) -> Table:
    info = report.shards
    by_index = dict(zip(info.present, report.artifacts, strict=True))
    blank = _text("")
    rows: list[tuple[Text, ...]] = []
    for index in range(info.shard_count):
        name = f"{index:05d}"
        shard = by_index.get(name)
        if shard is None:
            rows.append((_text(name), _text("missing", "red"), blank, blank, blank, blank))
        elif isinstance(shard, UnreadableArtifact):
            status = (Span("unreadable", "red"), Span(" (FAIL line below)"))
            rows.append((_text(name), status, blank, blank, blank, blank))
        else:
            counts = (f"{shard.entries:,}", f"{shard.sequences:,}", f"{shard.tokens:,}")
            rows.append(
                (
                    _text(name),
                    _shard_status(name, report),
                    *map(_text, counts),
                    _text(_counts(shard.shard_data_configs)),
                )
            )
    totals = report.totals
    counts = (f"{totals.entries:,}", f"{totals.sequences:,}", f"{totals.tokens:,}")
    rows.append((_text("total"), blank, *map(_text, counts), _text(_counts(totals.data_configs))))
    names = ("shard", "status", "entries", "sequences", "tokens", "data configs")
    return Table(
        title=(Span(report.path), Span(f" ({info.shard_count} shards)")),
        columns=tuple(Column(n, "left" if n in ("shard", "status", "data configs") else "right") for n in names),
        rows=tuple(rows),
    )


def _sharded_blocks(report: ShardedReport) -> list[Block]:
    blocks: list[Block] = [_sharded_table(report)]
    blocks.extend(Line((Span("problem", "red"), Span(f": {problem}"))) for problem in report.shards.problems)
    blocks.extend(  # one whole line each, like verify's
        Line(_text(f"FAIL {shard.error}"), err=True)
        for shard in report.artifacts
        if isinstance(shard, UnreadableArtifact)
    )
    blocks.extend(_artifact_table(shard) for shard in report.artifacts if isinstance(shard, ArtifactReport))
    return blocks  # every shard in detail, not only the first


def _overlap_blocks(overlap: Overlap) -> list[Block]:
    rows = []
    for pair in overlap.pairs:
        conflicting = str(pair.conflicting)
        if pair.conflicting_keys:
            conflicting += f" (e.g. {pair.conflicting_keys[0][:16]}…)"
        rows.append((_text(pair.a), _text(pair.b), _text(f"{pair.shared:,}"), _text(conflicting)))
    columns = tuple(Column(name) for name in ("a", "b", "shared keys", "conflicting keys"))
    provenance = overlap.provenance + (f" ({', '.join(overlap.differing)})" if overlap.differing else "")
    return [
        Table(title=_text("overlap"), columns=columns, rows=tuple(rows)),
        Line(_text(f"provenance: {provenance}; union of keys: {overlap.union:,}"), highlight=True),
    ]


def inspect_blocks(report: InspectReport) -> list[Block]:
    """What inspect shows of ``report``, in order: per path a table (a sharded output's table, its problems and a
    table per shard) or one ``error:``/``FAIL`` line on stderr, then the overlap of several paths."""
    blocks: list[Block] = []
    for artifact in report.artifacts:
        match artifact:
            case NotAnArtifact():
                blocks.append(Line(_text(f"error: {artifact.error}"), err=True))
            case UnreadableArtifact(path=path, error=error):
                shown = error if error.startswith(path) else f"{path}: {error}"
                blocks.append(Line(_text(f"FAIL {shown}"), err=True))
            case ShardedReport():
                blocks.extend(_sharded_blocks(artifact))
            case ArtifactReport():
                blocks.append(_artifact_table(artifact))
    if report.overlap is not None:
        blocks.extend(_overlap_blocks(report.overlap))
    return blocks


# -- plain text -----------------------------------------------------------------------------------------------
#: Text that every rich console prints as it is, one cell per character: printable ASCII (no backslash, which
#: rich's markup escaping can double), Latin-1 and Latin Extended letters, the ellipsis.
_PLAIN_TEXT = re.compile(r"[\x20-\x5b\x5d-\x7e\xa0-\xac\xae-\u02ff\u2026]*")
#: What rich may replace by an emoji (``:name:``).
_EMOJI_CODE = re.compile(r":\S*:")
# rich's default table box (HEAVY_HEAD) and the one it uses without a header row (SQUARE): edges and rules.
_HEAVY_HEAD = ("┏━┳┓", "┃┃┃", "┡━╇┩", "│││", "└─┴┘")
_SQUARE = ("┌─┬┐", "│││", "├─┼┤", "│││", "└─┴┘")


def _plain(text: Text, *, multiline: bool = False) -> str | None:
    joined = "".join(span.text for span in text)
    lines = joined.split("\n") if multiline else [joined]
    if not all(_PLAIN_TEXT.fullmatch(line) for line in lines) or _EMOJI_CODE.search(joined):
        return None
    return joined


def _rule(chars: str, widths: Sequence[int]) -> str:
    """A horizontal rule: ``chars`` is left edge, fill, divider, right edge."""
    return chars[0] + chars[2].join(chars[1] * width for width in widths) + chars[3] + "\n"


def _table_text(table: Table) -> str | None:
    """``table`` as rich draws it on a console :data:`PIPE_WIDTH` wide (None when it cannot be drawn here)."""
    title = _plain(table.title)
    header = tuple(_text(column.header) for column in table.columns)
    grid: list[list[list[str]]] = []
    for row in (header, *table.rows) if table.show_header else table.rows:
        texts = [_plain(cell, multiline=row is not header) for cell in row]  # a header of one line
        if any(text is None for text in texts):
            return None
        grid.append([(text or "").split("\n") for text in texts])
    widths = [max(len(line) for cells in grid for line in cells[i]) + 2 for i in range(len(table.columns))]
    if title is None or sum(widths) + len(widths) + 1 > PIPE_WIDTH:  # the edges and dividers take one each
        return None
    top, first, head_rule, edges, bottom = _HEAVY_HEAD if table.show_header else _SQUARE
    out = [f"{title}\n" if title else "", _rule(top, widths)]
    for number, cells in enumerate(grid):
        sides = first if number == 0 else edges  # left edge, divider, right edge
        height = max([1] + [len(lines) for lines, width in zip(cells, widths, strict=True) if width > 2])
        for index in range(height):  # rich renders nothing in a column with no text at all
            parts = []
            for lines, column, width in zip(cells, table.columns, widths, strict=True):
                line = lines[index] if index < len(lines) else ""
                parts.append(line.ljust(width - 2) if column.justify == "left" else line.rstrip().rjust(width - 2))
            out.append(sides[0] + sides[1].join(f" {part} " for part in parts) + sides[2] + "\n")
        if number == 0 and table.show_header:
            out.append(_rule(head_rule, widths))
    out.append(_rule(bottom, widths))
    return "".join(out)


def _block_text(block: Block) -> str | None:
    if isinstance(block, Table):
        return _table_text(block)
    text = _plain(block.text)
    return None if text is None else text + "\n"


def _plain_stream(stream: IO[str]) -> bool:
    """Whether a rich console on ``stream`` prints plain text: not a terminal, no colours forced, UTF-8, and no
    Windows console or notebook that rich treats in its own way."""
    encoding = (getattr(stream, "encoding", None) or "utf-8").lower()
    return (
        not is_terminal(stream)
        and "FORCE_COLOR" not in os.environ
        and os.environ.get("TTY_COMPATIBLE", "") in ("", "0")
        and encoding.startswith("utf")
        and sys.platform != "win32"
        and "IPython" not in sys.modules
    )


def write_plain(blocks: Sequence[Block], out: IO[str], err: IO[str]) -> bool:
    """Write ``blocks`` to ``out`` (and their ``err`` lines to ``err``) as rich would, each block flushed as rich
    flushes each print; False, with nothing written, when that cannot be done exactly here (see the module
    docstring)."""
    streams = [err if isinstance(block, Line) and block.err else out for block in blocks]
    if not all(_plain_stream(stream) for stream in set(streams)):
        return False
    texts = [_block_text(block) for block in blocks]
    if any(text is None for text in texts):
        return False
    for stream, text in zip(streams, texts, strict=True):
        stream.write(text or "")
        stream.flush()
    return True
