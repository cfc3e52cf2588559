"""``manifest.json``: provenance, content digests, the one manifest encoder, and the checks of a read manifest.

The manifest is canonical JSON plus a newline::

    {"entries": {<key>: {"content_digest", "finish_reasons", "sequences": [{"digest", "dtype", "shape",
     "tensor"}], "text"}}, "format_version": 3, "payload": "cache.safetensors", "provenance": {...},
     "provenance_digest": <hex>, "storage": "safetensors", "summary": {...}}

An entry's ``content_digest`` is the SHA-256 of the canonical JSON of ``{sequences: [{dtype, shape, digest}],
text, finish_reasons}`` (tensor names excluded), so a reader can check an entry's texts and references without
the rest of the manifest. Pure: no I/O, no torch.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal, cast

import msgspec

from gencache.artifact.names import (
    FINISH_REASONS,
    FORMAT_VERSION,
    MAX_SHARDS,
    PAYLOAD_NAME,
    RECORD_STRIDE,
    STORAGE,
    TOKEN_DTYPE,
    Record,
    shard_of,
    tensor_name,
)
from gencache.config.names import Dtype
from gencache.core.canonical import canonical_bytes, canonical_json, json_digest
from gencache.core.errors import FormatError
from gencache.core.tokenizer import tokenizer_state

PROVENANCE_FIELDS = ("model_path", "tokenizer_path", "dtype", "tokenizer")
MANIFEST_CHUNK_BYTES = 1 << 20  # about how many bytes iter_manifest_bytes yields at a time

# json.dumps(..., ensure_ascii=False) encodes strings with this function, so text encoded with it is canonical.
_encode: Any = json.encoder.encode_basestring  # type: ignore[attr-defined]
_DTYPE_JSON = _encode(TOKEN_DTYPE)


# -- provenance --------------------------------------------------------------------------------------------
_Count = Annotated[int, msgspec.Meta(ge=0)]
_Hex = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]  # a lowercase SHA-256 hex digest or semantic key


class _TokenizerState(msgspec.Struct, forbid_unknown_fields=True):
    padding_side: Literal["left", "right"]
    pad_token_id: _Count | None
    eos_token_id: _Count | None


class _Provenance(msgspec.Struct, forbid_unknown_fields=True):
    model_path: Annotated[str, msgspec.Meta(min_length=1)]
    tokenizer_path: Annotated[str, msgspec.Meta(min_length=1)]
    dtype: Dtype
    tokenizer: _TokenizerState


def _convert(value: object, kind: Any, where: str) -> Any:
    """``value`` as ``kind`` (a msgspec type), or the :class:`FormatError` naming ``where`` and what is wrong."""
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as error:
        raise FormatError(f"{where}: {error}.") from None


def check_provenance(value: object, where: str = "provenance") -> dict[str, Any]:
    """Validate a provenance object and return a plain copy."""
    checked = _convert(value, _Provenance, where)
    for field in ("model_path", "tokenizer_path"):
        try:
            getattr(checked, field).encode("utf-8")
        except UnicodeEncodeError:
            raise FormatError(f"{where}.{field} is not valid Unicode (damaged).") from None
    return cast("dict[str, Any]", msgspec.to_builtins(checked))


def make_provenance(model_path: str, tokenizer_path: str, dtype: str, tokenizer: Any) -> dict[str, Any]:
    """The provenance an artifact records (validated); ``tokenizer`` is a tokenizer or its state mapping
    ``{padding_side, pad_token_id, eos_token_id}``."""
    state = dict(tokenizer) if isinstance(tokenizer, Mapping) else tokenizer_state(tokenizer)
    return check_provenance(
        {"model_path": model_path, "tokenizer_path": tokenizer_path, "dtype": dtype, "tokenizer": state}
    )


def provenance_digest(provenance: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the provenance."""
    return json_digest(dict(provenance))


