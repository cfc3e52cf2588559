"""Real DataLoaders whose workers return the reader's own views (raw tensors, lists, dicts, Generation objects),
under fork and spawn and both sharing strategies: every entry arrives equal to a single-process read, nothing
hangs (DataLoader ``timeout``), and a view carries only its own bytes across processes."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing
from torch.utils.data import DataLoader, Dataset

from gencache.artifact.cache import Generation
from gencache.artifact.mixture import open_caches
from gencache.artifact.reader import CacheReader
from support.storage_helpers import make_entries, write_artifact

LENGTH = 4_000  # 32 kB per sequence


class Views(Dataset[Any]):
    """Returns what a reader hands out, in one of several containers, without copying."""

    def __init__(self, path: Path, shape: str) -> None:
        self.reader = CacheReader(path)
        self.keys = list(self.reader)
        self.shape = shape

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> Any:
        if self.shape == "raw+generation":  # both in one worker round trip: a raw view and another entry's object
            return self.reader[self.keys[i]].sequences[0], self.reader[self.keys[len(self.keys) - 1 - i]]
        generation = self.reader[self.keys[i]]
        if self.shape == "raw":
            return generation.sequences[0]
        if self.shape == "head":  # a view of a view, of one length for every entry
            return generation.sequences[0][:LENGTH]
        if self.shape == "list":
            return list(generation.sequences)
        if self.shape == "dict":
            return {"key": generation.key, "sequences": generation.sequences, "texts": generation.texts}
        return generation


def use_strategy(strategy: str, _worker: int) -> None:
    torch.multiprocessing.set_sharing_strategy(strategy)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_artifact(tmp_path_factory.mktemp("loader") / "out", make_entries(24, length=LENGTH, sequences=2))


@pytest.fixture
def strategy(request: pytest.FixtureRequest) -> Iterator[str]:
    before = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy(request.param)
    yield request.param
    torch.multiprocessing.set_sharing_strategy(before)


def expected(path: Path, shape: str) -> list[Any]:
    data = Views(path, shape)
    return [data[i] for i in range(len(data))]


def same(got: Any, want: Any) -> bool:
    if isinstance(want, torch.Tensor):
        return isinstance(got, torch.Tensor) and got.dtype == want.dtype and torch.equal(got, want)
    if isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, dict):
        return got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
    if isinstance(want, Generation):
        return (
            isinstance(got, Generation)
            and got.key == want.key
            and same(got.sequences, want.sequences)
            and got.texts == want.texts
            and got.finish_reasons == want.finish_reasons
        )
    return bool(got == want)


def run(path: Path, shape: str, context: str, strategy: str, workers: int) -> None:
    loader = DataLoader(
        Views(path, shape),
        batch_size=None,
        num_workers=workers,
        multiprocessing_context=context,
        timeout=120,
        worker_init_fn=_init_for(strategy) if context == "spawn" else None,
    )
    got = list(loader)
    want = expected(path, shape)
    assert len(got) == len(want) == 24
    for g, w in zip(got, want, strict=True):
        assert same(g, w)


def _init_for(strategy: str) -> Any:
    import functools

    # a spawned worker starts with the default strategy whatever the parent set (torch's behaviour)
    return functools.partial(use_strategy, strategy)


@pytest.mark.parametrize("strategy", ["file_descriptor", "file_system"], indirect=True)
@pytest.mark.parametrize(("shape", "workers"), [("raw", 2), ("list", 3), ("dict", 4), ("generation", 2)])
def test_forked_workers_return_views(artifact: Path, strategy: str, shape: str, workers: int) -> None:
    run(artifact, shape, "fork", strategy, workers)


@pytest.mark.slow  # spawned workers each import torch
@pytest.mark.parametrize("strategy", ["file_descriptor", "file_system"], indirect=True)
def test_spawned_workers_return_views(artifact: Path, strategy: str) -> None:
    # raw views and Generation objects in the same items: one set of spawned workers (each imports torch) for both
    run(artifact, "raw+generation", "spawn", strategy, 2)


def test_batched_default_collate_still_works(artifact: Path) -> None:
    loader = DataLoader(
        Views(artifact, "head"), batch_size=4, num_workers=2, multiprocessing_context="fork", timeout=120
    )
    batches = list(loader)
    assert all(batch.shape == (4, LENGTH) for batch in batches)
    rows = [row for batch in batches for row in batch]
    assert all(torch.equal(a, b) for a, b in zip(rows, expected(artifact, "head"), strict=True))


def test_a_view_pickles_as_its_own_bytes_not_the_payload(artifact: Path) -> None:
    reader = CacheReader(artifact)
    view = reader[next(iter(reader))].sequences[0]
    payload = (artifact / "cache.safetensors").stat().st_size
    assert view.numel() * 8 * 20 < payload
    assert len(pickle.dumps(view)) < view.numel() * 8 + 2048
    assert torch.equal(pickle.loads(pickle.dumps(view)), view)


def test_a_mixture_works_in_workers(artifact: Path, tmp_path: Path) -> None:
    other = write_artifact(tmp_path / "other", make_entries(6, length=50, start=100))
    mixture = open_caches([artifact, other])

    class Keys(Dataset[Generation]):
        def __len__(self) -> int:
            return len(keys)

        def __getitem__(self, i: int) -> Generation:
            return mixture[keys[i]]

    keys = list(mixture)
    got = list(DataLoader(Keys(), batch_size=None, num_workers=2, multiprocessing_context="fork", timeout=120))
    assert [g.key for g in got] == keys
    assert all(same(g, mixture[g.key]) for g in got)
