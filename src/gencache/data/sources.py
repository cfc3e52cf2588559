"""Loading a dataset's tables from the hub, a hub-style local directory or a single file (docs/datasets.md), and
where their rows came from, for ``resolved_config.json`` and for messages that name a file's own line.

Every local file read is hashed (SHA-256) for provenance. A Ray worker that cannot see the driver's files reads the
copies the driver sent (:func:`read_mirrored`) and records the driver's paths and digests, as the driver would.
"""

from __future__ import annotations

import csv
import glob
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gencache.config import DataConfig
from gencache.config.messages import closest
from gencache.config.paths import FILE_SUFFIXES, looks_like_path
from gencache.core.errors import DatasetError, first_line

#: Files whose every cell is text (a header line, then one row per record), by their delimiter.
DELIMITERS = {".csv": ",", ".tsv": "\t"}


@dataclass(frozen=True)
class SourceInfo:
    """Where a recipe's rows came from (``kind``: ``hub``, ``directory`` or ``file``): every local file read with
    its sha256, or each hub table's fingerprint (the digest ``datasets`` derives from the files it downloaded)."""

    kind: str
    location: str
    files: tuple[tuple[str, str], ...] = ()
    fingerprints: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "location": self.location,
            "files": [{"path": path, "sha256": digest} for path, digest in self.files],
            "fingerprints": dict(self.fingerprints),
        }


@dataclass(frozen=True)
class TableOrigin:
    """A loaded table's local files in reading order (none from the hub) and its description for messages."""

    what: str
    files: tuple[Path, ...] = ()

    def describe(self) -> str:
        return ", ".join(str(p) for p in self.files) if self.files else self.what

    def locate(self, index: int) -> str:
        """``<file> line N`` (JSON Lines, CSV and TSV: 1-based, the line the row starts on) or ``<file> row N``
        (0-based, in the file's own order) of the table's row ``index``; for a hub table, ``<table> row N``."""
        for path in self.files:
            suffix = path.suffix.lower()
            if suffix == ".parquet":
                import pyarrow.parquet

                count = pyarrow.parquet.ParquetFile(path).metadata.num_rows
                if index < count:
                    return f"{path} row {index}"
                index -= count
            elif suffix in DELIMITERS:
                return f"{path} line {[start for start, _ in csv_rows(path, DELIMITERS[suffix])][index + 1]}"
            elif _json_array(path):
                return f"{path} row {index}"
            else:  # JSON Lines: blank lines hold no row
                with path.open("rb") as handle:
                    return f"{path} line {[n for n, line in enumerate(handle, start=1) if line.strip()][index]}"
        return f"{self.what} row {index}"


def _json_array(path: Path) -> bool:
    with path.open("rb") as handle:
        return path.suffix.lower() == ".json" and handle.read(4096).lstrip().startswith(b"[")


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


def origin_of(table: Any, label: str) -> TableOrigin:
    """The origin recorded on ``table`` when it was loaded here; a table loaded some other way is described by
    ``label``."""
    return getattr(table, "gencache_origin", None) or TableOrigin(what=f"{label} table")


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def classify_source(source: str | None, hub_id: str) -> tuple[str, str]:
    """``(kind, location)``: ``("hub", id)``, ``("directory", abs path)`` or ``("file", abs path)``; ``hub_id`` is
    the recipe's canonical hub dataset (empty when it has none)."""
    if source is None:
        return "hub", hub_id
    path = Path(source).expanduser()
    if path.is_dir():
        return "directory", str(path.resolve())
    if path.is_file():
        if not path.name.lower().endswith(FILE_SUFFIXES):
            raise DatasetError(
                f"source file {str(path.resolve())!r} is not .jsonl, .json, .parquet, .csv or .tsv; convert it or "
                "point source at a directory laid out by split."
            )
        return "file", str(path.resolve())
    if os.path.lexists(path):
        raise DatasetError(
            f"source {str(path.absolute())!r} is neither a regular file nor a directory; point it at a data file or "
            "a directory laid out by split.",
            "source",
        )
    if looks_like_path(source):
        fix = f"fix the path or omit source (the hub dataset {hub_id})" if hub_id else "fix the path"
        parent = path.absolute().parent
        try:  # the closest existing name beside the missing one
            close = closest(path.name, [entry.name for entry in os.scandir(parent) if not entry.name.startswith(".")])
        except OSError:
            close = []
        near = f"did you mean {str(parent / close[0])!r}? " if close else ""
        raise DatasetError(f"source path {str(path.absolute())!r} does not exist; {near}{fix}.", "source")
    return "hub", source