# -- content digests and the manifest encoder ---------------------------------------------------------------
def content_digest(
    sequence_refs: Sequence[Mapping[str, Any]], texts: Sequence[str], finish_reasons: Sequence[str]
) -> str:
    """SHA-256 of canonical ``{sequences: [{dtype, shape, digest}], text, finish_reasons}`` (tensor names excluded).
    Raises :class:`FormatError` when a text cannot be encoded (a lone surrogate read from a damaged manifest).
    """
    refs = [{name: ref[name] for name in ("digest", "dtype", "shape")} for ref in sequence_refs]
    try:
        return json_digest({"finish_reasons": list(finish_reasons), "sequences": refs, "text": list(texts)})
    except UnicodeEncodeError as error:
        raise FormatError(f"Cannot compute a content digest: {error}.") from error


def json_file_bytes(value: Any) -> bytes:
    """Canonical JSON plus a newline: the bytes of ``resolved_config.json`` (and of any JSON file gencache writes)."""
    try:
        return canonical_bytes(value) + b"\n"
    except (TypeError, ValueError) as error:  # UnicodeEncodeError is a ValueError
        raise FormatError(f"Cannot serialise to canonical JSON: {error}.") from error


def _entry_member(key: str, record: Record) -> str:
    """``"<key>":{...}`` of one entry in canonical JSON; each text is encoded once, for the member and its content
    digest."""
    lengths, digests, texts, reasons = (record[i::RECORD_STRIDE] for i in range(1, 5))
    reasons_json, texts_json = ",".join(map(_encode, reasons)), ",".join(map(_encode, texts))
    pairs = zip(lengths, digests, strict=True)
    cores = [f'{{"digest":"{digest.hex()}","dtype":{_DTYPE_JSON},"shape":[{n}]' for n, digest in pairs]
    content = f'{{"finish_reasons":[{reasons_json}],"sequences":[{",".join([f"{core}}}" for core in cores])}],'
    content_hex = hashlib.sha256(f'{content}"text":[{texts_json}]}}'.encode()).hexdigest()
    refs = ",".join([f'{core},"tensor":"{tensor_name(key, i)}"}}' for i, core in enumerate(cores)])
    return (
        f'"{key}":{{"content_digest":"{content_hex}","finish_reasons":[{reasons_json}],"sequences":[{refs}],'
        f'"text":[{texts_json}]}}'
    )


def iter_manifest_bytes(
    provenance: Mapping[str, Any],
    records: Mapping[str, Record],
    summary: Mapping[str, Any],
    *,
    chunk_bytes: int = MANIFEST_CHUNK_BYTES,
    sorted_keys: Sequence[str] | None = None,
) -> Iterator[bytes]:
    """The bytes of ``manifest.json`` in pieces of about ``chunk_bytes`` bytes, so a writer can stream it.

    Assembled directly in canonical-JSON order (the tests pin its bytes against ``canonical_json``) from what the
    writer checked.
    """
    keys = sorted(records) if sorted_keys is None else sorted_keys
    tail = (
        f'}},"format_version":{FORMAT_VERSION},"payload":{_encode(PAYLOAD_NAME)},'
        f'"provenance":{canonical_json(dict(provenance))},"provenance_digest":{_encode(provenance_digest(provenance))},'
        f'"storage":{_encode(STORAGE)},"summary":{canonical_json(dict(summary))}}}\n'
    ).encode()
    parts: list[bytes] = [b'{"entries":{']
    size = 0
    for position, key in enumerate(keys):
        member = (("," if position else "") + _entry_member(key, records[key])).encode()
        parts.append(member)
        size += len(member)
        if size >= chunk_bytes:
            yield b"".join(parts)
            parts.clear()
            size = 0
    parts.append(tail)
    yield b"".join(parts)


# -- checking what was read --------------------------------------------------------------------------------
class _Ref(msgspec.Struct, forbid_unknown_fields=True):
    digest: _Hex
    dtype: Literal["I64"]
    shape: tuple[Annotated[int, msgspec.Meta(ge=1)]]
    tensor: str


