"""The path rules, pure and without I/O: "is this a local path?" (models, tokenizers and dataset sources alike),
"is this a URL?" (never a path; an ``s3://`` URL names an object-store location where an artifact may live) and
"can this path name an output to create?" (``output_dir``, ``export --out``, every command that writes a path)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

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
S3_SCHEME = "s3://"
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")


@dataclass(frozen=True)
class S3Url:
    """An object-store location ``s3://bucket/key``: an artifact is the objects under ``key + "/"``. Offers the
    part of :class:`pathlib.Path` that the run and the artifact layer use (``name``, ``parent``, ``/``)."""

    bucket: str
    key: str

    def __str__(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.key}"

    @property
    def name(self) -> str:
        return self.key.rpartition("/")[2]

    @property
    def parent(self) -> S3Url:
        return S3Url(self.bucket, self.key.rpartition("/")[0])

    @property
    def prefix(self) -> str:
        """The key prefix of the objects under this location: ``key/`` (empty for a bucket's root)."""
        return f"{self.key}/" if self.key else ""

    def __truediv__(self, name: str) -> S3Url:
        return S3Url(self.bucket, f"{self.prefix}{name}")


def parse_s3_url(value: str) -> S3Url:
    """The :class:`S3Url` of ``s3://bucket/key`` (a trailing ``/`` ignored); :class:`ConfigError` when malformed."""
    bucket, _, key = value[len(S3_SCHEME) :].partition("/")
    key = key.rstrip("/")
    if not _BUCKET.match(bucket):
        raise ConfigError(
            f"{value!r} names no valid bucket ({bucket!r}); write s3://BUCKET/PREFIX/NAME with a bucket name of 3-63 "
            "lowercase letters, digits, dots and hyphens."
        )
    if key and any(part in ("", ".", "..") for part in key.split("/")):
        raise ConfigError(f"{value!r} has an empty, '.' or '..' part in its key; write s3://BUCKET/PREFIX/NAME.")
    return S3Url(bucket, key)


def url_problem(value: str, *, s3: bool = False) -> str | None:
    """Why ``value`` cannot be read or written, or None: it is a URL (``gs://``, ``hf://``, any ``scheme://``;
    ``s3://`` too unless ``s3``), which a path of the same spelling would silently turn into a local directory."""
    match = _URL.match(value)
    if match is None:
        return None
    if s3 and match.group() == S3_SCHEME:
        try:
            return (
                None if parse_s3_url(value).key else f"{value!r} names a bucket but no prefix; write s3://BUCKET/NAME"
            )
        except ConfigError as exc:
            return str(exc).removesuffix(".")
    where = "a local path or an s3://BUCKET/PREFIX URL" if s3 else "a local path (or a hub id for a model or dataset)"
    return (
        f"{value!r} is a URL ({match.group()}), which gencache does not read or write here; give {where} and copy to "
        "or from other stores yourself"
    )


def output_name_problem(path: str) -> str | None:
    """Why ``path`` cannot name an output to create, or None: it is a URL, or its last part (trailing slashes aside)
    is empty, ``.`` or ``..``, naming a directory that holds other things rather than a new one of its own."""
    if _URL.match(path):
        return url_problem(path, s3=True)
    name = os.path.basename(path.rstrip("/"))
    if name not in ("", ".", ".."):
        return None
    example = os.path.normpath(os.path.join(path, "my-run"))
    return f"{path!r} has no name of its own; end it in the name of the new directory or file, e.g. {example!r}"


def check_output_name(path: str, what: str) -> None:
    """A :class:`ConfigError` naming ``what`` (``output_dir``, ``--out``) when ``path`` cannot name an output."""
    if (problem := output_name_problem(path)) is not None:
        raise ConfigError(f"{what} {problem}.")