def _split_files(folder: Path, split: str) -> list[Path]:
    """Files holding ``split`` directly in ``folder`` (one file, or the shards of one parquet table)."""
    found = [folder / f"{split}{ext}" for ext in FILE_SUFFIXES if (folder / f"{split}{ext}").is_file()]
    digits = "[0-9]" * 5
    shards = sorted(p for p in folder.glob(f"{glob.escape(split)}-{digits}-of-{digits}.parquet") if p.is_file())
    if found and shards:
        found.append(shards[0])
    if len(found) > 1:
        names = ", ".join(str(p) for p in found)
        raise DatasetError(f"split {split!r} is ambiguous in {str(folder)!r}: {names}; keep exactly one of them.")
    return found or shards


def _read_files(paths: Sequence[Path], label: str) -> Any:
    """One table over ``paths`` (one text file, or the parquet files of one table), rows in file order. An empty
    file or one that is not UTF-8 is refused first: ``datasets`` would read it into a row and fail when it is used."""
    import datasets
    import pyarrow.csv
    from datasets.utils import disable_progress_bars, enable_progress_bars, is_progress_bar_enabled

    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as error:
            raise DatasetError(
                f"{label}: cannot read {path} ({error.strerror or error}); make it readable or point source at a copy.",
                "source",
            ) from None
        if not data.strip():
            raise DatasetError(f"{label}: {path} is empty; point source at the file that holds the dataset's rows.")
        if path.suffix.lower() != ".parquet":
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as error:
                line = data[: error.start].count(b"\n") + 1
                raise DatasetError(
                    f"{label}: {path} is not valid UTF-8 (line {line}: {error.reason}); re-encode it."
                ) from None
    delimiter = DELIMITERS.get(paths[0].suffix.lower())
    bars = is_progress_bar_enabled()
    disable_progress_bars()
    try:
        if delimiter is not None:
            path = paths[0]
            header = next(csv_rows(path, delimiter), (1, []))[1]
            if len(set(header)) != len(header) or not all(header):
                repeated = sorted({name for name in header if header.count(name) > 1 or not name})
                raise DatasetError(
                    f"{label}: {path} line 1: the {path.suffix[1:].upper()} header must name each column once "
                    f"(repeated or empty: {', '.join(repr(name) for name in repeated)}); rename them."
                )
            cells = pyarrow.csv.read_csv(
                path,
                parse_options=pyarrow.csv.ParseOptions(delimiter=delimiter, newlines_in_values=True),
                convert_options=pyarrow.csv.ConvertOptions(column_types=dict.fromkeys(header, pyarrow.string())),
            )
            table = datasets.Dataset(datasets.table.InMemoryTable(cells))
        else:
            builder = "parquet" if paths[0].suffix.lower() == ".parquet" else "json"
            table = datasets.load_dataset(builder, data_files=[str(p) for p in paths], split="train")
    except DatasetError:
        raise
    except Exception as exc:  # datasets and pyarrow raise many types for unreadable files; report one line
        for path in paths:
            found = _bad_line(path)
            if found:
                raise DatasetError(f"{label}: {path} line {found}") from None
        raise DatasetError(
            f"could not read {label} from {', '.join(map(str, paths))}: {first_line(exc)}; check that the file is "
            "valid JSON Lines, JSON, CSV, TSV or parquet in the dataset's schema."
        ) from None
    finally:
        if bars:
            enable_progress_bars()
    table.gencache_origin = TableOrigin(what=label, files=tuple(paths))
    return table


