"""The path rules, pure and without I/O: "is this a local path?" (models, tokenizers and dataset sources alike),
"is this a URL?" (never a path) and "can this path name an output to create?" (``output_dir``, ``export --out``,
every command that writes a path)."""

from __future__ import annotations

import os
import re

from gencache.core.errors import ConfigError

#: File suffixes that make a name a local file, never a hub id (data files a dataset source may name).
FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".tsv")


def looks_like_path(value: str) -> bool:
    """True for a string meant as a local path rather than a hub id ``name`` or ``org/name`` (models, tokenizers
    and dataset sources alike)."""
    return (
        os.path.isabs(value)
        or value.startswith(("./", "../", "~", ".\\", "..\\"))
        or value in (".", "..")
        or value.count("/") > 1
        or value.endswith("/")
        or "\\" in value
        or value.lower().endswith(FILE_SUFFIXES)
    )


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def url_problem(value: str) -> str | None:
    """Why ``value`` cannot be read or written, or None: it is a URL (``s3://``, ``gs://``, ``hf://``, any
    ``scheme://``), which a path of the same spelling would silently turn into a local directory named ``s3:``."""
    match = _URL.match(value)
    if match is None:
        return None
    return (
        f"{value!r} is a URL ({match.group()}), which gencache does not read or write; give a local path (or a hub id "
        "for a model or dataset) and copy to or from the remote store yourself"
    )


def output_name_problem(path: str) -> str | None:
    """Why ``path`` cannot name an output to create, or None: it is a URL, or its last part (trailing slashes aside)
    is empty, ``.`` or ``..``, naming a directory that holds other things rather than a new one of its own."""
    if (url := url_problem(path)) is not None:
        return url
    stripped = path.rstrip("/")
    name = os.path.basename(stripped)
    if name not in ("", ".", ".."):
        return None
    what = f"its last part is {name!r}" if name else "it is the root directory"
    example = os.path.normpath(os.path.join(path, "my-run"))
    return (
        f"{path!r} has no name of its own ({what}); an output path ends in the name of the new directory or file, "
        f"e.g. {example!r}"
    )


def check_output_name(path: str, what: str) -> None:
    """A :class:`ConfigError` naming ``what`` (``output_dir``, ``--out``) when ``path`` cannot name an output."""
    problem = output_name_problem(path)
    if problem is not None:
        raise ConfigError(f"{what} {problem}.")
