"""``gencache inspect`` to a pipe or a file prints the same bytes without rich as through rich: each report's tables
and lines written by ``write_plain`` equal what the rich console of the CLI prints for them, and where that cannot be
promised (a terminal, forced colours, another encoding, text rich changes or measures itself) nothing is written
plainly and rich prints it."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gencache.artifact.report import inspect_report
from gencache.artifact.report_types import ArtifactReport, InspectReport
from gencache.cli.inspect_view import Block, Column, Line, Span, Table, inspect_blocks, write_plain
from gencache.cli.render import print_blocks, render_inspect
from gencache.core.progress import make_console
from support.storage_helpers import (
    PROVENANCE,
    Entry,
    make_entries,
    resolved_for,
    writable_copy,
    write_artifact,
    write_shard,
)
from support.terminal_env import FORCED_COLOUR_ENV


@pytest.fixture(autouse=True)
def _uncoloured(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FORCED_COLOUR_ENV:
        monkeypatch.delenv(name, raising=False)


def through_rich(blocks: Sequence[Block]) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    print_blocks(blocks, make_console(file=out), make_console(file=err))
    return out.getvalue(), err.getvalue()


def plain(blocks: Sequence[Block]) -> tuple[str, str] | None:
    out, err = io.StringIO(), io.StringIO()
    if not write_plain(blocks, out, err):
        assert out.getvalue() == err.getvalue() == ""  # all or nothing
        return None
    return out.getvalue(), err.getvalue()


def with_determinism(path: Path, entries: list[Entry], **facts: object) -> Path:
    resolved = resolved_for(path, PROVENANCE, None)
    resolved["engine"] = {"name": "vllm", "sampling": {"scope": "per-sequence draws"}}
    resolved["runtime"] = {"determinism": {"batch_invariant": True, "prefix_caching": None, **facts}}
    resolved["samples"] = {"conflicting_prompts": 2}
    summary = {"duplicates": 4, "data_configs": [{"index": 0, "samples": len(entries) + 4, "unique": len(entries)}]}
    return write_artifact(path, entries, resolved_config=resolved, summary=summary)


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("plain")
    entries = make_entries(9, sequences=2)
    conflicting = [Entry(e.key, e.sequences, ("x", "y"), e.finish_reasons) for e in entries[3:6]]
    counts = {"data_configs": [{"index": 0, "samples": 11, "unique": 9}]}
    found = {
        "one": write_artifact(root / "one", entries, summary=counts),
        "determinism": with_determinism(root / "det", entries[:4], gpu_name="NVIDIA H200", tensor_parallel_size=2),
        "empty": write_artifact(root / "empty", []),
        "other": write_artifact(root / "other", conflicting),
        "names": write_artifact(root / "a [red]b[/] café  trail ", entries[:2]),
        "wide": write_artifact(root / "wide-中文", entries[:2]),
        "backslash": write_artifact(root / "back\\slash", entries[:2]),
        "emoji": write_artifact(root / "a:smile:b", entries[:2]),
        "cublas": with_determinism(root / "cublas", entries[:2], cublas_workspace_config=":4096:8"),
    }
    for index in (0, 1, 3):
        write_shard(root / "sharded", index, 4, entries, "d" * 64)
    shard = Path(f"{root / 'sharded'}-shard-00001-of-00004")
    os.chmod(shard, 0o755)
    for name in os.listdir(shard):
        os.chmod(shard / name, 0o644)
    (shard / "manifest.json").write_bytes(b"{}")
    (writable_copy(found["one"], root / "damaged") / "manifest.json").write_bytes(b"{}")
    (root / "parent").mkdir()
    write_artifact(root / "parent" / "child", entries[:1])
    return found | {name: root / name for name in ("sharded", "damaged", "parent", "missing")}


PLAIN = [
    ["one"],
    ["determinism"],
    ["empty"],
    ["sharded"],
    ["one", "other", "determinism"],
    ["missing"],
    ["parent", "one"],
    ["names"],
    ["one", "sharded", "missing"],
]
RICH_ONLY = [["wide"], ["backslash"], ["emoji"], ["cublas"], ["one", "wide"]]


@pytest.mark.parametrize("names", PLAIN, ids="+".join)
def test_plain_inspect_output_is_what_rich_prints(names: list[str], paths: dict[str, Path]) -> None:
    report = inspect_report([paths[name] for name in names])
    blocks = inspect_blocks(report)
    assert plain(blocks) == through_rich(blocks)
    out, err = io.StringIO(), io.StringIO()
    render_inspect(report, make_console(file=out), make_console(file=err))
    assert plain(blocks) == (out.getvalue(), err.getvalue())


@pytest.mark.parametrize("names", RICH_ONLY, ids="+".join)
def test_text_that_rich_changes_or_measures_is_left_to_rich(names: list[str], paths: dict[str, Path]) -> None:
    blocks = inspect_blocks(inspect_report([paths[name] for name in names]))
    assert plain(blocks) is None
    assert paths[names[-1]].name in through_rich(blocks)[0] or names == ["emoji"]  # rich prints it (🙂 for :smile:)


def test_a_sharded_output_with_a_missing_and_a_damaged_shard_shows_both(paths: dict[str, Path]) -> None:
    report = inspect_report([paths["sharded"]])
    result = plain(inspect_blocks(report))
    assert result is not None and report.exit_code == 1
    out, err = result
    assert "│ 00001 │ unreadable (FAIL line below) │" in out and "│ 00002 │ missing " in out
    assert "problem: " in out and err.startswith(f"FAIL {paths['sharded']}-shard-00001-of-00004")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Latin1(io.StringIO):
    encoding = "latin-1"


@pytest.mark.parametrize("stream", [Terminal, Latin1])
def test_nothing_is_written_plainly_to_a_terminal_or_in_another_encoding(
    stream: type[io.StringIO], paths: dict[str, Path]
) -> None:
    blocks = inspect_blocks(inspect_report([paths["one"], paths["missing"]]))
    for out, err in ((stream(), io.StringIO()), (io.StringIO(), stream())):
        assert not write_plain(blocks, out, err) and out.getvalue() == err.getvalue() == ""


@pytest.mark.parametrize(("name", "value"), [("FORCE_COLOR", "1"), ("TTY_COMPATIBLE", "1")])
def test_nothing_is_written_plainly_when_colours_are_forced(
    name: str, value: str, paths: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, value)
    assert plain(inspect_blocks(inspect_report([paths["one"]]))) is None


_PLAIN_CHARS = [*"ab Z09/.-_,;()[]#@é\xa0ß…", "[red]", "[/]", "\n"]
_OTHER_CHARS = [*"\\:\t\r\x00\x1b\xad\u0301中🙂", ":smile:"]


def words(chars: list[str], *, lines: bool = True) -> st.SearchStrategy[str]:
    found = st.lists(st.sampled_from(chars), max_size=12).map("".join)
    return found if lines else found.filter(lambda word: "\n" not in word)


@st.composite
def blocks(draw: st.DrawFn, chars: list[str]) -> list[Block]:
    """A table (title, header, cells of one or several lines, styled or not) and a line on each stream."""
    width = draw(st.integers(1, 4))
    columns = tuple(
        Column(draw(words(chars, lines=False)), draw(st.sampled_from(["left", "right"]))) for _ in range(width)
    )
    rows = draw(st.lists(st.tuples(*[words(chars)] * width), min_size=1, max_size=4))
    styled = st.sampled_from([None, "red", "yellow"])
    table = Table(
        title=(Span(draw(words(chars, lines=False))),),
        columns=columns,
        rows=tuple(tuple((Span(cell, draw(styled)),) for cell in row) for row in rows),
        show_header=draw(st.booleans()),
    )
    line = draw(words(chars, lines=False))
    return [table, Line((Span(line, "red"),)), Line((Span(line),), err=True)]


@settings(max_examples=150, deadline=None)
@given(blocks(_PLAIN_CHARS))
def test_any_table_and_line_of_plain_text_is_written_as_rich_prints_it(written: list[Block]) -> None:
    assert plain(written) == through_rich(written)


@settings(max_examples=150, deadline=None)
@given(blocks(_PLAIN_CHARS + _OTHER_CHARS))
def test_whatever_is_written_plainly_is_what_rich_prints(written: list[Block]) -> None:
    text = plain(written)
    assert text is None or text == through_rich(written)


def test_the_console_script_inspects_to_a_pipe_without_rich_and_prints_the_same(paths: dict[str, Path]) -> None:
    report = inspect_report([paths["one"], paths["sharded"]])
    out, err = io.StringIO(), io.StringIO()
    render_inspect(report, make_console(file=out), make_console(file=err))
    code = (
        "import sys\nfrom gencache.cli.entry import main\n"
        f"sys.argv = ['gencache', 'inspect', {str(paths['one'])!r}, {str(paths['sharded'])!r}]\n"
        "try:\n    main()\nexcept SystemExit as stop:\n    print('rich' in sys.modules, stop.code, file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert result.stdout == out.getvalue()
    assert result.stderr == err.getvalue() + "False 1\n"  # rich was not imported; a shard is unreadable: exit 1


def test_every_report_kind_is_shown(paths: dict[str, Path]) -> None:
    report = inspect_report([paths[name] for name in ("one", "sharded", "missing", "parent", "damaged")])
    kinds = [type(artifact).__name__ for artifact in report.artifacts]
    assert kinds == ["ArtifactReport", "ShardedReport", "NotAnArtifact", "NotAnArtifact", "UnreadableArtifact"]
    assert isinstance(report, InspectReport) and isinstance(report.artifacts[0], ArtifactReport)
    blocks = inspect_blocks(report)
    errs = [block for block in blocks if isinstance(block, Line) and block.err]
    assert [line.text[0].text.split(" ")[0] for line in errs] == ["FAIL", "error:", "error:", "FAIL"]
