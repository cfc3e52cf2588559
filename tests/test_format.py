"""Pure format-3 logic: the header budget, names, provenance, digests, summary and manifest/header checks."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gencache.artifact.header import build_header, header_capacity, length_prefix, read_length_prefix
from gencache.artifact.manifest import (
    build_summary,
    check_manifest,
    check_provenance,
    content_digest,
    iter_manifest_bytes,
    json_file_bytes,
    make_provenance,
    provenance_digest,
)
from gencache.artifact.names import (
    MAX_HEADER_BYTES,
    Record,
    make_shard_info,
    parse_shard_dir_name,
    shard_dir_name,
    shard_of,
    tensor_name,
)
from gencache.core.canonical import canonical_bytes, json_digest
from gencache.core.errors import FormatError, HeaderCapacityError, ShardError
from support.format_reference import header_object, make_record, manifest_object, record_fields
from support.storage_helpers import PROVENANCE, TOKENIZER, key


def records_for(plan: list[list[int]], keys: list[str] | None = None) -> dict[str, Record]:
    """Entry records with the given sequence lengths per entry, offsets laid out back to back."""
    out, cursor = {}, 0
    for i, lengths in enumerate(plan):
        k = keys[i] if keys else key(i)
        out[k] = make_record(cursor, lengths, [bytes(32)] * len(lengths), ["t"] * len(lengths), ["eos"] * len(lengths))
        cursor += 8 * sum(lengths)
    return out


def manifest_bytes(provenance: dict[str, Any], records: dict[str, Record], summary: dict[str, Any]) -> bytes:
    """The whole ``manifest.json`` the encoder streams."""
    return b"".join(iter_manifest_bytes(provenance, records, summary))


# -- header budget ---------------------------------------------------------------------------------------------
@settings(deadline=None, max_examples=200)
@given(
    entries=st.integers(0, 40),
    sequences=st.integers(1, 12),
    max_tokens=st.integers(1, 10**7),
    data=st.data(),
)
def test_header_capacity_bounds_every_header_of_the_plan(
    entries: int, sequences: int, max_tokens: int, data: Any
) -> None:
    capacity = header_capacity(entries, sequences, max_tokens)
    assert capacity % 8 == 0
    plan = [
        data.draw(st.lists(st.integers(1, max_tokens), min_size=1, max_size=sequences), label="lengths")
        for _ in range(entries)
    ]
    keys = data.draw(
        st.lists(st.text("0123456789abcdef", min_size=64, max_size=64), min_size=entries, max_size=entries, unique=True)
    )
    header = build_header(records_for(plan, keys), "f" * 64)
    assert len(header) <= capacity


def test_header_capacity_is_tight_for_the_worst_case() -> None:
    # one tensor of one token: offsets [0, 8] have exactly the digits the formula allows
    header = build_header(records_for([[1]]), "f" * 64)
    assert header_capacity(1, 1, 1) - len(header) < 8
    # all sequences at the maximum length: within a few bytes per tensor of the real header
    plan = [[999] * 3 for _ in range(1000)]
    header = build_header(records_for(plan), "f" * 64)
    capacity = header_capacity(1000, 3, 999)
    assert len(header) <= capacity < len(header) * 1.05


def test_header_capacity_refuses_plans_over_the_safetensors_limit_and_suggests_sharding() -> None:
    assert header_capacity(600_000, 1, 256) <= MAX_HEADER_BYTES
    with pytest.raises(HeaderCapacityError, match=r"--shard I/\d+"):
        header_capacity(800_000, 1, 256)
    with pytest.raises(HeaderCapacityError, match="100,000,000"):
        header_capacity(100_000, 8, 32_768)


def test_the_length_prefix_is_written_and_read_back() -> None:
    assert length_prefix(16) == (16).to_bytes(8, "little")
    with pytest.raises(HeaderCapacityError, match="multiple of 8"):
        length_prefix(12)
    assert read_length_prefix((16).to_bytes(8, "little"), 24) == 16
    for prefix, size in [
        ((12).to_bytes(8, "little"), 100),
        ((0).to_bytes(8, "little"), 100),
        ((64).to_bytes(8, "little"), 40),
        (b"\x01", 1),
    ]:
        with pytest.raises(FormatError):
            read_length_prefix(prefix, size)
    with pytest.raises(FormatError, match="header length"):
        read_length_prefix((MAX_HEADER_BYTES + 8).to_bytes(8, "little"), 10**9)


# -- names -------------------------------------------------------------------------------------------------------
def test_tensor_and_shard_names() -> None:
    assert tensor_name("ab" * 32, 3) == "ab" * 32 + ".3"
    assert shard_dir_name("runs/out", 2, 8) == "runs/out-shard-00002-of-00008"
    assert shard_dir_name("runs/out/", 0, 1) == "runs/out-shard-00000-of-00001"
    assert parse_shard_dir_name("out-shard-00002-of-00008") == ("out", 2, 8)
    assert parse_shard_dir_name("a-shard-x-shard-00000-of-00003") == ("a-shard-x", 0, 3)
    for name in (
        "out",
        "out-shard-2-of-8",
        "out-shard-00008-of-00008",
        "out-shard-00000-of-00000",
        "-shard-00000-of-00001",
    ):
        assert parse_shard_dir_name(name) is None
    for index, count in [(8, 8), (-1, 2), (0, 0), (0, 100_000)]:
        with pytest.raises(ShardError):
            shard_dir_name("out", index, count)
    with pytest.raises(ShardError, match="no name"):
        shard_dir_name("/", 0, 2)
    k = key(5)
    assert shard_of(k, 7) == int(k, 16) % 7
    assert make_shard_info(1, 4, "e" * 64) == {"index": 1, "count": 4, "rule": "key-mod", "run_digest": "e" * 64}


# -- provenance and digests ----------------------------------------------------------------------------------------
def test_provenance_from_a_tokenizer_object_or_state() -> None:
    tok = SimpleNamespace(padding_side="left", pad_token_id=0, eos_token_id=2)
    assert make_provenance("tiny/teacher", "tiny/teacher", "float32", tok) == PROVENANCE
    assert make_provenance("tiny/teacher", "tiny/teacher", "float32", TOKENIZER) == PROVENANCE
    assert list(PROVENANCE) == ["model_path", "tokenizer_path", "dtype", "tokenizer"]
    expected = hashlib.sha256(json.dumps(PROVENANCE, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert provenance_digest(PROVENANCE) == expected


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"model_path": ""}, "model_path"),
        ({"tokenizer_path": 3}, "tokenizer_path"),
        ({"dtype": "fp16"}, "dtype"),
        ({"tokenizer": {**TOKENIZER, "extra": 1}}, "unknown field `extra`"),
        ({"tokenizer": {**TOKENIZER, "pad_token_id": True}}, "pad_token_id"),
        ({"tokenizer": {**TOKENIZER, "eos_token_id": -1}}, "eos_token_id"),
        ({"tokenizer": {**TOKENIZER, "padding_side": "middle"}}, "padding_side"),
        ({"tokenizer": [1]}, "object"),
        ({"store_logits": False}, "unknown field `store_logits`"),
    ],
)
def test_invalid_provenance_is_named(change: dict[str, Any], fragment: str) -> None:
    with pytest.raises(FormatError, match=fragment):
        check_provenance({**PROVENANCE, **change})


def test_content_digest_is_canonical_and_excludes_tensor_names() -> None:
    refs = [{"tensor": "a.0", "dtype": "I64", "shape": [3], "digest": "1" * 64}]
    renamed = [{**refs[0], "tensor": "b.0"}]
    assert content_digest(refs, ["x"], ["eos"]) == content_digest(renamed, ["x"], ["eos"])
    canonical = (
        '{"finish_reasons":["eos"],"sequences":[{"digest":"' + "1" * 64 + '","dtype":"I64","shape":[3]}],"text":["x"]}'
    )
    assert content_digest(refs, ["x"], ["eos"]) == hashlib.sha256(canonical.encode()).hexdigest()
    assert content_digest(refs, ["x"], ["length"]) != content_digest(refs, ["x"], ["eos"])
    assert content_digest(refs, ["y"], ["eos"]) != content_digest(refs, ["x"], ["eos"])


@settings(deadline=None, max_examples=300)
@given(
    shapes=st.lists(st.lists(st.integers(0, 10**12), min_size=1, max_size=2), min_size=1, max_size=3),
    texts=st.lists(st.text(st.characters(exclude_categories=("Cs",))), min_size=1, max_size=3),
    reasons=st.lists(st.sampled_from(["eos", "stop_string", "length", 'q"\\\n']), min_size=1, max_size=3),
    digest=st.text(max_size=70),
)
def test_content_digest_equals_the_canonical_json_digest(
    shapes: list[list[int]], texts: list[str], reasons: list[str], digest: str
) -> None:
    refs = [{"tensor": "x", "dtype": "I64", "shape": shape, "digest": digest} for shape in shapes]
    expected = json_digest(
        {
            "sequences": [{"dtype": "I64", "shape": s, "digest": digest} for s in shapes],
            "text": texts,
            "finish_reasons": reasons,
        }
    )
    assert content_digest(refs, texts, reasons) == expected


def test_content_digest_refuses_a_text_that_is_not_unicode() -> None:
    with pytest.raises(FormatError, match=r"content digest.*surrogate"):
        content_digest([{"dtype": "I64", "shape": [1], "digest": "0" * 64}], ["\ud800"], ["eos"])


def test_json_file_bytes_is_canonical_with_a_newline_and_refuses_what_json_cannot_hold() -> None:
    assert json_file_bytes({"b": [1, "é"], "a": None}) == '{"a":null,"b":[1,"é"]}\n'.encode()
    for bad in ({"x": float("nan")}, {"x": "\ud800"}, {"x": object()}):
        with pytest.raises(FormatError, match="canonical JSON"):
            json_file_bytes(bad)


# -- summary -------------------------------------------------------------------------------------------------------
def test_summary_counts_entries_and_checks_the_callers_numbers() -> None:
    records = records_for([[3, 4], [5]])
    summary = build_summary(records, {"data_configs": [{"index": 0, "samples": 3, "unique": 2}]})
    assert summary == {
        "entries": 2,
        "sequences": 3,
        "tokens": 12,
        "duplicates": 1,
        "finish_reasons": {"eos": 3, "stop_string": 0, "length": 0},
        "data_configs": [{"index": 0, "samples": 3, "unique": 2}],
        "shard": None,
    }
    assert build_summary(records, {})["duplicates"] == 0
    with pytest.raises(FormatError, match="not 2 entries"):
        build_summary(records, {"duplicates": 0, "data_configs": [{"index": 0, "samples": 3, "unique": 3}]})
    with pytest.raises(FormatError, match="per-config unique counts"):
        build_summary(records, {"duplicates": 2, "data_configs": [{"index": 0, "samples": 3, "unique": 2}]})
    # a shard's data_configs and duplicates describe the whole run: its entries are only part of the unique keys
    mine = {k: r for k, r in records_for([[1]] * 12).items() if shard_of(k, 3) == 0}
    run = {"duplicates": 2, "data_configs": [{"index": 0, "samples": 14, "unique": 12}]}
    sharded = build_summary(mine, {**run, "shard": make_shard_info(0, 3, "e" * 64)})
    assert sharded["entries"] == len(mine) < 12 and sharded["duplicates"] == 2
    with pytest.raises(FormatError, match="only 1 unique keys"):
        build_summary(
            mine,
            {
                "duplicates": 0,
                "data_configs": [{"index": 0, "samples": 1, "unique": 1}],
                "shard": make_shard_info(0, 3, "e" * 64),
            },
        )
    with pytest.raises(FormatError, match="needs index 0"):
        build_summary(records, {"data_configs": [{"index": 1, "samples": 3, "unique": 2}]})
    with pytest.raises(FormatError, match="unique <= samples"):
        build_summary(records, {"data_configs": [{"index": 0, "samples": 1, "unique": 2}]})
    wrong_shard = {"shard": make_shard_info(shard_of(key(0), 2) ^ 1, 2, "e" * 64)}
    with pytest.raises(FormatError, match="belongs to shard"):
        build_summary(records_for([[1]]), wrong_shard)


# -- manifest and header checks ------------------------------------------------------------------------------------
def manifest_for(plan: list[list[int]]) -> dict[str, Any]:
    records = records_for(plan)
    return manifest_object(PROVENANCE, records, build_summary(records, {}))


def test_check_manifest_accepts_what_the_writer_builds() -> None:
    manifest = json.loads(json_file_bytes(manifest_for([[2], [3, 1]])))
    checked = check_manifest(manifest)
    assert checked.provenance == PROVENANCE
    assert list(checked.entries) == sorted(checked.entries)


@pytest.mark.parametrize("version", [2, 3.0, True, "3", None, 4])
def test_only_the_integer_format_version_3_is_accepted(version: Any) -> None:
    manifest = manifest_for([[2]])
    manifest["format_version"] = version
    with pytest.raises(FormatError, match="format_version"):
        check_manifest(manifest)


def test_a_manifest_of_another_format_says_so_before_naming_its_fields() -> None:
    manifest = manifest_for([[2]]) | {"format_version": 4, "logits": "logits.safetensors"}
    with pytest.raises(FormatError, match="format_version is 4; this gencache reads format 3 only"):
        check_manifest(manifest)
    with pytest.raises(FormatError, match=r"is not a format-3 manifest: .*logits"):
        check_manifest(manifest | {"format_version": 3})


def test_empty_artifacts_are_valid() -> None:
    manifest = manifest_for([])
    assert check_manifest(json.loads(json_file_bytes(manifest))).entries == {}


# -- the direct serialisers are byte-identical to canonical JSON -------------------------------------------------------
_hex_keys = st.text("0123456789abcdef", min_size=64, max_size=64)
_reasons = st.sampled_from(["eos", "stop_string", "length"])


@st.composite
def _records(draw: Any, max_sequences: int = 13) -> dict[str, Record]:
    """Records as the writer keeps them: keys starting with digits and letters (around ``__metadata__``), up to
    13 sequences (``<key>.10`` sorts before ``<key>.2``), any Unicode text JSON can carry."""
    keys = draw(st.lists(_hex_keys, max_size=8, unique=True))
    records, cursor = {}, 0
    for k in keys:
        lengths = draw(st.lists(st.integers(1, 10**9), min_size=1, max_size=max_sequences))
        digests = [draw(st.binary(min_size=32, max_size=32)) for _ in lengths]
        texts = [draw(st.text(st.characters(exclude_categories=("Cs",)), max_size=20)) for _ in lengths]
        reasons = [draw(_reasons) for _ in lengths]
        records[k] = make_record(cursor, lengths, digests, texts, reasons)
        cursor += 8 * sum(lengths)
    return records


@settings(deadline=None, max_examples=300)
@given(records=_records(), digest=st.text("0123456789abcdef", min_size=64, max_size=64))
def test_build_header_is_the_canonical_json_of_the_header_object(records: dict[str, Record], digest: str) -> None:
    assert build_header(records, digest) == canonical_bytes(header_object(records, digest))


@settings(deadline=None, max_examples=300)
@given(records=_records(), data=st.data())
def test_the_manifest_encoder_is_the_canonical_json_of_the_manifest(records: dict[str, Record], data: Any) -> None:
    caller: dict[str, Any] = {}
    if data.draw(st.booleans(), label="with data_configs"):
        caller = {"data_configs": [{"index": 0, "samples": len(records) + 2, "unique": len(records)}]}
    summary = build_summary(records, caller)
    expected = json_file_bytes(manifest_object(PROVENANCE, records, summary))
    assert manifest_bytes(PROVENANCE, records, summary) == expected
    chunk_bytes = data.draw(st.integers(1, 3000), label="chunk_bytes")
    pieces = list(iter_manifest_bytes(PROVENANCE, records, summary, chunk_bytes=chunk_bytes))
    assert b"".join(pieces) == expected
    assert all(len(piece) >= chunk_bytes for piece in pieces[:-1])  # streamed in pieces of about chunk_bytes
    manifest = check_manifest(json.loads(expected))
    for k, entry in manifest.entries.items():  # the content digests are the ones readers check
        assert entry["content_digest"] == content_digest(entry["sequences"], entry["text"], entry["finish_reasons"])
        assert [ref["digest"] for ref in entry["sequences"]] == [d.hex() for d in record_fields(records[k])[2]]


def test_the_direct_serialisers_escape_texts_and_place_the_metadata_like_json() -> None:
    texts = ['q"\\', "\n\t\r\x08\x0c\x00\x1f\x7f", "é✓\U0001f600", "", "\u2028"]
    keys = ["0" * 64, "9" + "f" * 63, "a" * 64, "f" * 64, "5" * 64]  # around "__metadata__" in sort order
    records = {}
    for i, (k, text) in enumerate(zip(keys, texts, strict=True)):
        if i % 2:
            records[k] = make_record(i * 80, [10, 1], [bytes([i]) * 32] * 2, [text, text + "x"], ["length", "eos"])
        else:
            records[k] = make_record(i * 80, [10], [bytes([i]) * 32], [text], ["stop_string"])
    for subset in ({}, {keys[0]: records[keys[0]]}, {keys[2]: records[keys[2]]}, records):
        assert build_header(subset, "e" * 64) == canonical_bytes(header_object(subset, "e" * 64))
        summary = build_summary(subset, {})
        expected = json_file_bytes(manifest_object(PROVENANCE, subset, summary))
        assert manifest_bytes(PROVENANCE, subset, summary) == expected


def test_records_are_flat_and_round_trip() -> None:
    record = make_record(16, [2, 3], [b"a" * 32, b"b" * 32], ["x", "y"], ["eos", "length"])
    assert record == (16, 2, b"a" * 32, "x", "eos", 3, b"b" * 32, "y", "length")
    assert record_fields(record) == (16, (2, 3), (b"a" * 32, b"b" * 32), ("x", "y"), ("eos", "length"))
    with pytest.raises(ValueError):
        make_record(0, [1, 2], [b"a" * 32], ["x"], ["eos"])


def test_the_encoders_write_these_exact_bytes() -> None:
    """Hand-written golden bytes: metadata between digit and letter keys, escaped texts, two sequences."""
    a, b = "0" * 64, "a" * 64
    records = {
        b: make_record(16, [1, 3], [b"\x11" * 32, b"\x22" * 32], ['é"', "x\n"], ["length", "stop_string"]),
        a: make_record(0, [2], [bytes(32)], ["hi"], ["eos"]),
    }
    assert (
        build_header(records, "e" * 64)
        == (
            f'{{"{a}.0":{{"data_offsets":[0,16],"dtype":"I64","shape":[2]}},'
            f'"__metadata__":{{"format_version":"3","provenance_digest":"{"e" * 64}"}},'
            f'"{b}.0":{{"data_offsets":[16,24],"dtype":"I64","shape":[1]}},'
            f'"{b}.1":{{"data_offsets":[24,48],"dtype":"I64","shape":[3]}}}}'
        ).encode()
    )
    d0, d1, d2 = "00" * 32, "11" * 32, "22" * 32
    content_a = hashlib.sha256(
        f'{{"finish_reasons":["eos"],"sequences":[{{"digest":"{d0}","dtype":"I64","shape":[2]}}],"text":["hi"]}}'.encode()
    ).hexdigest()
    content_b = hashlib.sha256(
        (
            f'{{"finish_reasons":["length","stop_string"],"sequences":[{{"digest":"{d1}","dtype":"I64","shape":[1]}},'
            f'{{"digest":"{d2}","dtype":"I64","shape":[3]}}],"text":["é\\"","x\\n"]}}'
        ).encode()
    ).hexdigest()
    provenance_json = (
        '{"dtype":"float32","model_path":"tiny/teacher","tokenizer":{"eos_token_id":2,"pad_token_id":0,'
        '"padding_side":"left"},"tokenizer_path":"tiny/teacher"}'
    )
    expected = (
        f'{{"entries":{{"{a}":{{"content_digest":"{content_a}","finish_reasons":["eos"],'
        f'"sequences":[{{"digest":"{d0}","dtype":"I64","shape":[2],"tensor":"{a}.0"}}],"text":["hi"]}},'
        f'"{b}":{{"content_digest":"{content_b}","finish_reasons":["length","stop_string"],'
        f'"sequences":[{{"digest":"{d1}","dtype":"I64","shape":[1],"tensor":"{b}.0"}},'
        f'{{"digest":"{d2}","dtype":"I64","shape":[3],"tensor":"{b}.1"}}],"text":["é\\"","x\\n"]}}}},'
        f'"format_version":3,"payload":"cache.safetensors","provenance":{provenance_json},'
        f'"provenance_digest":"{hashlib.sha256(provenance_json.encode()).hexdigest()}","storage":"safetensors",'
        '"summary":{"data_configs":[],"duplicates":0,"entries":2,'
        '"finish_reasons":{"eos":1,"length":1,"stop_string":1},"sequences":3,"shard":null,"tokens":6}}\n'
    ).encode()
    assert manifest_bytes(PROVENANCE, records, build_summary(records, {})) == expected
    entry = json.loads(expected)["entries"][b]
    assert content_digest(entry["sequences"], entry["text"], entry["finish_reasons"]) == content_b


def test_a_header_over_budget_is_a_bad_plan() -> None:
    assert HeaderCapacityError.exit_code == 2
    assert not issubclass(HeaderCapacityError, OSError)


def test_the_format_keys_and_kwargs_modules_are_pure() -> None:
    import subprocess
    import sys

    code = (
        "import sys, gencache.artifact.names, gencache.artifact.header, "
        "gencache.artifact.manifest, gencache.core.canonical, gencache.data.keys, "
        "gencache.config.kwargs\n"
        "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'numpy') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "[]"
