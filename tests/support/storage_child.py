"""Child process of the storage tests (crash, signal, file-size-limit, race and memory tests).

``python storage_child.py build OUTPUT ENTRIES LENGTH [--rename-mode M] [--fsize BYTES]``
    writes ENTRIES entries of about LENGTH tokens through ArtifactBuild and publishes OUTPUT; the process owns
    its signals as the command line does (the build installs none). Exit codes: 0 published, 143 SIGTERM, 130
    Ctrl-C, otherwise the GencacheError's exit code (its message on stderr). With
    ``GENCACHE_TEST_PHASES`` set it reports its moments and waits at each (:mod:`support.phase_hooks`). ``--fsize`` sets
    RLIMIT_FSIZE after the header is reserved. On success it prints the publish mode and entries as JSON.
``python storage_child.py memory ARTIFACT``
    opens ARTIFACT in this fresh process, reads one entry, and prints RssAnon and the payload map's Rss (from
    /proc/self/smaps) before and after, as JSON.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import resource
import sys
from pathlib import Path

from gencache.artifact.header import header_capacity
from gencache.artifact.writer import ArtifactBuild
from gencache.cli import signals
from gencache.core.errors import GencacheError, Stopped
from support import phase_hooks
from support.storage_helpers import PROVENANCE, RESOLVED, make_entries


def monkeypatch_rename() -> None:
    from gencache.artifact import publish

    publish._renameat2 = lambda source, target: errno.EINVAL  # type: ignore[assignment]


def build(args: argparse.Namespace) -> int:
    entries = make_entries(args.entries, length=args.length)
    capacity = header_capacity(len(entries), 1, args.length + 2)
    report: dict[str, object] = {}
    signals.install()
    phase_hooks.install()
    try:
        if args.rename_mode == "rename":  # a file system without RENAME_NOREPLACE
            monkeypatch_rename()
        with ArtifactBuild(args.output, provenance=PROVENANCE, header_capacity=capacity) as b:
            if args.fsize:
                resource.setrlimit(resource.RLIMIT_FSIZE, (args.fsize, resource.RLIM_INFINITY))
            for entry in entries:
                b.writer.add(entry.key, entry.payload(), entry.texts, entry.finish_reasons)
            b.writer.finalize(resolved_config=RESOLVED, summary={})
            report["mode"] = b.publish()
            report["entries"] = len(entries)
    except Stopped as stop:
        return stop.exit_code
    except GencacheError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    print(json.dumps(report))
    return 0


def _status(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _mapping_rss(path: str) -> int | None:
    """Rss of the mapping of ``path`` in this process (bytes), None when it is not mapped."""
    found = None
    with open("/proc/self/smaps", encoding="utf-8", errors="replace") as smaps:
        inside = False
        for line in smaps:
            fields = line.split()
            if fields and "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's first line
                inside = len(fields) >= 6 and fields[5] == path
                continue
            if inside and fields[0] == "Rss:":
                found = (found or 0) + int(fields[1]) * 1024
    return found


def memory(args: argparse.Namespace) -> int:
    import torch  # noqa: F401  (imported before measuring so its own allocations are not counted)

    from gencache.artifact.reader import CacheReader

    payload = os.path.realpath(Path(args.output) / "cache.safetensors")  # smaps names the real path
    anon_before = _status("RssAnon")
    reader = CacheReader(args.output)
    anon_open = _status("RssAnon")
    map_open = _mapping_rss(payload)
    key = next(iter(reader.keys()))
    generation = reader[key]
    map_read = _mapping_rss(payload)
    anon_read = _status("RssAnon")
    print(
        json.dumps(
            {
                "anon_open": anon_open - anon_before,
                "anon_read": anon_read - anon_open,
                "map_open": map_open,
                "map_read": map_read,
                "entry_bytes": sum(t.numel() * 8 for t in generation.sequences),
                "payload_bytes": reader.payload_bytes,
            }
        )
    )
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("output", type=Path)
    b.add_argument("entries", type=int)
    b.add_argument("length", type=int)
    b.add_argument("--rename-mode", default=None)
    b.add_argument("--fsize", type=int, default=0)
    m = sub.add_parser("memory")
    m.add_argument("output", type=Path)
    args = parser.parse_args(argv)
    return build(args) if args.command == "build" else memory(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