class _Entry(msgspec.Struct, forbid_unknown_fields=True):
    content_digest: _Hex
    finish_reasons: list[Literal["eos", "stop_string", "length"]]
    sequences: Annotated[list[_Ref], msgspec.Meta(min_length=1)]
    text: list[str]


class Manifest(msgspec.Struct, forbid_unknown_fields=True):
    """A manifest's top level (:func:`check_manifest` checks the rest)."""

    entries: dict[_Hex, dict[str, Any]]
    format_version: Any
    payload: Literal["cache.safetensors"]
    provenance: dict[str, Any]
    provenance_digest: str
    storage: Literal["safetensors"]
    summary: Any


MANIFEST_FIELDS = frozenset(Manifest.__struct_fields__)


def check_manifest(value: object) -> Manifest:
    """Every structural check of a parsed manifest that needs no payload (content digests excluded: lazy)."""
    version = value.get("format_version") if isinstance(value, dict) else FORMAT_VERSION
    if type(version) is not int or version != FORMAT_VERSION:  # first: another format has other fields
        raise FormatError(
            f"manifest.json format_version is {version!r}; this gencache reads format {FORMAT_VERSION} only "
            "(regenerate the artifact with this version)."
        )
    manifest: Manifest = _convert(value, Manifest, f"manifest.json is not a format-{FORMAT_VERSION} manifest")
    provenance = check_provenance(manifest.provenance, "manifest.json provenance")
    if manifest.provenance_digest != provenance_digest(provenance):
        raise FormatError("manifest.json provenance_digest does not match its provenance (the manifest was altered).")
    lengths: list[int] = []
    for key, entry in manifest.entries.items():
        lengths += check_entry(key, entry)
    reasons = Counter(reason for entry in manifest.entries.values() for reason in entry["finish_reasons"])
    counts: dict[str, Any] = {"entries": len(manifest.entries), "sequences": len(lengths), "tokens": sum(lengths)}
    finish_reasons = {reason: reasons[reason] for reason in FINISH_REASONS}
    check_summary(manifest.summary, manifest.entries, finish_reasons=finish_reasons, **counts)
    return manifest


def check_entry(key: str, entry: object) -> list[int]:
    """Check the manifest entry of ``key``; its sequences' token counts."""
    where = f"manifest.json entries[{key}]"
    checked = _convert(entry, _Entry, where)
    count = len(checked.sequences)
    if len(checked.text) != count or len(checked.finish_reasons) != count:
        raise FormatError(f"{where} must have one text and one finish reason per sequence ({count}).")
    for i, ref in enumerate(checked.sequences):
        if ref.tensor != tensor_name(key, i):
            raise FormatError(f"{where}.sequences[{i}].tensor must be {tensor_name(key, i)!r}, got {ref.tensor!r}.")
    return [ref.shape[0] for ref in checked.sequences]


# -- the summary -------------------------------------------------------------------------------------------
class _DataConfig(msgspec.Struct, forbid_unknown_fields=True):
    index: _Count
    samples: _Count
    unique: _Count


class _Shard(msgspec.Struct, forbid_unknown_fields=True):
    index: _Count
    count: Annotated[int, msgspec.Meta(ge=1, le=MAX_SHARDS)]
    rule: Literal["key-mod"]
    run_digest: _Hex


class _Summary(msgspec.Struct, forbid_unknown_fields=True):
    entries: _Count
    sequences: _Count
    tokens: _Count
    duplicates: _Count
    finish_reasons: dict[str, int]
    data_configs: list[Any]
    shard: _Shard | None


def check_data_configs(value: object, where: str) -> list[dict[str, int]]:
    """``value`` as a list of ``{index, samples, unique}`` (index = position, 0 <= unique <= samples)."""
    configs = _convert(value, list[_DataConfig], where)
    for position, item in enumerate(configs):
        if item.index != position or item.unique > item.samples:
            raise FormatError(
                f"{where}[{position}] needs index {position} and unique <= samples: {msgspec.to_builtins(item)}."
            )
    return [msgspec.structs.asdict(item) for item in configs]


