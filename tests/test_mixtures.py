"""Mixtures of artifacts and sharded output directories: open_caches, inspect and verify reports."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from gencache.artifact.manifest import make_provenance
from gencache.artifact.mixture import MultiCacheReader, open_caches
from gencache.artifact.reader import CacheReader
from gencache.artifact.report import inspect_report, verify_report
from gencache.cli.render import render_inspect, verify_progress
from gencache.core.errors import CompatibilityError, FormatError, GencacheError, ShardError
from support.storage_helpers import PROVENANCE, Entry, make_entries, write_artifact, write_shard

RUN = "1" * 64
OTHER_RUN = "2" * 64


def conflicting(entry: Entry) -> Entry:
    return Entry(entry.key, entry.sequences, ("a different answer",), entry.finish_reasons)


def test_a_single_path_opens_a_plain_reader(tmp_path: Path) -> None:
    out = write_artifact(tmp_path / "a", make_entries(3))
    assert isinstance(open_caches(out), CacheReader)
    assert isinstance(open_caches(str(out)), CacheReader)
    assert isinstance(open_caches([out]), CacheReader)
    with pytest.raises(FormatError, match="at least one"):
        open_caches([])
    with pytest.raises(FormatError, match="does not exist"):
        open_caches(tmp_path / "missing")


def test_mixtures_take_the_union_and_accept_identical_duplicates(tmp_path: Path) -> None:
    entries = make_entries(5)
    a = write_artifact(tmp_path / "a", entries[:3])
    b = write_artifact(tmp_path / "b", entries[2:])
    mix = open_caches([a, b])
    assert isinstance(mix, MultiCacheReader)
    assert len(mix) == 5 and set(mix.keys()) == {e.key for e in entries}
    for e in entries:
        assert mix[e.key].texts == e.texts and e.key in mix
    assert mix.metadata(entries[4].key) is not None and mix.get("0" * 64) is None
    mix.require(e.key for e in entries)
    mix.check_compatible(
        model_path="tiny/teacher", tokenizer_path="tiny/teacher", dtype="float32", tokenizer=PROVENANCE["tokenizer"]
    )


def test_conflicting_duplicates_fail_at_open(tmp_path: Path) -> None:
    entries = make_entries(3)
    a = write_artifact(tmp_path / "a", entries)
    b = write_artifact(tmp_path / "b", [conflicting(entries[1])])
    with pytest.raises(FormatError, match=f"conflicting duplicate key {entries[1].key}"):
        open_caches([a, b])


def test_mixtures_require_identical_provenance(tmp_path: Path) -> None:
    a = write_artifact(tmp_path / "a", make_entries(2))
    other = make_provenance("other/teacher", "tiny/teacher", "bfloat16", PROVENANCE["tokenizer"])
    b = write_artifact(tmp_path / "b", make_entries(2, start=5), provenance=other)
    with pytest.raises(CompatibilityError, match=r"incompatible provenance.*model_path, dtype"):
        open_caches([a, b])
    moved = make_provenance("/elsewhere/tiny/teacher", "tiny/teacher", "float32", PROVENANCE["tokenizer"])
    c = write_artifact(tmp_path / "c", make_entries(2, start=9), provenance=moved)
    with pytest.raises(CompatibilityError) as caught:
        open_caches([a, c])
    assert "(differing: model_path)" in str(caught.value)
    assert "as recorded: model_path 'tiny/teacher' vs '/elsewhere/tiny/teacher'" in str(caught.value)
    assert "regenerate one with the other's path" in str(caught.value)


def test_a_reader_of_a_shard_base_points_to_open_caches(tmp_path: Path) -> None:
    base = tmp_path / "out"
    for index in range(2):
        write_shard(base, index, 2, make_entries(4), RUN)
    with pytest.raises(FormatError) as caught:
        CacheReader(base)
    message = str(caught.value)
    assert "does not exist" not in message and "is the base of 2 shard directories (out-shard-*-of-00002)" in message
    assert f"gencache.open_caches({str(base)!r})" in message


def test_the_same_directory_twice_is_rejected_even_through_a_symlink(tmp_path: Path) -> None:
    a = write_artifact(tmp_path / "a", make_entries(2))
    (tmp_path / "alias").symlink_to(a)
    for paths in ([a, a], [a, tmp_path / "alias"], [tmp_path / "alias", str(a) + "/"]):
        with pytest.raises(FormatError, match="same directory"):
            open_caches(paths)


# -- shards ----------------------------------------------------------------------------------------------------
def make_shards(base: Path, count: int, entries: list[Entry], run: str = RUN) -> list[Path]:
    return [write_shard(base, i, count, entries, run) for i in range(count)]


def test_an_unsuffixed_output_directory_expands_to_all_its_shards(tmp_path: Path) -> None:
    entries = make_entries(30)
    make_shards(tmp_path / "out", 3, entries)
    mix = open_caches(tmp_path / "out")
    assert isinstance(mix, MultiCacheReader) and len(mix.readers) == 3
    assert set(mix.keys()) == {e.key for e in entries}
    assert open_caches(str(tmp_path / "out") + "/").keys() == mix.keys()
    report = inspect_report([tmp_path / "out"])
    (shards,) = report.to_json()["artifacts"]
    assert shards["kind"] == "sharded" and shards["totals"]["entries"] == 30 and report.exit_code == 0
    assert shards["shards"]["missing"] == [] and shards["shards"]["other_run"] == []
    verified = verify_report([tmp_path / "out"])
    lines = verified.lines()
    assert verified.exit_code == 0
    assert len(lines) == 3 and all(line.startswith("OK") for line in lines)


def test_a_missing_shard_is_named(tmp_path: Path) -> None:
    entries = make_entries(30)
    paths = make_shards(tmp_path / "out", 4, entries)
    shutil.rmtree(paths[2])
    with pytest.raises(ShardError, match=r"shards 00002 are missing.*--shard I/4"):
        open_caches(tmp_path / "out")
    report = inspect_report([tmp_path / "out"])
    assert report.to_json()["artifacts"][0]["shards"]["missing"] == ["00002"] and report.exit_code == 1
    verified = verify_report([tmp_path / "out"])
    assert verified.exit_code == 1
    assert any("shards 00002 are missing" in line for line in verified.lines())


def test_a_shard_of_another_run_is_named(tmp_path: Path) -> None:
    entries = make_entries(30)
    paths = make_shards(tmp_path / "out", 3, entries)
    shutil.rmtree(paths[1])
    write_shard(tmp_path / "out", 1, 3, entries, OTHER_RUN)
    with pytest.raises(ShardError, match=r"different runs.*shards 00001 have run_digest 222222222222"):
        open_caches(tmp_path / "out")
    assert inspect_report([tmp_path / "out"]).to_json()["artifacts"][0]["shards"]["other_run"] == ["00001"]
    # verify applies the same check: each shard is intact on its own, but the set is not one run
    verified = verify_report([tmp_path / "out"])
    lines = verified.lines()
    assert verified.exit_code
    assert [line for line in lines if line.startswith("FAIL")] == [
        line for line in lines if "different runs" in line and "shards 00001 have run_digest 222222222222" in line
    ]
    assert sum(line.startswith("OK") for line in lines) == 3


def test_a_renamed_shard_or_a_stale_split_is_rejected(tmp_path: Path) -> None:
    entries = make_entries(20)
    paths = make_shards(tmp_path / "out", 2, entries)
    make_shards(tmp_path / "old", 3, entries)
    os.rename(tmp_path / "old-shard-00000-of-00003", tmp_path / "out-shard-00000-of-00003")
    with pytest.raises(ShardError, match=r"different splits.*out-shard-00000-of-00003"):
        open_caches(tmp_path / "out")
    (report,) = inspect_report([tmp_path / "out"]).to_json()["artifacts"]
    assert report["shards"]["other_splits"] == ["out-shard-00000-of-00003"]
    shutil.rmtree(tmp_path / "out-shard-00000-of-00003")
    swapped = tmp_path / "swap"
    os.rename(paths[0], swapped)
    os.rename(paths[1], paths[0])
    os.rename(swapped, paths[1])
    with pytest.raises(ShardError, match="is named shard 0 of 2 but its manifest records shard"):
        open_caches(tmp_path / "out")


def test_shard_directories_can_also_be_listed_explicitly(tmp_path: Path) -> None:
    entries = make_entries(12)
    paths = make_shards(tmp_path / "out", 2, entries)
    assert len(open_caches(paths)) == 12


# -- inspect ---------------------------------------------------------------------------------------------------
def test_inspect_reports_an_artifact(tmp_path: Path) -> None:
    entries = make_entries(6, length=4, sequences=2)
    out = write_artifact(tmp_path / "a", entries, summary={"data_configs": [{"index": 0, "samples": 8, "unique": 6}]})
    report = inspect_report([out])
    item = json.loads(json.dumps(report.to_json()))["artifacts"][0]  # JSON-ready for inspect --json
    lengths = sorted(len(s) for e in entries for s in e.sequences)
    assert item["kind"] == "artifact" and item["teacher"] == "tiny/teacher" and item["dtype"] == "float32"
    assert item["tokenizer"] == PROVENANCE["tokenizer"] and item["format_version"] == 3
    assert (item["entries"], item["sequences"], item["duplicates"]) == (6, 12, 2)
    assert item["token_length"]["min"] == lengths[0] and item["token_length"]["max"] == lengths[-1]
    assert item["finish_reasons"] == {"eos": 4, "stop_string": 4, "length": 4}
    assert item["shard"] is None and report.overlap is None and report.exit_code == 0
    console = Console(record=True, width=140)
    render_inspect(report, console)
    text = console.export_text()
    assert "tiny/teacher" in text and "entries" in text and "token length" in text


def test_inspect_reports_shared_and_conflicting_keys(tmp_path: Path) -> None:
    entries = make_entries(6)
    a = write_artifact(tmp_path / "a", entries[:4])
    b = write_artifact(tmp_path / "b", [*entries[2:3], conflicting(entries[3]), *entries[4:]])
    report = inspect_report([a, b, tmp_path / "missing"])
    found = report.to_json()
    assert found["artifacts"][2]["kind"] == "missing" and report.exit_code == 2
    pair = found["overlap"]["pairs"][0]
    assert (pair["shared"], pair["conflicting"], pair["conflicting_keys"]) == (2, 1, [entries[3].key])
    assert found["overlap"]["provenance"] == "identical" and found["overlap"]["union"] == 6
    console = Console(record=True, width=200)
    render_inspect(report, console)
    assert "overlap" in console.export_text()


def test_inspect_shows_recorded_values_that_look_like_markup_as_they_are(tmp_path: Path) -> None:
    from support.storage_helpers import resolved_for

    resolved = resolved_for(tmp_path / "a", PROVENANCE, None)
    resolved["runtime"] = {"determinism": {"tensor_parallel_size": "[/x]", "gpu_name": "[b]GPU[/b]"}}
    out = write_artifact(tmp_path / "a", make_entries(2), resolved_config=resolved)
    console = Console(record=True, width=200)
    render_inspect(inspect_report([out]), console)  # "[/x]" closed no tag: rich refused it as markup before
    text = console.export_text()
    assert "tensor parallel [/x]" in text and "GPU [b]GPU[/b] (compute" in text


def test_verify_report_lists_problems_per_artifact(tmp_path: Path) -> None:
    a = write_artifact(tmp_path / "a", make_entries(3))
    verified = verify_report([a, tmp_path / "nope"], progress=verify_progress)
    lines = verified.lines()
    assert verified.exit_code == 2  # a path that is not an artifact is bad input
    assert lines[0] == f"OK   {a}" and lines[1].startswith("FAIL") and "does not exist" in lines[1]
    assert [r["status"] for r in verified.to_json()["results"]] == ["ok", "bad_input"]
    assert issubclass(ShardError, GencacheError)


def test_a_shard_set_routes_each_key_to_its_shard(tmp_path: Path) -> None:

    entries = make_entries(40)
    paths = make_shards(tmp_path / "out", 3, entries)
    for mix in (open_caches(tmp_path / "out"), open_caches(list(reversed(paths)))):
        assert isinstance(mix, MultiCacheReader)
        assert list(mix) == sorted(e.key for e in entries) and len(mix) == 40
        for e in entries:
            assert mix[e.key].texts == e.texts
            assert mix.metadata(e.key) is not None
        missing = "f" * 64
        assert missing not in mix and mix.get(missing) is None and "g" * 64 not in mix
    mixed = open_caches([*paths, write_artifact(tmp_path / "extra", make_entries(2, start=90))])
    assert len(mixed) == 42 and all(e.key in mixed for e in entries)


def test_inspect_of_a_shard_set_details_every_shard_and_keeps_whole_paths(tmp_path: Path) -> None:
    from gencache.cli.render import make_console

    entries = make_entries(9)
    base = tmp_path / ("a-long-output-directory-name-" * 3)
    paths = [write_shard(base, index, 3, entries, "d" * 64) for index in range(3)]
    other = write_artifact(tmp_path / ("another-long-output-directory-name-" * 3), entries[:2])
    report = inspect_report([base, other])
    sink = io.StringIO()
    render_inspect(report, make_console(file=sink))
    text = sink.getvalue()
    for path in paths:
        assert str(path) in text  # one detail table per shard, titled by its whole path
    assert str(other) in text and "…" not in text


def test_an_unsuffixed_shard_set_exports_every_shard(tmp_path: Path) -> None:
    from gencache.run.export import export

    entries = make_entries(9)
    base = tmp_path / "out"
    for index in range(3):
        write_shard(base, index, 3, entries, "d" * 64)
    result = export(base, tmp_path / "out.jsonl", format="jsonl", prompts=False)
    lines = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert result.records == len(lines) == 9
    assert sorted(json.loads(line)["key"] for line in lines) == sorted(e.key for e in entries)


@pytest.mark.parametrize("item", [b"/cache", None, 3])
def test_open_caches_names_a_path_of_the_wrong_type(item: object) -> None:
    with pytest.raises(TypeError, match=r"is not a str or os\.PathLike path"):
        open_caches(["/nowhere", item])  # type: ignore[list-item]
