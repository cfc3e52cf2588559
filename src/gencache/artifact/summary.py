"""The manifest's ``summary``: built from the writer's records and the run's counts, and checked when read.

``summary`` holds ``entries``, ``sequences``, ``tokens`` and ``finish_reasons`` (counted from the entries), and
``duplicates``, ``data_configs`` and ``shard`` (given by the run; ``data_configs`` counts the whole run's samples,
for a shard too: a shard's own counts, :func:`shard_data_configs`, are recorded in its ``resolved_config.json``).
Pure: no I/O, no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gencache.artifact.names import FINISH_REASONS, check_shard_info, shard_of
from gencache.artifact.records import Record, is_single, record_lengths, record_reasons
from gencache.core.canonical import is_int
from gencache.core.errors import FormatError

_SUMMARY_FIELDS = frozenset({"entries", "sequences", "tokens", "duplicates", "finish_reasons", "data_configs", "shard"})
_CALLER_SUMMARY_FIELDS = frozenset({"duplicates", "data_configs", "shard"})
_DATA_CONFIG_SUMMARY_FIELDS = frozenset({"index", "samples", "unique"})


def check_data_configs(value: object, where: str) -> list[dict[str, int]]:
    """``value`` as a list of ``{index, samples, unique}`` (index = position, 0 <= unique <= samples)."""
    if not isinstance(value, list):
        raise FormatError(f"{where} must be a list of {{index, samples, unique}}.")
    out = []
    for position, item in enumerate(value):
        here = f"{where}[{position}]"
        if not isinstance(item, Mapping) or set(item) != _DATA_CONFIG_SUMMARY_FIELDS:
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


def _check_duplicates(value: object, where: str) -> int:
    if not is_int(value) or value < 0:  # type: ignore[operator]
        raise FormatError(f"{where} must be a non-negative integer, got {value!r}.")
    return value  # type: ignore[return-value]


def build_summary(records: Mapping[str, Record], caller: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest summary: counts computed from the entries plus the caller's duplicates, data_configs, shard.

    ``data_configs`` and ``duplicates`` describe the whole run's samples (for a shard too): ``duplicates`` is the
    number of samples whose key repeats an earlier one, so ``sum(samples) - duplicates`` is the run's unique keys.
    That must equal the entries of an unsharded artifact and be at least the entries of a shard (checked here and
    by the reader). Omitted, ``duplicates`` is inferred for an unsharded artifact (0 without data_configs).
    """
    if not isinstance(caller, Mapping):
        raise FormatError("summary must be an object with duplicates, data_configs and shard.")
    unknown = set(caller) - _CALLER_SUMMARY_FIELDS
    if unknown:
        raise FormatError(
            f"summary has unknown fields {sorted(map(str, unknown))}; the caller provides only duplicates, "
            "data_configs and shard (the writer counts the rest)."
        )
    data_configs = check_data_configs(caller.get("data_configs", []), "summary.data_configs")
    shard = check_shard_info(caller.get("shard"))
    reasons = dict.fromkeys(FINISH_REASONS, 0)
    sequences = tokens = 0
    for record in records.values():
        if is_single(record):  # the fast path: (start, n, digest, text, reason)
            sequences += 1
            tokens += record[1]
            reasons[record[4]] += 1
            continue
        lengths = record_lengths(record)
        sequences += len(lengths)
        tokens += sum(lengths)
        for reason in record_reasons(record):
            reasons[reason] += 1
    entries = len(records)
    whole_run = shard is None or shard["count"] == 1
    implied = sum(item["samples"] for item in data_configs) - entries if data_configs and whole_run else 0
    duplicates = _check_duplicates(caller.get("duplicates", implied), "summary.duplicates")
    _check_consistency(records, entries, duplicates, data_configs, shard, "summary")
    return {
        "entries": entries,
        "sequences": sequences,
        "tokens": tokens,
        "duplicates": duplicates,
        "finish_reasons": reasons,
        "data_configs": data_configs,
        "shard": shard,
    }


def shard_data_configs(samples: Iterable[tuple[int, str]], keys: Iterable[str], configs: int) -> list[dict[str, int]]:
    """A shard's own counts per data config, in the shape of ``summary.data_configs``: of the run's ``samples``
    (``(data config index, key)`` pairs), how many have a key among the shard's ``keys`` (``samples``) and how many
    distinct keys those are (``unique``), for each of the run's ``configs`` data configs. The shards' counts add
    up to the run's: every key belongs to exactly one shard."""
    mine = set(keys)
    counts = [{"index": index, "samples": 0, "unique": 0} for index in range(configs)]
    seen: set[tuple[int, str]] = set()
    for index, key in samples:
        if key in mine:
            counts[index]["samples"] += 1
            if (index, key) not in seen:
                seen.add((index, key))
                counts[index]["unique"] += 1
    return counts


def check_summary(
    value: object, entries: Mapping[str, Any], sequences: int, tokens: int, reasons: Mapping[str, int]
) -> dict[str, Any]:
    """Check a read manifest's ``summary`` against the counts of its ``entries``; return it unchanged."""
    if not isinstance(value, dict) or value.keys() != _SUMMARY_FIELDS:
        raise FormatError(f"manifest.json summary must be an object with exactly {', '.join(sorted(_SUMMARY_FIELDS))}.")
    counted = {"entries": len(entries), "sequences": sequences, "tokens": tokens, "finish_reasons": dict(reasons)}
    for field, expected in counted.items():
        if value[field] != expected or (field != "finish_reasons" and not is_int(value[field])):
            raise FormatError(f"manifest.json summary.{field} is {value[field]!r} but the entries hold {expected!r}.")
    data_configs = check_data_configs(value["data_configs"], "manifest.json summary.data_configs")
    duplicates = _check_duplicates(value["duplicates"], "manifest.json summary.duplicates")
    shard = check_shard_info(value["shard"], "manifest.json summary.shard")
    _check_consistency(entries, len(entries), duplicates, data_configs, shard, "manifest.json summary")
    return value


def _check_consistency(
    keys: Iterable[str],
    entries: int,
    duplicates: int,
    data_configs: Sequence[Mapping[str, int]],
    shard: Mapping[str, Any] | None,
    where: str,
) -> None:
    problem = _inconsistency(entries, duplicates, data_configs, shard)
    if problem:
        raise FormatError(f"{where} is inconsistent: {problem}.")
    if shard is None:
        return
    for key in keys:
        if shard_of(key, shard["count"]) != shard["index"]:
            raise FormatError(
                f"{where}.shard says shard {shard['index']} of {shard['count']} but key {key} belongs to shard "
                f"{shard_of(key, shard['count'])} (rule key-mod)."
            )


def _inconsistency(
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