def build_summary(records: Mapping[str, Record], caller: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest summary: counts computed from the entries plus the caller's duplicates, data_configs, shard.

    ``data_configs`` and ``duplicates`` describe the whole run's samples (for a shard too), so ``sum(samples) -
    duplicates`` unique keys must equal an unsharded artifact's entries and be at least a shard's. Omitted,
    ``duplicates`` is inferred for an unsharded artifact.
    """
    data_configs = check_data_configs(caller.get("data_configs", []), "summary.data_configs")
    shard = caller.get("shard")
    lengths = [n for record in records.values() for n in record[1::RECORD_STRIDE]]
    reasons = Counter(reason for record in records.values() for reason in record[4::RECORD_STRIDE])
    whole_run = shard is None or shard["count"] == 1
    implied = sum(item["samples"] for item in data_configs) - len(records) if data_configs and whole_run else 0
    summary = {
        "entries": len(records),
        "sequences": len(lengths),
        "tokens": sum(lengths),
        "duplicates": caller.get("duplicates", implied),
        "finish_reasons": {reason: reasons[reason] for reason in FINISH_REASONS},
        "data_configs": data_configs,
        "shard": shard,
    }
    check_summary(summary, records, "summary")
    return summary


def shard_data_configs(samples: Iterable[tuple[int, str]], keys: Iterable[str], configs: int) -> list[dict[str, int]]:
    """A shard's own counts per data config, in the shape of ``summary.data_configs``: of the run's ``(data config
    index, key)`` ``samples``, those with a key among the shard's ``keys``, and their distinct keys."""
    mine = set(keys)
    ours = [(index, key) for index, key in samples if key in mine]
    counted, distinct = Counter(index for index, _ in ours), Counter(index for index, _ in set(ours))
    return [{"index": index, "samples": counted[index], "unique": distinct[index]} for index in range(configs)]


def check_summary(value: Any, keys: Iterable[str], where: str = "manifest.json summary", **counted: Any) -> None:
    """:class:`FormatError` unless the summary ``value`` is well formed, its entries, duplicates and data configs
    describe one run, each of the ``keys`` (iterated once) belongs to its shard, and it holds the ``counted`` values
    of a read manifest's entries."""
    summary = _convert(value, _Summary, where)
    entries, duplicates, shard = summary.entries, summary.duplicates, summary.shard
    data_configs = check_data_configs(summary.data_configs, f"{where}.data_configs")
    if shard is not None and shard.index >= shard.count:
        raise FormatError(f"{where}.shard.index must be below its count {shard.count}.")
    samples = sum(item["samples"] for item in data_configs)
    unique_keys, uniques = samples - duplicates, [item["unique"] for item in data_configs]
    problem = None
    if data_configs and not max(uniques) <= unique_keys <= sum(uniques):
        problem = (
            f"{samples} samples with {duplicates} duplicates leave {unique_keys} unique keys, which the per-config "
            "unique counts cannot produce"
        )
    elif data_configs and (shard is None or shard.count == 1) and unique_keys != entries:
        problem = (
            f"{samples} samples with {duplicates} duplicates make {unique_keys} unique keys, not {entries} entries"
        )
    elif data_configs and unique_keys < entries:
        problem = f"a shard holds {entries} entries but the run has only {unique_keys} unique keys"
    if problem:
        raise FormatError(f"{where} is inconsistent: {problem}.")
    for key in keys if shard is not None else ():
        if shard_of(key, shard.count) != shard.index:
            raise FormatError(
                f"{where}.shard says shard {shard.index} of {shard.count} but key {key} belongs to shard "
                f"{shard_of(key, shard.count)} (rule key-mod)."
            )
    for field, expected in counted.items():
        if value[field] != expected:
            raise FormatError(f"{where}.{field} is {value[field]!r} but the entries hold {expected!r}.")