def _bad_line(path: Path) -> str | None:
    """``N <what is wrong>`` for the first line that is not JSON (JSON Lines) or the first row whose width differs
    from the header's (CSV, TSV); None when no single line is to blame."""
    if path.suffix.lower() == ".parquet" or _json_array(path):
        return None
    delimiter = DELIMITERS.get(path.suffix.lower())
    if delimiter is not None:
        try:
            rows = list(csv_rows(path, delimiter))
        except csv.Error as error:
            return f"{error.args[0]}: not valid {path.suffix[1:].upper()} ({error.args[1]})."
        width = len(rows[0][1])
        for start, cells in rows[1:]:
            if len(cells) != width:
                sign = "tab" if delimiter == "\t" else "comma"
                return (
                    f"{start}: {len(cells)} cells, but the header names {width} columns; quote cells that hold a "
                    f"{sign} or a line break."
                )
        return None
    for number, line in enumerate(path.read_text(encoding="utf-8-sig").split("\n"), start=1):  # not splitlines:
        # JSON strings may hold U+2028 and the like
        if line.strip():
            try:
                json.loads(line)
            except json.JSONDecodeError as error:
                return f"{number} is not valid JSON ({error.msg} at column {error.colno}); fix that line."
    return None


def _load_hub(hub_id: str, config: str | None, split: str, label: str, hint: str) -> Any:
    import datasets

    where = f"{hub_id!r}" + (f" config {config!r}" if config else "") + f" split {split!r}"
    try:  # offline mode (HF_HUB_OFFLINE) and an unreachable hub's fall-back to the local cache are datasets' own
        table = datasets.load_dataset(hub_id, config, split=split)
    except Exception as exc:  # network, offline mode, unknown config or split: all become one clear line
        raise DatasetError(
            f"could not load {label} from the hub dataset {where}: {first_line(exc)}{hint}; set source to a local "
            "copy (a directory laid out by split, or one file), make the hub reachable, or set HF_HUB_OFFLINE=1 if "
            "it is in a local cache (HF_HOME)."
        ) from None
    table.gencache_origin = TableOrigin(f"{'dataset directory' if os.path.isdir(hub_id) else 'hub dataset'} {where}")
    return table


_SHARED: ContextVar[dict[tuple[Any, ...], tuple[dict[str, Any], SourceInfo]] | None] = ContextVar(
    "gencache_shared_tables", default=None
)


@contextmanager
def shared_tables() -> Iterator[None]:
    """Within this block, loading the same tables again returns the first load (recipes only read tables), so
    data configs over one source load and hash it once; a block inside another shares the outer one's tables."""
    token = _SHARED.set({} if (outer := _SHARED.get()) is None else outer)
    try:
        yield
    finally:
        _SHARED.reset(token)


def loaded_sources() -> dict[str, SourceInfo]:
    """The local sources loaded so far in this :func:`shared_tables` block, by ``source`` as the config names them."""
    loaded = (_SHARED.get() or {}).items()
    return {request[0]: info for request, (_, info) in loaded if info.kind != "hub"}


_MIRROR: ContextVar[tuple[Path, Mapping[str, str]] | None] = ContextVar("gencache_mirror", default=None)


def mirrored(root: Path, path: str) -> Path:
    """``root/home/u/data.jsonl`` for ``/home/u/data.jsonl``."""
    return root.joinpath(*Path(path).parts[1:])


