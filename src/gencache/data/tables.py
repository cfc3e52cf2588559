"""Reading local data files without ``datasets``: JSON Lines, JSON, CSV, TSV (the standard library) and parquet
(pyarrow), into a :class:`LightTable` whose rows are exactly the rows ``datasets`` gives for the same file.

``datasets`` types a JSON file through Arrow: a column mixing integers and floats becomes floats, a string that
reads as a date becomes a timestamp, an integer beyond 64 bits becomes a float, nested objects with differing
fields are stored as JSON text, and a JSON array is re-encoded with pandas (floats rounded to 10 digits) first.
Where a file holds any of these (or any other shape the plain reading could read differently), :func:`read_light`
returns None and the caller reads the file with ``datasets``, as before, so a sample's key never depends on which
reader read its row. Everywhere else (plain strings, integers, floats, booleans, lists, objects with the same
fields) the values are the same, and the rows come in file order with every column present (None where a row
lacks it), as ``datasets`` gives them.

CSV and TSV files (``.csv``, ``.tsv``) have a header line naming the columns; every cell is a string (an empty cell
is the empty string) and a row with more or fewer cells than the header is an error naming its line.

Nothing here imports torch, transformers or datasets; pyarrow is imported for parquet files only.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gencache.core.errors import DatasetError

#: Files whose every cell is text (a header line, then one row per record).
TEXT_SUFFIXES = {".csv": ",", ".tsv": "\t"}
#: Larger JSON files are left to ``datasets``, which memory-maps its Arrow copy instead of holding Python rows.
MAX_LIGHT_BYTES = 256 << 20
_INT64 = (-(2**63), 2**63 - 1)
# Arrow's JSON reader reads a string like these as a timestamp (a superset: a false match only costs speed).
_DATE_LIKE = re.compile(r"\s*[+-]?\d{4,}-\d{1,2}(?:-\d{1,2})?(?:[T ].*)?\s*\Z", re.DOTALL)


class _NotPlain(Exception):
    """The file holds a value ``datasets`` would type differently from the plain reading."""


class LightTable:
    """Rows read by the light reader: ``len``, ``table[i]`` (a row: a dict over every column, in column order),
    ``table[column]`` (the column's values) and :attr:`column_names`, the parts of ``datasets.Dataset`` that the
    recipes use. ``text_cells`` is True for CSV and TSV files (every value is a string)."""

    def __init__(self, columns: Sequence[str], rows: Sequence[Any], *, text_cells: bool = False) -> None:
        self.column_names = list(columns)
        self._rows = rows
        self.text_cells = text_cells

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            if key not in self.column_names:
                raise KeyError(key)
            return [self._row(i).get(key) for i in range(len(self._rows))]
        return self._row(key)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self._row(i) for i in range(len(self._rows)))

    def _row(self, index: int) -> dict[str, Any]:
        row = self._rows[index]
        return {name: row.get(name) for name in self.column_names}


class _ArrowTable(LightTable):
    """A parquet table: rows are converted from Arrow when asked for, as ``datasets`` converts them."""

    def __init__(self, table: Any) -> None:
        super().__init__(table.column_names, [])
        self._table = table

    def __len__(self) -> int:
        return int(self._table.num_rows)

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return self._table.column(key).to_pylist()
        return self._row(key)

    def _row(self, index: int) -> dict[str, Any]:
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return dict(self._table.slice(index % len(self), 1).to_pylist()[0])


def decode_text(path: Path, label: str) -> str:
    """The text of ``path``: a file that cannot be read, is not UTF-8 (the line and byte named) or is empty is a
    :class:`DatasetError`."""
    data = read_bytes(path, label)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        if error.end >= len(data) and error.reason == "unexpected end of data":
            raise DatasetError(
                f"{label}: {path} is not valid UTF-8 (it ends inside a multi-byte character); re-encode it as UTF-8."
            ) from None
        raise DatasetError(
            f"{label}: {path} is not valid UTF-8 (line {line}, byte {error.start}: {error.reason}); re-encode the "
            "file as UTF-8 (for example with iconv) and rerun."
        ) from None
    if not text.strip():
        raise DatasetError(f"{label}: {path} is empty; point source at the file that holds the dataset's rows.")
    return text.removeprefix("\ufeff")


def _unreadable(path: Path, label: str, error: OSError) -> DatasetError:
    return DatasetError(
        f"{label}: cannot read {path} ({error.strerror or error}); make it readable or point source at a copy.",
        "source",
    )


def read_bytes(path: Path, label: str) -> bytes:
    """The bytes of ``path``; a file that cannot be read is a :class:`DatasetError` naming it and why."""
    try:
        return path.read_bytes()
    except OSError as error:
        raise _unreadable(path, label, error) from None


def readable(path: Path, label: str) -> None:
    """A :class:`DatasetError` naming ``path`` unless it can be opened for reading."""
    try:
        path.open("rb").close()
    except OSError as error:
        raise _unreadable(path, label, error) from None


def read_light(paths: Sequence[Path], label: str) -> LightTable | None:
    """The rows of ``paths`` (one text file, or parquet files), or None when ``datasets`` must read them (see the
    module docstring). Unreadable rows are a :class:`DatasetError` naming the file and line."""
    suffixes = {path.suffix.lower() for path in paths}
    if suffixes == {".parquet"}:
        return _read_parquet(paths, label)
    if len(paths) != 1:
        return None
    path = paths[0]
    if path.suffix.lower() in TEXT_SUFFIXES:
        return _read_delimited(path, label, TEXT_SUFFIXES[path.suffix.lower()])
    if path.stat().st_size > MAX_LIGHT_BYTES:
        decode_text(path, label)
        return None
    return _read_json(path, label)


# -- JSON and JSON Lines ------------------------------------------------------------------------------------
def _no_constant(name: str) -> Any:
    raise _NotPlain(name)


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_no_constant)


def _read_json(path: Path, label: str) -> LightTable | None:
    text = decode_text(path, label)
    try:
        # datasets re-encodes a JSON array (with pandas, floats to 10 digits) before it reads it
        rows = _array_rows(text) if text.startswith("[") else _json_lines(text, path, label)
        return _plain_table(rows)
    except _NotPlain:
        return None


def _array_rows(text: str) -> list[Any]:
    try:
        items = _loads(text)
    except ValueError:
        raise _NotPlain("not one JSON document") from None
    if not isinstance(items, list):
        raise _NotPlain("not a list")
    objects = "{" in text[:100].split('"', 1)[0]  # datasets' own test for a list of objects
    rows = items if objects else [{"text": item} for item in items]
    if any(isinstance(value, float) for value in _leaves(rows)):
        raise _NotPlain("floats in a JSON array")
    return rows


def _json_lines(text: str, path: Path, label: str) -> list[Any]:
    rows: list[Any] = []
    for number, line in enumerate(text.split("\n"), start=1):  # JSON strings may hold U+2028 and the like
        if not line.strip():
            continue
        try:
            rows.append(_loads(line))
        except ValueError as error:
            try:  # one JSON document over several lines: datasets reads it with pandas
                _loads(text)
            except ValueError:
                what = f"{error.msg} at column {error.colno}" if isinstance(error, json.JSONDecodeError) else error
                raise DatasetError(
                    f"{label}: {path} line {number} is not valid JSON ({what}); write one JSON object per line."
                ) from None
            raise _NotPlain("a multi-line JSON document") from None
    return rows


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def _plain_table(rows: list[Any]) -> LightTable:
    """A table over ``rows`` when every value reads the same through Arrow; :class:`_NotPlain` otherwise."""
    columns: dict[str, None] = {}
    kinds: dict[tuple[str, ...], str] = {}
    fields: dict[tuple[str, ...], frozenset[str]] = {}
    for row in rows:
        if not isinstance(row, dict) or not row:
            raise _NotPlain("a row that is not an object")
        columns.update(dict.fromkeys(row))
        for name, value in row.items():
            _check(value, (name,), kinds, fields)
    return LightTable(list(columns), rows)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise _NotPlain("an integer beyond 64 bits")
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        if _DATE_LIKE.match(value):
            raise _NotPlain("a date-like string")
        return "str"
    return "list" if isinstance(value, list) else "dict"


def _check(
    value: Any, path: tuple[str, ...], kinds: dict[tuple[str, ...], str], fields: dict[tuple[str, ...], frozenset[str]]
) -> None:
    if value is None:
        return
    kind = _kind(value)
    if kinds.setdefault(path, kind) != kind:
        raise _NotPlain(f"{'.'.join(path)} holds both {kinds[path]} and {kind} values")
    if kind == "list":
        for item in value:
            _check(item, (*path, "[]"), kinds, fields)
    elif kind == "dict":
        names = frozenset(value)
        if not names or fields.setdefault(path, names) != names:
            raise _NotPlain(f"objects with differing fields at {'.'.join(path)}")
        for name, item in value.items():
            _check(item, (*path, name), kinds, fields)


# -- CSV and TSV --------------------------------------------------------------------------------------------
def _read_delimited(path: Path, label: str, delimiter: str) -> LightTable:
    text = decode_text(path, label)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    kind = "TSV" if delimiter == "\t" else "CSV"
    try:
        header = next(reader)
        if len(set(header)) != len(header) or not all(header):
            repeated = sorted({name for name in header if header.count(name) > 1 or not name})
            raise DatasetError(
                f"{label}: {path} line 1: the {kind} header must name each column once (repeated or empty: "
                f"{', '.join(repr(name) for name in repeated)}); rename them."
            )
        rows: list[dict[str, str]] = []
        start = reader.line_num + 1
        for cells in reader:
            if not cells or cells == [""]:
                start = reader.line_num + 1
                continue
            if len(cells) != len(header):
                raise DatasetError(
                    f"{label}: {path} line {start}: {len(cells)} cells, but the header names {len(header)} columns; "
                    f"quote cells that hold a {'tab' if delimiter == chr(9) else 'comma'} or a line break."
                )
            rows.append(dict(zip(header, cells, strict=True)))
            start = reader.line_num + 1
    except csv.Error as error:
        raise DatasetError(f"{label}: {path} line {reader.line_num}: not valid {kind} ({error}).") from None
    return LightTable(header, rows, text_cells=True)


def delimited_lines(path: Path) -> list[int]:
    """The 1-based line on which each data row of a CSV or TSV file starts (blank lines hold no row)."""
    text = path.read_bytes().decode("utf-8-sig", errors="replace")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=TEXT_SUFFIXES.get(path.suffix.lower(), ","))
    numbers: list[int] = []
    try:
        next(reader)
        start = reader.line_num + 1
        for cells in reader:
            if cells and cells != [""]:
                numbers.append(start)
            start = reader.line_num + 1
    except (csv.Error, StopIteration):
        pass
    return numbers


# -- parquet ------------------------------------------------------------------------------------------------
_PLAIN_FEATURES = {"Value", "List", "LargeList"}


def _plain_features(metadata: dict[bytes, bytes] | None) -> bool:
    """True unless the file's ``huggingface`` metadata declares a feature that ``datasets`` decodes."""
    raw = (metadata or {}).get(b"huggingface")
    if raw is None:
        return True
    try:
        declared = json.loads(raw)
    except ValueError:
        return False
    types = {match for match in re.findall(r'"_type":\s*"([A-Za-z]+)"', json.dumps(declared))}
    return types <= _PLAIN_FEATURES


def _read_parquet(paths: Sequence[Path], label: str) -> LightTable | None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables: list[Any] = []
    for path in paths:
        if path.stat().st_size == 0:
            raise DatasetError(f"{label}: {path} is empty; point source at the file that holds the rows.")
        readable(path, label)
        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise DatasetError(
                f"could not read {label} from {path}: {first}; check that the file is parquet in the dataset's schema."
            ) from None
        if not _plain_features(table.schema.metadata) or (tables and table.schema != tables[0].schema):
            return None
        tables.append(table)
    whole = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    return _ArrowTable(whole.replace_schema_metadata(None))
