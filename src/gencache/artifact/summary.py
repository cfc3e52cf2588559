"""The manifest's ``summary``: built from the writer's records and the run's counts, and checked when read.

``summary`` holds ``entries``, ``sequences``, ``tokens`` and ``finish_reasons`` (counted from the entries), and
``duplicates``, ``data_configs`` and ``shard`` (given by the run; ``data_configs`` counts the whole run's samples,
for a shard too: a shard's own counts, :func:`shard_data_configs`, are recorded in its ``resolved_config.json``).
Pure: no I/O, no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gencache.artifact.names import FINISH_REASONS, Record, check_shard_info, record_lengths, record_reasons, shard_of
from gencache.core.canonical import is_int
from gencache.core.errors import FormatError

_SUMMARY_FIELDS = frozenset({"entries", "sequences", "tokens", "duplicates", "finish_reasons", "data_configs", "shard"})


def check_data_configs(value: object, where: str) -> list[dict[str, int]]:
    """``value`` as a list of ``{index, samples, unique}`` (index = position, 0 <= unique <= samples)."""
    if not isinstance(value, list):
        raise FormatError(f"{where} must be a list of {{index, samples, unique}}.")
    out = []
    for position, item in enumerate(value):
        here = f"{where}[{position}]"
        if not isinstance(item, Mapping) or set(item) != {"index", "samples", "unique"}:
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


def build_summary(records: Mapping[str, Record], caller: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest summary: counts computed from the entries plus the caller's duplicates, data_configs, shard.

    ``data_configs`` and ``duplicates`` describe the whole run's samples (for a shard too): ``duplicates`` is the
    number of samples whose key repeats an earlier one, so ``sum(samples) - duplicates`` is the run's unique keys.
    That must equal the entries of an unsharded artifact and be at least the entries of a shard (checked here and
    by the reader). Omitted, ``duplicates`` is inferred for an unsharded artifact (0 without data_configs).
    """
    data_configs = check_data_configs(caller.get("data_configs", []), "summary.data_configs")
    shard = check_shard_info(caller.get("shard"))
    reasons = dict.fromkeys(FINISH_REASONS, 0)
    lengths = [n for record in records.values() for n in record_lengths(record)]
    for record in records.values():
        for reason in record_reasons(record):
            reasons[reason] += 1
    whole_run = shard is None or shard["count"] == 1
    implied = sum(item["samples"] for item in data_configs) - len(records) if data_configs and whole_run else 0
    summary = {
        "entries": len(records),
        "sequences": len(lengths),
        "tokens": sum(lengths),
        "duplicates": caller.get("duplicates", implied),
        "finish_reasons": reasons,
        "data_configs": data_configs,
        "shard": shard,
    }
    _check_runs(summary, records, "summary")
    return summary


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
    check_data_configs(value["data_configs"], "manifest.json summary.data_configs")
    check_shard_info(value["shard"], "manifest.json summary.shard")
    _check_runs(value, entries, "manifest.json summary")
    return value


def _check_runs(summary: Mapping[str, Any], keys: Iterable[str], where: str) -> None:
    """:class:`FormatError` unless ``summary``'s entries, duplicates and data configs describe one run, and each
    of the ``keys`` belongs to its shard."""
    entries, duplicates, data_configs, shard = (summary[f] for f in ("entries", "duplicates", "data_configs", "shard"))
    if not is_int(duplicates) or duplicates < 0:
        raise FormatError(f"{where}.duplicates must be a non-negative integer, got {duplicates!r}.")
    samples = sum(item["samples"] for item in data_configs)
    unique_keys, uniques = samples - duplicates, [item["unique"] for item in data_configs]
    problem = None
    if data_configs and not max(uniques) <= unique_keys <= sum(uniques):
        problem = (
            f"{samples} samples with {duplicates} duplicates leave {unique_keys} unique keys, which the per-config "
            "unique counts cannot produce"
        )
    elif data_configs and (shard is None or shard["count"] == 1) and unique_keys != entries:
        problem = (
            f"{samples} samples with {duplicates} duplicates make {unique_keys} unique keys, not {entries} entries"
        )
    elif data_configs and unique_keys < entries:
        problem = f"a shard holds {entries} entries but the run has only {unique_keys} unique keys"
    if problem:
        raise FormatError(f"{where} is inconsistent: {problem}.")
    for key in keys if shard is not None else ():
        if shard_of(key, shard["count"]) != shard["index"]:
            raise FormatError(
                f"{where}.shard says shard {shard['index']} of {shard['count']} but key {key} belongs to shard "
                f"{shard_of(key, shard['count'])} (rule key-mod)."
            )
