"""Where an artifact lives: a local directory, or the objects under an ``s3://bucket/prefix/name/`` prefix of an
S3-compatible store; :func:`exists`, :func:`listdir` and :func:`remove` answer for either.

The store is reached through boto3 (the ``s3`` extra), which takes the endpoint and credentials from the standard
AWS environment and retries by itself. boto3 rather than s3fs or obstore: the payload's first part (the header) is
sent last and the upload completed with ``If-None-Match: *``, which only the SDK's plain calls allow.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from gencache.artifact.names import RESOLVED_NAME
from gencache.config.paths import S3_SCHEME, S3Url, parse_s3_url
from gencache.core.errors import ConfigError, FormatError, GencacheError, OutputExistsError, WriteError

S3Client = Any  # boto3's client (typed by the optional boto3-stubs only)
Location = Path | S3Url
PathLike = str | os.PathLike[str]
T = TypeVar("T")
_ENVIRONMENT = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_DEFAULT_REGION")


def location(value: str | os.PathLike[str] | S3Url) -> Location:
    """An ``s3://`` URL as an :class:`S3Url`, anything else as an absolute local path (symlinks not resolved)."""
    if isinstance(value, S3Url):
        return value
    text = os.fspath(value)
    if text.startswith(S3_SCHEME):
        return parse_s3_url(text)
    return Path(text).expanduser().absolute()


# -- the client ------------------------------------------------------------------------------------------------
def client() -> S3Client:
    """The boto3 S3 client for this process and environment (a forked worker gets its own)."""
    return _client(os.getpid(), tuple(os.environ.get(name) for name in _ENVIRONMENT))


@functools.cache
def _client(pid: int, environment: tuple[str | None, ...]) -> S3Client:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise ConfigError(
            "s3:// locations need boto3: install gencache's s3 extra (pip install 'gencache[s3]')."
        ) from None
    config = Config(retries={"mode": "standard", "max_attempts": 6}, connect_timeout=10, read_timeout=120)
    return boto3.session.Session().client("s3", config=config)


