"""What ``gencache inspect`` shows of a report: per path a rich table (a sharded output's table, its problems and a
table per shard) or one ``error:``/``FAIL`` line on stderr, then the overlap of several paths. Every recorded value
is a rich :class:`~rich.text.Text`, never parsed as markup or emoji; the console decides colours and width.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gencache.artifact.report import InspectReport


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


def _counts(items: Sequence[Mapping[str, int]] | None) -> str:
    """Counts per data config: ``#0: 3 samples, 3 unique; #1: ...`` (``-`` when there are none)."""
    if items is None:
        return "not recorded"
    return "; ".join(f"#{d['index']}: {d['samples']:,} samples, {d['unique']:,} unique" for d in items) or "-"


def _artifact_table(report: dict[str, Any]) -> Table:
    tok, lengths, shard, header = report["tokenizer"], report["token_length"], report["shard"], report["header"]
    duplicates = Text(f"{report['duplicates']:,}")
    if report["conflicting_prompts"]:
        conflicting = f"{report['conflicting_prompts']:,} rendered different prompts; the first was generated"
        duplicates = Text.assemble(f"{report['duplicates']:,} (", (conflicting, "yellow"), ")")
    if shard is None:
        data_configs = [("data configs", _counts(report["data_configs"]))]
    else:  # a shard's own counts (as its run recorded them) and its whole run's
        data_configs = [
            ("data configs (shard)", _counts(report["shard_data_configs"])),
            ("data configs (run)", _counts(report["data_configs"])),
        ]
    rows: list[tuple[str, str | Text]] = [
        ("format", str(report["format_version"])),
        ("teacher", report["teacher"]),
        ("tokenizer", report["tokenizer_path"]),
        (
            "tokenizer state",
            f"padding {tok['padding_side']}, pad id {tok['pad_token_id']}, eos id {tok['eos_token_id']}",
        ),
        ("dtype", report["dtype"]),
        ("entries", f"{report['entries']:,}"),
        ("sequences", f"{report['sequences']:,}"),
        ("tokens", f"{report['tokens']:,}"),
        (
            "token length",
            f"min {lengths['min']}, median {lengths['median']:g}, max {lengths['max']}" if lengths else "-",
        ),
        ("finish reasons", ", ".join(f"{k} {v:,}" for k, v in report["finish_reasons"].items())),
        ("duplicates", duplicates),
        *data_configs,
        ("shard", f"{shard['index']} of {shard['count']} (run {shard['run_digest'][:12]})" if shard else "none"),
        ("engine", report["engine"] or "not recorded"),
        ("determinism", _determinism_block(report["determinism"])),
        (
            "payload",
            f"{_size(report['payload_bytes'])}, header {header['used']:,} of {header['capacity']:,} bytes",
        ),
    ]
    table = Table(title=Text(report["path"]), title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for field, value in rows:
        table.add_row(Text(field), Text(value) if isinstance(value, str) else value)
    return table


def _sharded_table(report: dict[str, Any]) -> Table:
    info = report["shards"]
    by_index = dict(zip(info["present"], report["artifacts"], strict=True))
    table = Table(title=Text(f"{report['path']} ({info['count']} shards)"), title_justify="left")
    for name in ("shard", "status", "entries", "sequences", "tokens", "data configs"):
        table.add_column(name, justify="left" if name in ("shard", "status", "data configs") else "right")
    for index in range(info["count"]):
        name = f"{index:05d}"
        shard = by_index.get(name)
        if shard is None:
            table.add_row(Text(name), Text("missing", "red"))
        elif shard["kind"] == "error":
            table.add_row(Text(name), Text.assemble(("unreadable", "red"), " (FAIL line below)"))
        else:
            status = Text("ok", "green")
            if name in info["other_run"] or name in info["mislabeled"]:
                status = Text("other run" if name in info["other_run"] else "misnamed", "yellow")
            counts = (f"{shard['entries']:,}", f"{shard['sequences']:,}", f"{shard['tokens']:,}")
            table.add_row(Text(name), status, *map(Text, counts), Text(_counts(shard["shard_data_configs"])))
    totals = report["totals"]
    counts = (f"{totals['entries']:,}", f"{totals['sequences']:,}", f"{totals['tokens']:,}")
    table.add_row(Text("total"), Text(""), *map(Text, counts), Text(_counts(totals["data_configs"])))
    return table


def render_inspect(report: InspectReport, console: Console, err: Console | None = None) -> None:
    """Print what ``gencache inspect`` shows of ``report`` on ``console``; the ``error:`` and ``FAIL`` lines go to
    ``err`` (the same console when not given)."""
    err = err or console
    for artifact in report.artifacts:
        path, kind, error = artifact["path"], artifact["kind"], artifact.get("error", "")
        if kind == "error":
            err.print(Text(f"FAIL {error if error.startswith(path) else f'{path}: {error}'}"))
        elif kind == "sharded":
            console.print(_sharded_table(artifact))
            for problem in artifact["shards"]["problems"]:
                console.print(Text.assemble(("problem", "red"), f": {problem}"))
            for shard in artifact["artifacts"]:  # one whole line each, like verify's
                if shard["kind"] == "error":
                    err.print(Text(f"FAIL {shard['error']}"))
            for shard in artifact["artifacts"]:  # every shard in detail, not only the first
                if shard["kind"] == "artifact":
                    console.print(_artifact_table(shard))
        elif kind == "artifact":
            console.print(_artifact_table(artifact))
        else:  # not an artifact
            err.print(Text(f"error: {error}"))
    if (overlap := report.overlap) is not None:
        table = Table(title=Text("overlap"), title_justify="left")
        for name in ("a", "b", "shared keys", "conflicting keys"):
            table.add_column(name)
        for pair in overlap["pairs"]:
            keys = pair["conflicting_keys"]
            example = f" (e.g. {keys[0][:16]}…)" if keys else ""
            cells = (pair["a"], pair["b"], f"{pair['shared']:,}", f"{pair['conflicting']}{example}")
            table.add_row(*map(Text, cells))
        console.print(table)
        differing = overlap["differing"]
        provenance = overlap["provenance"] + (f" ({', '.join(differing)})" if differing else "")
        line = f"provenance: {provenance}; union of keys: {overlap['union']:,}"
        console.print(line, markup=False, emoji=False, highlight=True)
