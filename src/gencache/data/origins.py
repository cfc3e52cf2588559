"""Where a dataset's rows came from: the source recorded in ``resolved_config.json`` and each loaded table's
files, for messages that name a file's own line."""

from __future__ import annotations

import csv
import json
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Files whose every cell is text (a header line, then one row per record), by their delimiter.
DELIMITERS = {".csv": ",", ".tsv": "\t"}


@dataclass(frozen=True)
class SourceInfo:
    """Where a recipe's rows came from (``kind``: ``hub``, ``directory`` or ``file``): every local file read with
    its sha256, or each hub table's fingerprint (the digest ``datasets`` derives from the files it downloaded)."""

    kind: str
    location: str
    files: tuple[tuple[str, str], ...] = field(default=())
    fingerprints: tuple[tuple[str, str], ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "location": self.location,
            "files": [{"path": path, "sha256": digest} for path, digest in self.files],
            "fingerprints": dict(self.fingerprints),
        }


@dataclass(frozen=True)
class TableOrigin:
    """Where a loaded table's rows came from: its local files in reading order (none for a hub table) and a
    description of the table (``what``) for messages."""

    what: str
    files: tuple[Path, ...] = ()

    @property
    def text_cells(self) -> bool:
        """True for CSV and TSV files, whose every cell is a string."""
        return any(path.suffix.lower() in DELIMITERS for path in self.files)

    def describe(self) -> str:
        """The files read (or the hub table), for a message."""
        return ", ".join(str(p) for p in self.files) if self.files else self.what

    def locate(self, index: int) -> str:
        """``<file> line N`` (JSON Lines, CSV and TSV: 1-based, the line the row starts on) or ``<file> row N``
        (0-based, in the file's own order) of the table's row ``index``; for a hub table, ``<table> row N``."""
        remaining = index
        for path in self.files:
            count, lines = _rows_of(path)
            if remaining < count:
                if lines is not None:
                    return f"{path} line {lines[remaining]}"
                return f"{path} row {remaining}"
            remaining -= count
        return f"{self.what} row {index}"


def _rows_of(path: Path) -> tuple[int, list[int] | None]:
    """How many rows ``path`` holds and, for JSON Lines, the 1-based line number of each row (blank lines hold
    no row)."""
    if path.name.lower().endswith(".parquet"):
        import pyarrow.parquet

        return int(pyarrow.parquet.ParquetFile(path).metadata.num_rows), None
    if path.suffix.lower() in DELIMITERS:
        starts = [start for start, _ in csv_rows(path, DELIMITERS[path.suffix.lower()])][1:]
        return len(starts), starts
    with path.open("rb") as handle:
        head = handle.read(4096).lstrip()
    if path.name.lower().endswith(".json") and head.startswith(b"["):
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            return 0, None
        return (len(rows), None) if isinstance(rows, list) else (0, None)
    numbers: list[int] = []
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                numbers.append(number)
    return len(numbers), numbers


def csv_rows(path: Path, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """``(line, cells)`` of each row of a CSV or TSV file, the header first: the 1-based line the row starts on
    (blank lines hold no row). A row the csv module cannot parse is ``csv.Error(line, why)``."""
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter, strict=True)
        start = 1
        try:
            for cells in reader:
                if cells and cells != [""]:
                    yield start, cells
                start = reader.line_num + 1
        except csv.Error as error:
            raise csv.Error(reader.line_num, str(error)) from None


_ORIGINS: weakref.WeakKeyDictionary[Any, TableOrigin] = weakref.WeakKeyDictionary()


def register_origin(table: Any, origin: TableOrigin) -> None:
    """Remember where ``table`` (a ``datasets.Dataset``) came from."""
    _ORIGINS[table] = origin


def origin_of(table: Any, label: str) -> TableOrigin:
    """The recorded origin of ``table``; a table loaded some other way is described by ``label``."""
    try:
        found = _ORIGINS.get(table)
    except TypeError:
        found = None
    return found if found is not None else TableOrigin(what=f"{label} table")
