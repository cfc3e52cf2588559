"""The path rules, pure and without I/O: "is this a local path?" (models, tokenizers and dataset sources alike) and
"can this path name an output to create?" (``output_dir``, ``export --out``, every command that writes a path)."""

from __future__ import annotations

import os

from gencache.core.errors import ConfigError

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


def output_name_problem(path: str) -> str | None:
    """Why ``path`` cannot name an output to create, or None when it can: its last part, trailing slashes aside, is
    empty, ``.`` or ``..`` (``/``, ``runs/.``, ``..``), so it names a directory that holds other things rather
    than a new one of its own. ``runs/out/`` is ``runs/out``."""
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
    """Raise :class:`ConfigError` naming ``what`` (``output_dir``, ``--out``) when :func:`output_name_problem`
    refuses ``path``."""
    problem = output_name_problem(path)
    if problem is not None:
        raise ConfigError(f"{what} {problem}.")
