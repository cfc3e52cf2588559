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
    Layout,
    is_key,
    tensor_name,
)
from gencache.artifact.records import (
    Record,
    is_single,
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


# -- content digests: the one layout of a tensor reference and of the digested document --------------------
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
    encode = _encode
    parts = [
        _ref_open(encode(ref["digest"]), encode(ref["dtype"]), ",".join(map(str, ref["shape"]))) + "}"
        for ref in sequence_refs
    ]
    try:
        return _content_sha256(",".join(parts), ",".join(map(encode, texts)), ",".join(map(encode, finish_reasons)))
    except UnicodeEncodeError as error:
        raise FormatError(f"Cannot compute a content digest: {error}.") from error


# -- the manifest encoder ----------------------------------------------------------------------------------
def json_file_bytes(value: Any) -> bytes:
    """Canonical JSON plus a newline: the bytes of ``resolved_config.json`` (and of any JSON file gencache writes)."""
    try:
        return canonical_bytes(value) + b"\n"
    except (TypeError, ValueError) as error:  # UnicodeEncodeError is a ValueError
        raise FormatError(f"Cannot serialise to canonical JSON: {error}.") from error


# The manifest's layout, written once: these functions spell each part of it; the encoder writes with them or with
# the pieces of their layouts (below), and the reader's canonical scan matches the same pieces.
def _member_text(key: str, content_hex: str, reasons_json: str, refs_json: str, texts_json: str) -> str:
    """An entry member ``"<key>":{...}`` from its encoded fields (the items of each list joined by ``,``)."""
    return (
        f'"{key}":{{"content_digest":"{content_hex}","finish_reasons":[{reasons_json}],'
        f'"sequences":[{refs_json}],"text":[{texts_json}]}}'
    )


def _ref_text(core: str, name: str) -> str:
    """A tensor reference of the manifest: its :func:`_ref_open` core and its tensor's name."""
    return f'{core},"tensor":"{name}"}}'


def _single_member_text(key: str, content_hex: str, reason_json: str, digest_hex: str, n: str, text_json: str) -> str:
    """The member of an entry with one sequence."""
    ref = _ref_text(_ref_open(f'"{digest_hex}"', _DTYPE_JSON, n), tensor_name(key, 0))
    return _member_text(key, content_hex, reason_json, ref, text_json)


def _manifest_text(members: Sequence[str], others: str) -> str:
    """The manifest: its entry members, then its other members (in canonical order, ``format_version`` first)."""
    return f'{{"entries":{{{",".join(members)}}},{others}}}\n'


def _others_text(version: str, payload: str, provenance: str, digest: str, storage: str, summary: str) -> str:
    """The manifest's members after ``entries``, from their values' JSON."""
    return (
        f'"format_version":{version},"payload":{payload},"provenance":{provenance},'
        f'"provenance_digest":{digest},"storage":{storage},"summary":{summary}'
    )


SINGLE_ENTRY = Layout.of(_single_member_text, "key", "content_digest", "finish_reason", "digest", "length", "text")
"""An entry member with one sequence: around its key, content digest, finish reason (JSON), sequence digest, token
count, key again (in the tensor name) and text (JSON)."""
MANIFEST_FRAME = Layout.of(
    lambda first, second, others: _manifest_text([first, second], others), "entry", "entry", "others"
)
"""The manifest around two entry members and the members after ``entries`` (the separator between entries is its
second piece)."""
MANIFEST_OTHERS = Layout.of(
    _others_text, "format_version", "payload", "provenance", "provenance_digest", "storage", "summary"
)
"""The manifest's members after ``entries``."""
_KEY_OPEN, _CONTENT_OPEN, _REASON_OPEN, _DIGEST_OPEN, _LENGTH_OPEN, _TENSOR_OPEN, _TEXT_OPEN, _ENTRY_END = (
    SINGLE_ENTRY.pieces
)  # each piece named by the field it comes before
_MANIFEST_OPEN, _ENTRY_SEPARATOR, _ENTRIES_END, _MANIFEST_END = MANIFEST_FRAME.pieces


def _entry_member(key: str, record: Record, reason_json: dict[str, str]) -> str:
    """``"<key>":{...}`` of one entry; each text is encoded once, for the member and its content digest."""
    encode = _encode
    if is_single(record):
        _, n, digest, text, reason = record
        reasons_json = reason_json.get(reason)
        if reasons_json is None:
            reasons_json = reason_json[reason] = encode(reason)
        texts_json = encode(text)
        digest_hex = digest.hex()
        core = _ref_open(f'"{digest_hex}"', _DTYPE_JSON, n)
        content_hex = _content_sha256(f"{core}}}", texts_json, reasons_json)
        return (  # _single_member_text(key, content_hex, reasons_json, digest_hex, n, texts_json), inlined
            f"{_KEY_OPEN}{key}{_CONTENT_OPEN}{content_hex}{_REASON_OPEN}{reasons_json}{_DIGEST_OPEN}{digest_hex}"
            f"{_LENGTH_OPEN}{n}{_TENSOR_OPEN}{key}{_TEXT_OPEN}{texts_json}{_ENTRY_END}"
        )
    reasons_json = ",".join(map(encode, record_reasons(record)))
    texts_json = ",".join(map(encode, record_texts(record)))
    pairs = zip(record_lengths(record), record_digests(record), strict=True)
    cores = [_ref_open(f'"{d.hex()}"', _DTYPE_JSON, n) for n, d in pairs]
    content = ",".join([f"{core}}}" for core in cores])
    refs = ",".join([_ref_text(core, tensor_name(key, i)) for i, core in enumerate(cores)])
    return _member_text(key, _content_sha256(content, texts_json, reasons_json), reasons_json, refs, texts_json)


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
    encode = _encode
    try:
        others = _others_text(
            str(FORMAT_VERSION),
            encode(PAYLOAD_NAME),
            canonical_json(checked),
            encode(provenance_digest(checked)),
            encode(STORAGE),
            canonical_json(dict(summary)),
        )
        tail = f"{_ENTRIES_END}{others}{_MANIFEST_END}".encode()
    except (TypeError, ValueError) as error:  # UnicodeEncodeError is a ValueError
        raise FormatError(f"Cannot serialise to canonical JSON: {error}.") from error
    reason_json: dict[str, str] = {}
    parts: list[bytes] = [_MANIFEST_OPEN.encode()]
    append = parts.append
    size = 0
    for position, key in enumerate(keys):
        try:
            member = ((_ENTRY_SEPARATOR if position else "") + _entry_member(key, records[key], reason_json)).encode()
        except FormatError:
            raise
        except (TypeError, ValueError, AttributeError) as error:  # UnicodeEncodeError is a ValueError
            raise FormatError(f"Cannot serialise entry {key} to canonical JSON: {error}.") from error
        append(member)
        size += len(member)
        if size >= chunk_bytes:
            yield b"".join(parts)
            parts.clear()
            size = 0
    append(tail)
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
