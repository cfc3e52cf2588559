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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gencache.artifact.names import (
    FINISH_REASONS,
    FORMAT_VERSION,
    PADDING_SIDES,
    PAYLOAD_NAME,
    STORAGE,
    TOKEN_DTYPE,
    is_key,
    tensor_name,
)
from gencache.artifact.records import (
    Record,
    record_digests,
    record_lengths,
    record_reasons,
    record_texts,
    sorted_record_keys,
)
from gencache.artifact.summary import check_summary
from gencache.config.names import DTYPES
from gencache.core.canonical import canonical_bytes, canonical_json, is_int, is_sha256_hex, json_digest
from gencache.core.errors import FormatError
from gencache.core.tokenizer import TOKENIZER_STATE_FIELDS, tokenizer_state

PROVENANCE_FIELDS = ("model_path", "tokenizer_path", "dtype", "tokenizer")
MANIFEST_FIELDS = frozenset(
    {"format_version", "storage", "payload", "provenance", "provenance_digest", "entries", "summary"}
)
_ENTRY_FIELDS = frozenset({"sequences", "text", "finish_reasons", "content_digest"})
_TENSOR_REF_FIELDS = frozenset({"tensor", "dtype", "shape", "digest"})
MANIFEST_CHUNK_BYTES = 1 << 20
"""About how many bytes :func:`iter_manifest_bytes` yields at a time."""

# json.dumps(..., ensure_ascii=False) encodes strings with this function, so text encoded with it is canonical.
_encode: Any = json.encoder.encode_basestring  # type: ignore[attr-defined]
_DTYPE_JSON = _encode(TOKEN_DTYPE)


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
    (its state is read with :func:`gencache.core.tokenizer.tokenizer_state`).
    """
    state = dict(tokenizer) if isinstance(tokenizer, Mapping) else tokenizer_state(tokenizer)
    return check_provenance(
        {"model_path": model_path, "tokenizer_path": tokenizer_path, "dtype": dtype, "tokenizer": state}
    )


def provenance_digest(provenance: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the provenance."""
    return json_digest(dict(provenance))


# -- content digests and the manifest encoder ---------------------------------------------------------------
def _ref_open(digest_json: str, dtype_json: str, shape_json: object) -> str:
    """A tensor reference in canonical JSON without its closing brace (the manifest appends ``"tensor"``)."""
    return f'{{"digest":{digest_json},"dtype":{dtype_json},"shape":[{shape_json}]'


def _content_sha256(sequences_json: str, texts_json: str, reasons_json: str) -> str:
    """SHA-256 of canonical ``{"finish_reasons":[..],"sequences":[..],"text":[..]}`` from encoded members."""
    document = f'{{"finish_reasons":[{reasons_json}],"sequences":[{sequences_json}],"text":[{texts_json}]}}'
    return hashlib.sha256(document.encode("utf-8")).hexdigest()


def content_digest(
    sequence_refs: Sequence[Mapping[str, Any]], texts: Sequence[str], finish_reasons: Sequence[str]
) -> str:
    """SHA-256 of canonical ``{sequences: [{dtype, shape, digest}], text, finish_reasons}`` (tensor names excluded).
    Raises :class:`FormatError` when a text cannot be encoded (a lone surrogate read from a damaged manifest).
    """
    parts = [
        _ref_open(_encode(r["digest"]), _encode(r["dtype"]), ",".join(map(str, r["shape"]))) for r in sequence_refs
    ]
    refs = ",".join(part + "}" for part in parts)
    try:
        return _content_sha256(refs, ",".join(map(_encode, texts)), ",".join(map(_encode, finish_reasons)))
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
    reasons_json = ",".join(map(_encode, record_reasons(record)))
    texts_json = ",".join(map(_encode, record_texts(record)))
    pairs = zip(record_lengths(record), record_digests(record), strict=True)
    cores = [_ref_open(f'"{digest.hex()}"', _DTYPE_JSON, n) for n, digest in pairs]
    content_hex = _content_sha256(",".join([f"{core}}}" for core in cores]), texts_json, reasons_json)
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

    Assembled directly in canonical-JSON order (the tests pin its bytes against a reference built with
    :func:`gencache.core.canonical.canonical_json`); the small provenance and summary go through ``canonical_json``.
    ``summary`` is the object :func:`gencache.artifact.summary.build_summary` returns. The keys, the provenance
    and the summary are checked before the first piece is yielded (the keys unless ``sorted_keys`` from
    :func:`gencache.artifact.records.sorted_record_keys` is given). Raises :class:`FormatError`.
    """
    keys = sorted_record_keys(records) if sorted_keys is None else sorted_keys
    checked = check_provenance(provenance)
    try:
        tail = (
            f'}},"format_version":{FORMAT_VERSION},"payload":{_encode(PAYLOAD_NAME)},'
            f'"provenance":{canonical_json(checked)},"provenance_digest":{_encode(provenance_digest(checked))},'
            f'"storage":{_encode(STORAGE)},"summary":{canonical_json(dict(summary))}}}\n'
        ).encode()
    except (TypeError, ValueError) as error:  # UnicodeEncodeError is a ValueError
        raise FormatError(f"Cannot serialise to canonical JSON: {error}.") from error
    parts: list[bytes] = [b'{"entries":{']
    size = 0
    for position, key in enumerate(keys):
        try:
            member = (("," if position else "") + _entry_member(key, records[key])).encode()
        except (TypeError, ValueError, AttributeError) as error:  # UnicodeEncodeError is a ValueError
            raise FormatError(f"Cannot serialise entry {key} to canonical JSON: {error}.") from error
        parts.append(member)
        size += len(member)
        if size >= chunk_bytes:
            yield b"".join(parts)
            parts.clear()
            size = 0
    parts.append(tail)
    yield b"".join(parts)


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
    summary = check_summary(value["summary"], entries, sequences, tokens, reasons)
    return Manifest(value, provenance, digest, entries, summary)


def _check_entry(key: object, entry: object) -> tuple[int, int]:
    if not is_key(key):
        raise FormatError(f"manifest.json entry key {key!r} is not a 64-character lowercase hex semantic key.")
    where = f"manifest.json entries[{key}]"
    if not isinstance(entry, dict) or entry.keys() != _ENTRY_FIELDS:
        raise FormatError(f"{where} must be an object with exactly {', '.join(sorted(_ENTRY_FIELDS))}.")
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
        if not isinstance(ref, dict) or ref.keys() != _TENSOR_REF_FIELDS:
            raise FormatError(f"{here} must be an object with exactly {', '.join(sorted(_TENSOR_REF_FIELDS))}.")
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
