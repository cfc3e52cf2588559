"""A small file (an export, an audit report, a cached reader index) is written whole or not at all, by one function:
readers see the old file or the new one, never a part; nothing temporary stays behind; concurrent writers of the
same file never share a temporary file."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from gencache.artifact.publish import publish_file
from gencache.core.errors import WriteError


def writes(data: bytes) -> Callable[[IO[bytes]], int]:
    def write(handle: IO[bytes]) -> int:
        return handle.write(data)

    return write


def test_a_file_is_written_and_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    assert publish_file(target, writes(b"first")) == 5
    assert publish_file(target, writes(b"second")) == 6
    assert target.read_bytes() == b"second" and os.listdir(tmp_path) == ["report.json"]


def test_without_replace_an_existing_file_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    target.write_bytes(b"theirs")
    with pytest.raises(FileExistsError):
        publish_file(target, writes(b"ours"), replace=False)
    assert target.read_bytes() == b"theirs" and os.listdir(tmp_path) == ["out.jsonl"]


def test_a_failing_write_leaves_the_old_file_and_nothing_temporary(tmp_path: Path) -> None:
    target = tmp_path / "index.idx"
    target.write_bytes(b"old")

    def fail(handle: IO[bytes]) -> None:
        handle.write(b"half")
        raise RuntimeError("the writer failed")

    with pytest.raises(RuntimeError, match="the writer failed"):
        publish_file(target, fail)
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["index.idx"]


def test_an_unwritable_directory_is_one_write_error_naming_the_file(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "report.json"
    with pytest.raises(WriteError, match=f"Writing {target} failed"):
        publish_file(target, writes(b"x"))


def test_concurrent_writers_of_one_file_each_write_it_whole(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    contents = [bytes([65 + n]) * 100_000 for n in range(8)]
    errors: list[BaseException] = []

    def one(data: bytes) -> None:
        try:
            publish_file(target, writes(data))
        except BaseException as error:  # collected: the assertion below names it
            errors.append(error)

    threads = [threading.Thread(target=one, args=(data,)) for data in contents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and target.read_bytes() in contents and os.listdir(tmp_path) == ["report.json"]