def call(what: str, function: Callable[..., T], /, **arguments: Any) -> T:
    """``function(**arguments)`` on the client, each failure the store can answer as a :class:`GencacheError` naming
    ``what`` and the fix."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        return function(**arguments)
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        bucket = arguments.get("Bucket", "")
        if code == "NoSuchBucket":
            raise ConfigError(f"{what}: bucket {bucket!r} does not exist; create it or fix the URL.") from None
        if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"):
            raise ConfigError(
                f"{what}: the store refused the credentials ({code}); check AWS_ACCESS_KEY_ID/AWS_PROFILE and the "
                f"bucket's permissions."
            ) from None
        if code in ("NoSuchKey", "NotFound", "404"):
            raise FormatError(f"{what}: no such object.") from None
        if code == "PreconditionFailed":
            raise OutputExistsError(
                f"{what}: another writer created it first; wait for it to finish, or run `gencache clean` if it was "
                "killed."
            ) from None
        raise WriteError(f"{what} failed: {code or error}.") from None
    except NoCredentialsError:
        raise ConfigError(
            f"{what}: no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)."
        ) from None
    except BotoCoreError as error:
        endpoint = os.environ.get("AWS_ENDPOINT_URL") or "the default S3 endpoint"
        raise WriteError(f"{what} failed: {error} ({endpoint}); check that the store is reachable.") from None


# -- reading objects ---------------------------------------------------------------------------------------------
def list_objects(where: S3Url, *, delimiter: bool = False, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """The objects under ``where.prefix``; with ``delimiter``, each folder below as ``{"Prefix": ...}``."""
    s3 = client()
    arguments: dict[str, Any] = {"Bucket": where.bucket, "Prefix": where.prefix}
    arguments |= {"Delimiter": "/"} if delimiter else {}
    arguments |= {"MaxKeys": limit} if limit is not None else {}
    while True:
        page = call(f"Listing {where}/", s3.list_objects_v2, **arguments)
        yield from page.get("CommonPrefixes", [])
        yield from page.get("Contents", [])
        if limit is not None or not page.get("IsTruncated"):
            return
        arguments["ContinuationToken"] = page["NextContinuationToken"]


def read_object(where: S3Url, *, start: int | None = None, length: int | None = None, etag: str | None = None) -> bytes:
    """The bytes of one object, or of ``length`` bytes from ``start``; with ``etag``, a :class:`FormatError` when the
    object changed since."""
    arguments: dict[str, Any] = {"Bucket": where.bucket, "Key": where.key}
    if start is not None:
        end = "" if length is None else start + length - 1
        arguments["Range"] = f"bytes={start}-{end}"
    if etag is not None:
        arguments["IfMatch"] = etag
    try:
        return bytes(call(f"Reading {where}", client().get_object, **arguments)["Body"].read())
    except OutputExistsError:  # a failed If-Match: the object was replaced since it was listed
        raise FormatError(f"{where} changed while it was read; open it again.") from None


def download(where: S3Url, etag: str, target: Path) -> None:
    """Stream one object (the version of ``etag``) to a new local file ``target``."""
    body = call(f"Reading {where}", client().get_object, Bucket=where.bucket, Key=where.key, IfMatch=etag)["Body"]
    try:
        with open(target, "xb") as handle:
            shutil.copyfileobj(body, handle, 8 * 1024 * 1024)
    except GencacheError:  # a stop (Ctrl-C, SIGTERM) passes through
        raise
    except Exception as error:  # a full disk, a connection lost mid-stream
        raise WriteError(f"Downloading {where} to {target} failed: {error}.") from error


# -- either kind of location -------------------------------------------------------------------------------------
def exists(where: Location) -> bool:
    """Whether anything is at ``where``: a file, directory or symlink; an object at the key or under its prefix."""
    if isinstance(where, Path):
        return os.path.lexists(where)
    if next(list_objects(where, limit=1), None) is not None:
        return True
    try:
        call(f"Reading {where}", client().head_object, Bucket=where.bucket, Key=where.key)
    except FormatError:
        return False
    return True


def listdir(where: Location) -> list[str] | None:
    """The names directly under ``where``, or None when it is not a directory (an empty prefix included)."""
    if isinstance(where, Path):
        try:
            return os.listdir(where)
        except OSError:
            return None
    names = [
        (entry.get("Prefix") or entry["Key"])[len(where.prefix) :].rstrip("/")
        for entry in list_objects(where, delimiter=True)
    ]
    return names or None


def remove(where: Location) -> None:
    """Remove one file or object; one that is already gone is fine."""
    if isinstance(where, Path):
        where.unlink(missing_ok=True)
    else:
        call(f"Removing {where}", client().delete_object, Bucket=where.bucket, Key=where.key)


# -- the files of a local artifact (regular files only, never through a symlink) -------------------------------
def open_regular(path: Path, what: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise FormatError(f"{what} {path} cannot be opened ({error.strerror}).") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FormatError(f"{what} {path} is not a regular file.")
    return fd


def read_regular(path: Path, what: str) -> bytes:
    with os.fdopen(open_regular(path, what), "rb") as handle:
        return handle.read()


def read_resolved_config(directory: str | os.PathLike[str] | S3Url) -> dict[str, Any]:
    """The parsed ``resolved_config.json`` of an artifact; :class:`FormatError` when it is missing, not a regular
    file or not a JSON object."""
    path = location(directory) / RESOLVED_NAME
    raw = read_object(path) if isinstance(path, S3Url) else read_regular(path, "Resolved config")
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise FormatError(f"Resolved config {path} is not valid UTF-8 JSON ({error}).") from None
    if not isinstance(value, dict):
        raise FormatError(f"Resolved config {path} does not hold a JSON object.")
    return value
