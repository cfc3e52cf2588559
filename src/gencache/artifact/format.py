"""Artifact format 3: names, the header budget, header and manifest building and checking (pure, no I/O).

An artifact directory holds exactly three regular files:

``cache.safetensors``
    a standard safetensors file: u64 little-endian header length ``H`` (the reserved capacity, a multiple of 8),
    ``H`` bytes of canonical header JSON padded with spaces, then one I64 1-D tensor per answer sequence, named
    ``<key>.<i>``, back to back in generation order. ``__metadata__`` is
    ``{"format_version": "3", "provenance_digest": <hex>}``.
``manifest.json``
    canonical JSON plus a newline: provenance, per-entry tensor references, texts, finish reasons and digests,
    and an informational summary.
``resolved_config.json``
    canonical JSON plus a newline: provenance for humans; never a compatibility gate.

Everything here works on values and bytes so it can be unit-tested without files; :mod:`gencache.artifact.writer` and
:mod:`gencache.artifact.reader` do the I/O. Nothing here imports torch.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gencache.canonical import canonical_bytes, canonical_json, is_int, is_sha256_hex, json_digest, sha256_hex
from gencache.errors import ConfigError, FormatError, HeaderCapacityError, ShardError
from gencache.tokenizer import TOKENIZER_STATE_FIELDS, tokenizer_state

FORMAT_VERSION = 3
STORAGE = "safetensors"
PAYLOAD_NAME = "cache.safetensors"
MANIFEST_NAME = "manifest.json"
RESOLVED_NAME = "resolved_config.json"
ARTIFACT_FILES = frozenset({PAYLOAD_NAME, MANIFEST_NAME, RESOLVED_NAME})

MAX_HEADER_BYTES = 100_000_000
"""The safetensors limit on the header length (``MAX_HEADER_SIZE`` in safetensors' ``tensor.rs``)."""

LENGTH_PREFIX_BYTES = 8
TOKEN_DTYPE = "I64"
TOKEN_BYTES = 8
FINISH_REASONS = ("eos", "stop_string", "length")
DTYPES = ("bfloat16", "float16", "float32")
PADDING_SIDES = ("left", "right")
PROVENANCE_FIELDS = ("model_path", "tokenizer_path", "dtype", "tokenizer")
MANIFEST_FIELDS = frozenset(
    {"format_version", "storage", "payload", "provenance", "provenance_digest", "entries", "summary"}
)
ENTRY_FIELDS = frozenset({"sequences", "text", "finish_reasons", "content_digest"})
TENSOR_REF_FIELDS = frozenset({"tensor", "dtype", "shape", "digest"})
HEADER_TENSOR_FIELDS = frozenset({"dtype", "shape", "data_offsets"})
SUMMARY_FIELDS = frozenset({"entries", "sequences", "tokens", "duplicates", "finish_reasons", "data_configs", "shard"})
CALLER_SUMMARY_FIELDS = frozenset({"duplicates", "data_configs", "shard"})
DATA_CONFIG_SUMMARY_FIELDS = frozenset({"index", "samples", "unique"})
SHARD_FIELDS = frozenset({"index", "count", "rule", "run_digest"})
SHARD_RULE = "key-mod"
MAX_SHARDS = 99_999

# json.dumps(..., ensure_ascii=False) encodes strings with this function; content_digest relies on it.
_encode_json_string: Any = json.encoder.encode_basestring  # type: ignore[attr-defined]
_SHARD_SUFFIX_RE = re.compile(r"^(?P<base>.+)-shard-(?P<index>\d{5})-of-(?P<count>\d{5})\Z")


def is_key(value: object) -> bool:
    """True for a semantic key: 64 lowercase hexadecimal characters."""
    return is_sha256_hex(value)


def _digits(value: int) -> int:
    return len(str(value))


# -- names -------------------------------------------------------------------------------------------------
def tensor_name(key: str, index: int) -> str:
    """The payload tensor holding answer sequence ``index`` of entry ``key``: ``"<key>.<index>"``."""
    return f"{key}.{index}"


def shard_dir_name(output_dir: str, index: int, count: int) -> str:
    """``"<output_dir>-shard-<I:05d>-of-<N:05d>"``; a trailing ``/`` of ``output_dir`` is ignored."""
    base = str(output_dir).rstrip("/")
    if not base:
        raise ShardError(f"output_dir {output_dir!r} has no name to suffix with a shard; choose a directory name.")
    _check_shard_numbers(index, count, where="shard")
    return f"{base}-shard-{index:05d}-of-{count:05d}"


def parse_shard_dir_name(name: str) -> tuple[str, int, int] | None:
    """``(base, index, count)`` of a shard directory name made by :func:`shard_dir_name`, or None."""
    match = _SHARD_SUFFIX_RE.match(name)
    if match is None:
        return None
    index, count = int(match["index"]), int(match["count"])
    if count < 1 or index >= count:
        return None
    return match["base"], index, count


def shard_of(key: str, count: int) -> int:
    """The shard (``key-mod`` rule) that owns ``key`` in a run split ``count`` ways."""
    return int(key, 16) % count


def _check_shard_numbers(index: object, count: object, *, where: str) -> None:
    if not is_int(count) or not 1 <= count <= MAX_SHARDS:  # type: ignore[operator]
        raise ShardError(f"{where}: shard count must be an integer from 1 to {MAX_SHARDS}, got {count!r}.")
    if not is_int(index) or not 0 <= index < count:  # type: ignore[operator]
        raise ShardError(f"{where}: shard index must be an integer from 0 to {count - 1}, got {index!r}.")  # type: ignore[operator]


def make_shard_info(index: int, count: int, run_digest: str) -> dict[str, Any]:
    """The ``summary.shard`` object of a sharded run's manifest."""
    _check_shard_numbers(index, count, where="shard")
    if not is_sha256_hex(run_digest):
        raise ShardError(f"shard run_digest must be a lowercase SHA-256 hex digest, got {run_digest!r}.")
    return {"index": index, "count": count, "rule": SHARD_RULE, "run_digest": run_digest}


# -- header budget -----------------------------------------------------------------------------------------
_METADATA_TEMPLATE = {"__metadata__": {"format_version": str(FORMAT_VERSION), "provenance_digest": "0" * 64}}
# Everything of one tensor's header member except the variable-width numbers and the name's characters:
# "<name>":{"data_offsets":[<start>,<end>],"dtype":"I64","shape":[<n>]} and the "," that separates members.
_TENSOR_MEMBER_FIXED = len(canonical_json({"": {"data_offsets": [0, 0], "dtype": TOKEN_DTYPE, "shape": [0]}})) - 2 - 3
_TENSOR_MEMBER_FIXED += 1  # the separating comma


def header_capacity(entries: int, sequences_per_entry: int, max_new_tokens: int) -> int:
    """The header reservation for a run of ``entries`` unique keys, each with ``sequences_per_entry`` sequences
    of at most ``max_new_tokens`` tokens.

    A fixed formula: the length of the metadata plus, per tensor, the longest header member that tensor can
    have (a 64-hex key, the largest sequence index, offsets up to the largest possible payload and the largest
    shape), rounded up to a multiple of 8. It bounds the real header for any keys and lengths of that plan.
    Raises :class:`HeaderCapacityError` (suggesting ``--shard``) when it exceeds the safetensors limit.
    """
    for name, value, low in (
        ("entries", entries, 0),
        ("sequences_per_entry", sequences_per_entry, 1),
        ("max_new_tokens", max_new_tokens, 1),
    ):
        if not is_int(value) or value < low:
            raise ConfigError(f"header_capacity: {name} must be an integer >= {low}, got {value!r}.")
    tensors = entries * sequences_per_entry
    max_payload = tensors * max_new_tokens * TOKEN_BYTES
    name_chars = 64 + 1 + _digits(sequences_per_entry - 1)
    member = _TENSOR_MEMBER_FIXED + name_chars + 2 * _digits(max_payload) + _digits(max_new_tokens)
    needed = len(canonical_json(_METADATA_TEMPLATE)) + tensors * member
    capacity = -(-needed // 8) * 8
    if capacity > MAX_HEADER_BYTES:
        shards = math.ceil(capacity * 1.25 / MAX_HEADER_BYTES)
        raise HeaderCapacityError(
            f"The safetensors header for {entries:,} entries x {sequences_per_entry} sequences x {max_new_tokens} "
            f"tokens needs up to {capacity:,} bytes, over the {MAX_HEADER_BYTES:,}-byte safetensors limit; "
            f"split the run with --shard I/{shards} (or more shards)."
        )
    return capacity


def _check_capacity(capacity: object) -> int:
    if not is_int(capacity) or capacity <= 0 or capacity % 8 or capacity > MAX_HEADER_BYTES:  # type: ignore[operator]
        raise HeaderCapacityError(
            f"Header capacity must be a positive multiple of 8 up to {MAX_HEADER_BYTES:,} bytes, got {capacity!r}; "
            "compute it with gencache.artifact.format.header_capacity."
        )
    return capacity  # type: ignore[return-value]


# -- provenance --------------------------------------------------------------------------------------------
def _check_tokenizer_state(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise FormatError(f"{where} must be an object {{padding_side, pad_token_id, eos_token_id}}.")
    keys = set(value)
    if keys != set(TOKENIZER_STATE_FIELDS):
        raise FormatError(
            f"{where} must have exactly the fields {', '.join(TOKENIZER_STATE_FIELDS)}, got {sorted(map(str, keys))}."
        )
    if value["padding_side"] not in PADDING_SIDES:
        raise FormatError(f"{where}.padding_side must be 'left' or 'right', got {value['padding_side']!r}.")
    for field in ("pad_token_id", "eos_token_id"):
        token = value[field]
        if token is not None and (not is_int(token) or token < 0):
            raise FormatError(f"{where}.{field} must be a non-negative integer or null, got {token!r}.")
    return {field: value[field] for field in TOKENIZER_STATE_FIELDS}


def check_provenance(value: object, where: str = "provenance") -> dict[str, Any]:
    """Validate a provenance object and return a plain copy: exactly model_path, tokenizer_path, dtype, tokenizer."""
    if not isinstance(value, Mapping):
        raise FormatError(f"{where} must be an object.")
    keys = set(value)
    if keys != set(PROVENANCE_FIELDS):
        extra = sorted(map(str, keys - set(PROVENANCE_FIELDS)))
        missing = sorted(set(PROVENANCE_FIELDS) - keys)
        raise FormatError(
            f"{where} must have exactly {', '.join(PROVENANCE_FIELDS)} (missing {missing}, extra {extra})."
        )
    for field in ("model_path", "tokenizer_path"):
        if not isinstance(value[field], str) or not value[field]:
            raise FormatError(f"{where}.{field} must be a non-empty string, got {value[field]!r}.")
    if value["dtype"] not in DTYPES:
        raise FormatError(f"{where}.dtype must be one of {', '.join(DTYPES)}, got {value['dtype']!r}.")
    return {
        "model_path": value["model_path"],
        "tokenizer_path": value["tokenizer_path"],
        "dtype": value["dtype"],
        "tokenizer": _check_tokenizer_state(value["tokenizer"], f"{where}.tokenizer"),
    }


def make_provenance(model_path: str, tokenizer_path: str, dtype: str, tokenizer: Any) -> dict[str, Any]:
    """The provenance an artifact records: teacher, tokenizer path and state, dtype (validated).

    ``tokenizer`` is a state mapping ``{padding_side, pad_token_id, eos_token_id}`` or a tokenizer object
    (its state is read with :func:`gencache.tokenizer.tokenizer_state`).
    """
    state = dict(tokenizer) if isinstance(tokenizer, Mapping) else tokenizer_state(tokenizer)
    return check_provenance(
        {"model_path": model_path, "tokenizer_path": tokenizer_path, "dtype": dtype, "tokenizer": state}
    )


def provenance_digest(provenance: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the provenance."""
    return json_digest(dict(provenance))


# -- entries -----------------------------------------------------------------------------------------------
def content_digest(
    sequence_refs: Sequence[Mapping[str, Any]], texts: Sequence[str], finish_reasons: Sequence[str]
) -> str:
    """SHA-256 of canonical ``{sequences: [{dtype, shape, digest}], text, finish_reasons}`` (tensor names excluded).

    The canonical JSON of this fixed shape is assembled directly (the same bytes as :func:`canonical_json`, which
    a test checks): finalize and first reads compute one per entry. Text that cannot be encoded (a lone
    surrogate read from a damaged manifest) gives a digest no entry can have.
    """
    encode = _encode_json_string
    sequences = []
    for ref in sequence_refs:
        dtype, shape, digest = ref["dtype"], ref["shape"], ref["digest"]
        if (
            type(dtype) is not str
            or type(digest) is not str
            or type(shape) not in (list, tuple)
            or any(type(n) is not int for n in shape)
        ):
            return _content_digest_slow(sequence_refs, texts, finish_reasons)
        sequences.append(f'{{"digest":{encode(digest)},"dtype":{encode(dtype)},"shape":[{",".join(map(str, shape))}]}}')
    if any(type(t) is not str for t in texts) or any(type(r) is not str for r in finish_reasons):
        return _content_digest_slow(sequence_refs, texts, finish_reasons)
    document = (
        f'{{"finish_reasons":[{",".join(map(encode, finish_reasons))}],"sequences":[{",".join(sequences)}],'
        f'"text":[{",".join(map(encode, texts))}]}}'
    )
    try:
        return sha256_hex(document.encode("utf-8"))
    except UnicodeEncodeError:
        return "not-encodable"


def _content_digest_slow(
    sequence_refs: Sequence[Mapping[str, Any]], texts: Sequence[Any], finish_reasons: Sequence[Any]
) -> str:
    try:
        return json_digest(
            {
                "sequences": [
                    {"dtype": ref["dtype"], "shape": list(ref["shape"]), "digest": ref["digest"]}
                    for ref in sequence_refs
                ],
                "text": list(texts),
                "finish_reasons": list(finish_reasons),
            }
        )
    except (TypeError, ValueError):
        return "not-encodable"


Record = tuple[Any, ...]
"""What the writer keeps of one appended entry, flat so that it is one small tuple: ``(start, n_0, digest_0,
text_0, reason_0, n_1, digest_1, text_1, reason_1, ...)``. ``start`` is the offset of the entry's first sequence
relative to the data start (an entry's sequences are contiguous, in order); per sequence: its token count, the raw
32-byte SHA-256 of its bytes, its text and its finish reason. Build one with :func:`make_record`."""

RECORD_STRIDE = 4


def make_record(
    start: int, lengths: Sequence[int], digests: Sequence[bytes], texts: Sequence[str], reasons: Sequence[str]
) -> Record:
    """The flat :data:`Record` of one entry."""
    flat: list[Any] = [start]
    for fields in zip(lengths, digests, texts, reasons, strict=True):
        flat += fields
    return tuple(flat)


def record_fields(
    record: Record,
) -> tuple[int, tuple[int, ...], tuple[bytes, ...], tuple[str, ...], tuple[str, ...]]:
    """``(start, lengths, digests, texts, finish_reasons)`` of a :data:`Record`."""
    return record[0], record[1::4], record[2::4], record[3::4], record[4::4]


def _record_refs(key: str, record: Record) -> list[dict[str, Any]]:
    """The manifest's ``sequences`` list of one entry."""
    _, lengths, digests, _, _ = record_fields(record)
    return [
        {"tensor": tensor_name(key, i), "dtype": TOKEN_DTYPE, "shape": [n], "digest": digest.hex()}
        for i, (n, digest) in enumerate(zip(lengths, digests, strict=True))
    ]


def _manifest_entry(key: str, record: Record) -> dict[str, Any]:
    """The manifest's object for one entry (the reference for :func:`build_manifest_bytes`)."""
    refs = _record_refs(key, record)
    _, _, _, texts, reasons = record_fields(record)
    return {
        "sequences": refs,
        "text": list(texts),
        "finish_reasons": list(reasons),
        "content_digest": content_digest(refs, texts, reasons),
    }


def header_object(records: Mapping[str, Record], provenance_digest: str) -> dict[str, Any]:
    """The header as an object (the reference for :func:`build_header`, which serialises it directly)."""
    header: dict[str, Any] = {
        "__metadata__": {"format_version": str(FORMAT_VERSION), "provenance_digest": provenance_digest}
    }
    for key, record in records.items():
        start, lengths, _, _, _ = record_fields(record)
        for i, n in enumerate(lengths):
            header[tensor_name(key, i)] = {
                "data_offsets": [start, start + n * TOKEN_BYTES],
                "dtype": TOKEN_DTYPE,
                "shape": [n],
            }
            start += n * TOKEN_BYTES
    return header


def _sorted_indices(count: int) -> Sequence[int]:
    """Sequence indices in the order canonical JSON sorts ``<key>.<i>`` names ("10" before "2")."""
    return range(count) if count <= 10 else sorted(range(count), key=str)


def _check_record_keys(keys: Sequence[str]) -> None:
    """Every key is 64 lowercase hex characters (checked in bulk: one join, one hex round trip)."""
    try:
        joined = "".join(keys)
        valid = set(map(len, keys)) <= {64} and bytes.fromhex(joined).hex() == joined
    except (TypeError, ValueError):
        valid = False
    if not valid:
        bad = next((k for k in keys if not is_key(k)), None)
        raise FormatError(f"Entry key {bad!r} is not a 64-character lowercase hex semantic key.")


def sorted_record_keys(records: Mapping[str, Record]) -> list[str]:
    """The entry keys in manifest and header order, each checked to be a semantic key."""
    keys = sorted(records)
    _check_record_keys(keys)
    return keys


def build_header(
    records: Mapping[str, Record], provenance_digest: str, *, sorted_keys: Sequence[str] | None = None
) -> bytes:
    """The canonical header JSON (unpadded) for the appended entries: the bytes of
    ``canonical_bytes(header_object(records, provenance_digest))``, assembled directly (a test checks identity).

    Keys must be semantic keys (checked): hex, so no name needs escaping and ``"__metadata__"`` sorts between the
    keys that start with a digit and those that start with a letter. ``sorted_keys`` (from
    :func:`sorted_record_keys`) spares a caller that also builds the manifest a second sort and check.
    """
    keys = sorted_record_keys(records) if sorted_keys is None else sorted_keys
    meta = canonical_json({"format_version": str(FORMAT_VERSION), "provenance_digest": provenance_digest})
    at = bisect.bisect_left(keys, "__metadata__")
    parts: list[str] = []  # members written out with TOKEN_DTYPE "I64" and TOKEN_BYTES 8 (checked by the tests)
    append = parts.append
    for position, key in enumerate(keys):
        if position == at:
            append(f'"__metadata__":{meta}')
        record = records[key]
        if len(record) == 5:  # one sequence
            start, n = record[0], record[1]
            append(f'"{key}.0":{{"data_offsets":[{start},{start + n * 8}],"dtype":"I64","shape":[{n}]}}')
            continue
        if len(record) % RECORD_STRIDE != 1:
            raise FormatError(f"Entry {key} has a record of {len(record)} fields.")
        start, lengths = record[0], record[1::4]
        starts = []
        for n in lengths:
            starts.append(start)
            start += n * 8
        for i in _sorted_indices(len(lengths)):
            s, n = starts[i], lengths[i]
            append(f'"{key}.{i}":{{"data_offsets":[{s},{s + n * 8}],"dtype":"I64","shape":[{n}]}}')
    if at == len(keys):
        append(f'"__metadata__":{meta}')
    return ("{" + ",".join(parts) + "}").encode("utf-8")


def pad_header(header_json: bytes, capacity: int) -> bytes:
    """``header_json`` padded with spaces to ``capacity`` bytes; :class:`HeaderCapacityError` when it does not fit."""
    capacity = _check_capacity(capacity)
    if len(header_json) > capacity:
        raise HeaderCapacityError(
            f"The safetensors header needs {len(header_json):,} bytes but only {capacity:,} were reserved; "
            "reserve header_capacity(entries, sequences_per_entry, max_new_tokens) bytes for the "
            "run, or split it with --shard."
        )
    return header_json + b" " * (capacity - len(header_json))


def length_prefix(capacity: int) -> bytes:
    """The 8-byte little-endian header length field."""
    return _check_capacity(capacity).to_bytes(LENGTH_PREFIX_BYTES, "little")


# -- summary -----------------------------------------------------------------------------------------------
def _check_data_configs(value: object, where: str) -> list[dict[str, int]]:
    if not isinstance(value, list):
        raise FormatError(f"{where} must be a list of {{index, samples, unique}}.")
    out = []
    for position, item in enumerate(value):
        here = f"{where}[{position}]"
        if not isinstance(item, Mapping) or set(item) != DATA_CONFIG_SUMMARY_FIELDS:
            raise FormatError(f"{here} must be an object with exactly index, samples, unique.")
        if item["index"] != position or not is_int(item["index"]):
            raise FormatError(f"{here}.index must be {position}, got {item['index']!r}.")
        samples, unique = item["samples"], item["unique"]
        if not is_int(samples) or samples < 0 or not is_int(unique) or not 0 <= unique <= samples:
            raise FormatError(
                f"{here} needs integers 0 <= unique <= samples, got unique={unique!r} samples={samples!r}."
            )
        out.append({"index": position, "samples": samples, "unique": unique})
    return out


def check_shard_info(value: object, where: str = "summary.shard") -> dict[str, Any] | None:
    """Validate ``summary.shard``: null or ``{index, count, rule: "key-mod", run_digest}``."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != SHARD_FIELDS:
        raise FormatError(f"{where} must be null or an object with exactly index, count, rule, run_digest.")
    if value["rule"] != SHARD_RULE:
        raise FormatError(f"{where}.rule must be {SHARD_RULE!r}, got {value['rule']!r}.")
    try:
        return make_shard_info(value["index"], value["count"], value["run_digest"])
    except ShardError as error:
        raise FormatError(f"{where}: {error}") from error


def build_summary(records: Mapping[str, Record], caller: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest summary: counts computed from the entries plus the caller's duplicates, data_configs, shard.

    ``data_configs`` and ``duplicates`` describe the whole run's samples (for a shard too): ``duplicates`` is the
    number of samples whose key repeats an earlier one, so ``sum(samples) - duplicates`` is the run's unique keys.
    That must equal the entries of an unsharded artifact and be at least the entries of a shard (checked here and
    by the reader). Omitted, ``duplicates`` is inferred for an unsharded artifact (0 without data_configs).
    """
    if not isinstance(caller, Mapping):
        raise FormatError("summary must be an object with duplicates, data_configs and shard.")
    unknown = set(caller) - CALLER_SUMMARY_FIELDS
    if unknown:
        raise FormatError(
            f"summary has unknown fields {sorted(map(str, unknown))}; the caller provides only duplicates, "
            "data_configs and shard (the writer counts the rest)."
        )
    data_configs = _check_data_configs(caller.get("data_configs", []), "summary.data_configs")
    shard = check_shard_info(caller.get("shard"))
    reasons = dict.fromkeys(FINISH_REASONS, 0)
    sequences = tokens = 0
    for record in records.values():
        if len(record) == 5:  # one sequence
            sequences += 1
            tokens += record[1]
            reasons[record[4]] += 1
            continue
        sequences += len(record) // RECORD_STRIDE
        tokens += sum(record[1::4])
        for reason in record[4::4]:
            reasons[reason] += 1
    entries = len(records)
    whole_run = shard is None or shard["count"] == 1
    implied = sum(item["samples"] for item in data_configs) - entries if data_configs and whole_run else 0
    duplicates = caller.get("duplicates", implied)
    if not is_int(duplicates) or duplicates < 0:
        raise FormatError(f"summary.duplicates must be a non-negative integer, got {duplicates!r}.")
    problem = summary_inconsistency(entries, duplicates, data_configs, shard)
    if problem:
        raise FormatError(f"summary is inconsistent: {problem}.")
    summary = {
        "entries": entries,
        "sequences": sequences,
        "tokens": tokens,
        "duplicates": duplicates,
        "finish_reasons": reasons,
        "data_configs": data_configs,
        "shard": shard,
    }
    if shard is not None:
        _check_shard_membership(records, shard, "summary.shard")
    return summary


def summary_inconsistency(
    entries: int, duplicates: int, data_configs: Sequence[Mapping[str, int]], shard: Mapping[str, Any] | None
) -> str | None:
    """What is inconsistent between the entry count and the run's sample counts, or None."""
    if not data_configs:
        return None
    samples = sum(item["samples"] for item in data_configs)
    unique_keys = samples - duplicates
    if unique_keys < max(item["unique"] for item in data_configs) or unique_keys > sum(
        item["unique"] for item in data_configs
    ):
        return (
            f"{samples} samples with {duplicates} duplicates leave {unique_keys} unique keys, which the per-config "
            "unique counts cannot produce"
        )
    if shard is None or shard["count"] == 1:
        if unique_keys != entries:
            return (
                f"{samples} samples with {duplicates} duplicates make {unique_keys} unique keys, not {entries} entries"
            )
    elif unique_keys < entries:
        return f"a shard holds {entries} entries but the run has only {unique_keys} unique keys"
    return None


def _check_shard_membership(keys: Iterable[str], shard: Mapping[str, Any], where: str) -> None:
    for key in keys:
        if shard_of(key, shard["count"]) != shard["index"]:
            raise FormatError(
                f"{where} says shard {shard['index']} of {shard['count']} but key {key} belongs to shard "
                f"{shard_of(key, shard['count'])} (rule key-mod)."
            )


def build_manifest(
    provenance: Mapping[str, Any], records: Mapping[str, Record], summary: Mapping[str, Any]
) -> dict[str, Any]:
    """The manifest object (SPEC section 6); :func:`build_manifest_bytes` serialises the same thing directly."""
    checked = check_provenance(provenance)
    return {
        "format_version": FORMAT_VERSION,
        "storage": STORAGE,
        "payload": PAYLOAD_NAME,
        "provenance": checked,
        "provenance_digest": provenance_digest(checked),
        "entries": {key: _manifest_entry(key, record) for key, record in records.items()},
        "summary": dict(summary),
    }


def json_file_bytes(value: Any) -> bytes:
    """Canonical JSON plus a newline: the bytes of ``manifest.json`` and ``resolved_config.json``."""
    try:
        return canonical_bytes(value) + b"\n"
    except (TypeError, ValueError) as error:  # UnicodeEncodeError is a ValueError
        raise FormatError(f"Cannot serialise to canonical JSON: {error}.") from error


MANIFEST_CHUNK_BYTES = 1 << 20


def iter_manifest_bytes(
    provenance: Mapping[str, Any],
    records: Mapping[str, Record],
    summary: Mapping[str, Any],
    *,
    chunk_bytes: int = MANIFEST_CHUNK_BYTES,
    sorted_keys: Sequence[str] | None = None,
) -> Iterator[bytes]:
    """``json_file_bytes(build_manifest(provenance, records, summary))`` in pieces of about ``chunk_bytes`` bytes,
    assembled directly (a test checks identity), so a writer can stream it without holding the whole file.

    Each entry's texts are JSON-encoded once and shared by its manifest object and its content-digest document,
    whose fixed shapes are written out here; the small provenance and summary go through :func:`canonical_json`.
    The keys, the provenance and the summary are checked before the first piece is yielded (the keys unless
    ``sorted_keys`` from :func:`sorted_record_keys` is given).
    """
    keys = sorted_record_keys(records) if sorted_keys is None else sorted_keys
    checked = check_provenance(provenance)
    encode = _encode_json_string
    try:
        tail = (
            f'}},"format_version":{FORMAT_VERSION},"payload":{encode(PAYLOAD_NAME)},'
            f'"provenance":{canonical_json(checked)},"provenance_digest":{encode(provenance_digest(checked))},'
            f'"storage":{encode(STORAGE)},"summary":{canonical_json(dict(summary))}}}\n'
        ).encode()
    except (TypeError, ValueError) as error:  # UnicodeEncodeError is a ValueError
        raise FormatError(f"Cannot serialise to canonical JSON: {error}.") from error
    sha256 = hashlib.sha256
    reason_json: dict[str, str] = {}
    parts: list[bytes] = [b'{"entries":{']
    append = parts.append
    size = 0
    for position, key in enumerate(keys):
        record = records[key]
        try:
            if len(record) == 5:  # one sequence
                _, n, digest, text, reason = record
                reasons_json = reason_json.get(reason)
                if reasons_json is None:
                    reasons_json = reason_json[reason] = encode(reason)
                texts_json = encode(text)
                core = f'{{"digest":"{digest.hex()}","dtype":"I64","shape":[{n}]'
                content = f"{core}}}"
                refs = f'{core},"tensor":"{key}.0"}}'
            else:
                if len(record) % RECORD_STRIDE != 1:
                    raise FormatError(f"Entry {key} has a record of {len(record)} fields.")
                reasons_json = ",".join(map(encode, record[4::4]))
                texts_json = ",".join(map(encode, record[3::4]))
                cores = [
                    f'{{"digest":"{digest.hex()}","dtype":"I64","shape":[{n}]'
                    for n, digest in zip(record[1::4], record[2::4], strict=True)
                ]
                content = ",".join([f"{core}}}" for core in cores])
                refs = ",".join([f'{core},"tensor":"{key}.{i}"}}' for i, core in enumerate(cores)])
            document = f'{{"finish_reasons":[{reasons_json}],"sequences":[{content}],"text":[{texts_json}]}}'
            digest_hex = sha256(document.encode("utf-8")).hexdigest()
            member = (
                f'{"," if position else ""}"{key}":{{"content_digest":"{digest_hex}","finish_reasons":[{reasons_json}],'
                f'"sequences":[{refs}],"text":[{texts_json}]}}'.encode()
            )
        except (TypeError, ValueError, AttributeError) as error:  # UnicodeEncodeError is a ValueError
            if isinstance(error, FormatError):
                raise
            raise FormatError(f"Cannot serialise entry {key} to canonical JSON: {error}.") from error
        append(member)
        size += len(member)
        if size >= chunk_bytes:
            yield b"".join(parts)
            parts.clear()
            size = 0
    append(tail)
    yield b"".join(parts)


def build_manifest_bytes(
    provenance: Mapping[str, Any], records: Mapping[str, Record], summary: Mapping[str, Any]
) -> bytes:
    """The bytes of ``manifest.json``: :func:`iter_manifest_bytes` joined."""
    return b"".join(iter_manifest_bytes(provenance, records, summary))


# -- checking what was read --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Manifest:
    """A checked manifest: the raw object plus the fields readers need."""

    raw: dict[str, Any]
    provenance: dict[str, Any]
    provenance_digest: str
    entries: dict[str, dict[str, Any]]
    summary: dict[str, Any]


def check_manifest(value: object) -> Manifest:
    """Every structural check of a parsed manifest that needs no payload (content digests excluded: lazy).

    Raises :class:`FormatError` naming the offending field.
    """
    if not isinstance(value, dict):
        raise FormatError("manifest.json must hold a JSON object.")
    keys = set(value)
    if keys != MANIFEST_FIELDS:
        raise FormatError(
            f"manifest.json must have exactly the fields {', '.join(sorted(MANIFEST_FIELDS))} "
            f"(missing {sorted(MANIFEST_FIELDS - keys)}, extra {sorted(map(str, keys - MANIFEST_FIELDS))})."
        )
    version = value["format_version"]
    if type(version) is not int or version != FORMAT_VERSION:
        raise FormatError(
            f"manifest.json format_version is {version!r}; this gencache reads format {FORMAT_VERSION} only "
            "(regenerate the artifact with this version)."
        )
    if value["storage"] != STORAGE:
        raise FormatError(f"manifest.json storage must be {STORAGE!r}, got {value['storage']!r}.")
    if value["payload"] != PAYLOAD_NAME:
        raise FormatError(f"manifest.json payload must be {PAYLOAD_NAME!r}, got {value['payload']!r}.")
    provenance = check_provenance(value["provenance"], "manifest.json provenance")
    digest = value["provenance_digest"]
    if digest != provenance_digest(provenance):
        raise FormatError("manifest.json provenance_digest does not match its provenance (the manifest was altered).")
    entries = value["entries"]
    if not isinstance(entries, dict):
        raise FormatError("manifest.json entries must be an object keyed by semantic key.")
    sequences = tokens = 0
    reasons = dict.fromkeys(FINISH_REASONS, 0)
    for key, entry in entries.items():
        n_seq, n_tok = _check_entry(key, entry)
        sequences += n_seq
        tokens += n_tok
        for reason in entry["finish_reasons"]:
            reasons[reason] += 1
    summary = _check_summary(value["summary"], entries, sequences, tokens, reasons)
    return Manifest(value, provenance, digest, entries, summary)


def _check_entry(key: object, entry: object) -> tuple[int, int]:
    if not is_key(key):
        raise FormatError(f"manifest.json entry key {key!r} is not a 64-character lowercase hex semantic key.")
    where = f"manifest.json entries[{key}]"
    if not isinstance(entry, dict) or entry.keys() != ENTRY_FIELDS:
        raise FormatError(f"{where} must be an object with exactly {', '.join(sorted(ENTRY_FIELDS))}.")
    refs, texts, reasons = entry["sequences"], entry["text"], entry["finish_reasons"]
    if not isinstance(refs, list) or not refs:
        raise FormatError(f"{where}.sequences must be a non-empty list.")
    if not isinstance(texts, list) or len(texts) != len(refs) or not all(isinstance(t, str) for t in texts):
        raise FormatError(f"{where}.text must be a list of {len(refs)} strings, one per sequence.")
    if not isinstance(reasons, list) or len(reasons) != len(refs) or not all(r in FINISH_REASONS for r in reasons):
        raise FormatError(f"{where}.finish_reasons must be a list of {len(refs)} of {', '.join(FINISH_REASONS)}.")
    if not is_sha256_hex(entry["content_digest"]):
        raise FormatError(f"{where}.content_digest must be a lowercase SHA-256 hex digest.")
    tokens = 0
    for i, ref in enumerate(refs):
        here = f"{where}.sequences[{i}]"
        if not isinstance(ref, dict) or ref.keys() != TENSOR_REF_FIELDS:
            raise FormatError(f"{here} must be an object with exactly {', '.join(sorted(TENSOR_REF_FIELDS))}.")
        if ref["tensor"] != tensor_name(key, i):  # type: ignore[arg-type]
            raise FormatError(f"{here}.tensor must be {tensor_name(key, i)!r}, got {ref['tensor']!r}.")  # type: ignore[arg-type]
        if ref["dtype"] != TOKEN_DTYPE:
            raise FormatError(f"{here}.dtype must be {TOKEN_DTYPE!r}, got {ref['dtype']!r}.")
        shape = ref["shape"]
        if not isinstance(shape, list) or len(shape) != 1 or not is_int(shape[0]) or shape[0] < 1:
            raise FormatError(f"{here}.shape must be [n] with an integer n >= 1, got {shape!r}.")
        if not is_sha256_hex(ref["digest"]):
            raise FormatError(f"{here}.digest must be a lowercase SHA-256 hex digest.")
        tokens += shape[0]
    return len(refs), tokens


def _check_summary(
    value: object, entries: Mapping[str, Any], sequences: int, tokens: int, reasons: Mapping[str, int]
) -> dict[str, Any]:
    if not isinstance(value, dict) or value.keys() != SUMMARY_FIELDS:
        raise FormatError(f"manifest.json summary must be an object with exactly {', '.join(sorted(SUMMARY_FIELDS))}.")
    counted = {"entries": len(entries), "sequences": sequences, "tokens": tokens, "finish_reasons": dict(reasons)}
    for field, expected in counted.items():
        if value[field] != expected or (field != "finish_reasons" and not is_int(value[field])):
            raise FormatError(f"manifest.json summary.{field} is {value[field]!r} but the entries hold {expected!r}.")
    data_configs = _check_data_configs(value["data_configs"], "manifest.json summary.data_configs")
    duplicates = value["duplicates"]
    if not is_int(duplicates) or duplicates < 0:
        raise FormatError(f"manifest.json summary.duplicates must be a non-negative integer, got {duplicates!r}.")
    shard = check_shard_info(value["shard"], "manifest.json summary.shard")
    problem = summary_inconsistency(len(entries), duplicates, data_configs, shard)
    if problem:
        raise FormatError(f"manifest.json summary is inconsistent: {problem}.")
    if shard is not None:
        _check_shard_membership(entries, shard, "manifest.json summary.shard")
    return value


@dataclass(frozen=True, slots=True)
class Header:
    """A parsed safetensors header: capacity ``H``, the JSON's own length, metadata and tensors by name."""

    capacity: int
    json_length: int
    metadata: dict[str, str]
    tensors: dict[str, dict[str, Any]]


def read_length_prefix(prefix: bytes, file_size: int) -> int:
    """The header capacity from the first 8 bytes, checked against the format-3 rules and the file size."""
    if len(prefix) < LENGTH_PREFIX_BYTES or file_size < LENGTH_PREFIX_BYTES:
        raise FormatError(f"{PAYLOAD_NAME} is {file_size} bytes, too short for a safetensors length prefix.")
    capacity = int.from_bytes(prefix[:LENGTH_PREFIX_BYTES], "little")
    if capacity == 0 or capacity % 8 or capacity > MAX_HEADER_BYTES:
        raise FormatError(
            f"{PAYLOAD_NAME} header length {capacity} is invalid (format 3 uses a positive multiple of 8 up to "
            f"{MAX_HEADER_BYTES:,})."
        )
    if LENGTH_PREFIX_BYTES + capacity > file_size:
        raise FormatError(
            f"{PAYLOAD_NAME} is truncated: its header needs {capacity} bytes but the file is {file_size}."
        )
    return capacity


def parse_header(raw: bytes) -> Header:
    """Parse the ``H`` header bytes: canonical-form JSON object padded with spaces only."""
    body = raw.rstrip(b" ")
    if not body.startswith(b"{"):
        raise FormatError(f"{PAYLOAD_NAME} header does not start with a JSON object (unfinished or damaged file).")
    try:
        text = body.decode("utf-8")
        parsed = json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise FormatError(f"{PAYLOAD_NAME} header is not valid JSON ({error}); the file is damaged.") from None
    if not isinstance(parsed, dict):
        raise FormatError(f"{PAYLOAD_NAME} header must be a JSON object.")
    metadata = parsed.pop("__metadata__", None)
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise FormatError(f"{PAYLOAD_NAME} header __metadata__ must be an object of strings.")
    return Header(len(raw), len(body), metadata, parsed)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def check_header(header: Header, manifest: Manifest, file_size: int) -> dict[str, tuple[int, ...]]:
    """Cross-check the header with the manifest; return each entry's tensor start offsets (relative to data).

    Checks the metadata, that the header names exactly the manifest's tensors with the same dtype and shape,
    that offsets are contiguous from 0 and that the file ends at the last tensor.
    """
    expected_meta = {"format_version": str(FORMAT_VERSION), "provenance_digest": manifest.provenance_digest}
    if header.metadata != expected_meta:
        raise FormatError(
            f"{PAYLOAD_NAME} __metadata__ {header.metadata!r} does not match the manifest (expected {expected_meta!r})."
        )
    tensors = header.tensors
    count = sum(len(entry["sequences"]) for entry in manifest.entries.values())
    starts: dict[str, tuple[int, ...]] = {}
    spans: list[tuple[int, int]] = []
    for key, entry in manifest.entries.items():
        entry_starts = []
        for ref in entry["sequences"]:
            name = ref["tensor"]
            info = tensors.get(name)
            if info is None:
                raise FormatError(f"{PAYLOAD_NAME} has no tensor {name} that manifest.json lists.")
            if not isinstance(info, dict) or info.keys() != HEADER_TENSOR_FIELDS:
                raise FormatError(f"{PAYLOAD_NAME} header entry {name} must have exactly dtype, shape, data_offsets.")
            shape = info["shape"]
            if (
                info["dtype"] != ref["dtype"]
                or shape != ref["shape"]
                or not isinstance(shape, list)
                or not all(is_int(n) for n in shape)
            ):
                raise FormatError(
                    f"{PAYLOAD_NAME} tensor {name} is {info['dtype']} {info['shape']} but manifest.json says "
                    f"{ref['dtype']} {ref['shape']}."
                )
            offsets = info["data_offsets"]
            if (
                not isinstance(offsets, list)
                or len(offsets) != 2
                or not all(is_int(o) for o in offsets)
                or offsets[1] - offsets[0] != ref["shape"][0] * TOKEN_BYTES
                or offsets[0] < 0
            ):
                raise FormatError(f"{PAYLOAD_NAME} tensor {name} has invalid data_offsets {offsets!r}.")
            entry_starts.append(offsets[0])
            spans.append((offsets[0], offsets[1]))
        starts[key] = tuple(entry_starts)
    if len(tensors) != count:
        extra = sorted(set(tensors) - {ref["tensor"] for e in manifest.entries.values() for ref in e["sequences"]})
        raise FormatError(f"{PAYLOAD_NAME} holds tensors manifest.json does not list: {', '.join(extra[:5])}.")
    spans.sort()
    end = 0
    for start, stop in spans:
        if start != end:
            raise FormatError(f"{PAYLOAD_NAME} tensor offsets are not contiguous at byte {end} of the data.")
        end = stop
    expected_size = LENGTH_PREFIX_BYTES + header.capacity + end
    if file_size != expected_size:
        raise FormatError(
            f"{PAYLOAD_NAME} is {file_size} bytes but its header describes {expected_size} (truncated or extended)."
        )
    return starts


def is_canonical_header(raw: bytes) -> bool:
    """True when the header bytes are canonical JSON followed by spaces only (what the writer produces)."""
    body = raw.rstrip(b" ")
    try:
        return canonical_bytes(json.loads(body.decode("utf-8"))) == body
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False


__all__ = [
    "ARTIFACT_FILES",
    "DTYPES",
    "FINISH_REASONS",
    "FORMAT_VERSION",
    "MANIFEST_CHUNK_BYTES",
    "MANIFEST_NAME",
    "MAX_HEADER_BYTES",
    "PAYLOAD_NAME",
    "RECORD_STRIDE",
    "RESOLVED_NAME",
    "SHARD_RULE",
    "Header",
    "Manifest",
    "Record",
    "build_header",
    "build_manifest",
    "build_manifest_bytes",
    "build_summary",
    "check_header",
    "check_manifest",
    "check_provenance",
    "check_shard_info",
    "content_digest",
    "header_capacity",
    "header_object",
    "is_canonical_header",
    "is_key",
    "iter_manifest_bytes",
    "json_file_bytes",
    "length_prefix",
    "make_provenance",
    "make_record",
    "make_shard_info",
    "pad_header",
    "parse_header",
    "parse_shard_dir_name",
    "provenance_digest",
    "read_length_prefix",
    "record_fields",
    "shard_dir_name",
    "shard_of",
    "sorted_record_keys",
    "tensor_name",
]
