"""The one rule for "is this a local path?", for models, tokenizers and dataset sources alike (pure, no I/O)."""

from __future__ import annotations

import os

#: File suffixes that make a name a local file, never a hub id (data files a dataset source may name).
FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".tsv")


def looks_like_path(value: str) -> bool:
    """True for a string meant as a local path rather than a hub id ``name`` or ``org/name``: the one rule for
    models, tokenizers and dataset sources alike. A path is absolute, starts with ``./``, ``../`` or ``~``, is
    ``.`` or ``..``, has more than one ``/``, ends with ``/``, holds a backslash, or names a data file
    (:data:`FILE_SUFFIXES`)."""
    return (
        os.path.isabs(value)
        or value.startswith(("./", "../", "~", ".\\", "..\\"))
        or value in (".", "..")
        or value.count("/") > 1
        or value.endswith("/")
        or "\\" in value
        or value.lower().endswith(FILE_SUFFIXES)
    )