@contextmanager
def read_mirrored(root: Path, sources: Mapping[str, str]) -> Iterator[None]:
    """Within this block, a ``source`` named in ``sources`` (each mapped to the absolute location it named where the
    run was planned) is read from its copy under ``root`` (:func:`mirrored`; ``root`` without symlinks) and recorded
    as the original: its location, its files and their digests are the planner's (the copies hold the same bytes)."""
    token = _MIRROR.set((root, sources))
    try:
        yield
    finally:
        _MIRROR.reset(token)


def load_tables(
    dc: DataConfig, hub_id: str, label: str, hub_config: str | None, splits: Sequence[str]
) -> tuple[dict[str, Any], SourceInfo]:
    """Load ``splits`` of a data config's dataset from its ``source`` as ``datasets.Dataset`` objects (shared inside
    :func:`shared_tables`); in a local directory its ``subset`` sub-folder is tried first."""
    memo = _SHARED.get()
    memo = {} if memo is None else memo
    request = (dc.source, hub_id, label, hub_config, dc.subset, tuple(splits))
    if request not in memo:
        mirror = _MIRROR.get()
        if mirror is None or dc.source is None or dc.source not in mirror[1]:
            memo[request] = _load_tables(request)
        else:  # read the copy, recorded as the original
            root = mirror[0]
            tables, info = _load_tables((str(mirrored(root, mirror[1][dc.source])), *request[1:]))
            files = tuple((str(Path("/", Path(path).relative_to(root))), digest) for path, digest in info.files)
            location = str(Path("/", Path(info.location).relative_to(root)))
            memo[request] = tables, replace(info, location=location, files=files)
    return memo[request]


def _load_tables(request: tuple[Any, ...]) -> tuple[dict[str, Any], SourceInfo]:
    source, hub_id, label, hub_config, dir_config, splits = request
    kind, location = classify_source(source, hub_id)
    if kind == "hub":
        hint = "" if source is None else f" (no local file or directory named {source!r} exists either)"
        tables = {split: _load_hub(location, hub_config, split, label, hint) for split in splits}
        fingerprints = tuple((split, str(table._fingerprint)) for split, table in tables.items())
        return tables, SourceInfo(kind="hub", location=location, fingerprints=fingerprints)
    path = Path(location)
    if kind == "file":
        if len(splits) != 1:
            raise DatasetError(
                f"{label} needs the tables {', '.join(splits)}, but the single file {location!r} holds only one; "
                "point source at a directory laid out by split."
            )
        table = _read_files([path], label)
        return {splits[0]: table}, SourceInfo(kind="file", location=location, files=((location, file_sha256(path)),))
    from huggingface_hub import metadata_load

    readme = path / "README.md"
    if readme.is_file() and "configs" in (metadata_load(readme) or {}):  # a hub-style repository: datasets reads it
        tables = {split: _load_hub(location, hub_config, split, label, "") for split in splits}
        declared = sorted(
            (str(p), file_sha256(p))
            for p in path.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
        return tables, SourceInfo(kind="directory", location=location, files=tuple(declared))
    tables = {}
    files: list[tuple[str, str]] = []
    folders = [path / dir_config, path] if dir_config else [path]
    missing: list[str] = []
    for split in splits:
        chosen = next((found for folder in folders if folder.is_dir() and (found := _split_files(folder, split))), [])
        if not chosen:
            missing.append(split)
            continue
        tables[split] = _read_files(chosen, f"{label} split {split!r}")
        files.extend((str(p), file_sha256(p)) for p in chosen)
    if not missing:
        return tables, SourceInfo(kind="directory", location=location, files=tuple(files))
    tried = [str(folder / f"{split}{ext}") for split in missing for folder in folders for ext in FILE_SUFFIXES]
    raise DatasetError(
        f"{label}: no file for split {', '.join(repr(s) for s in missing)} in {location!r}; tried {', '.join(tried)} "
        f"(and sharded <split>-NNNNN-of-NNNNN.parquet); lay the directory out by split or point source at one file."
    )
