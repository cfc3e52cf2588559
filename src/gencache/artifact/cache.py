"""What every generation cache offers, one artifact (:class:`gencache.artifact.reader.CacheReader`) or a mixture
(:class:`gencache.artifact.mixture.MultiCacheReader`): a read-only mapping from semantic key to :class:`Generation`,
the entries as numpy arrays, the missing-key errors and the provenance check against a training setup."""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gencache.artifact.manifest import PROVENANCE_FIELDS
from gencache.artifact.resolved import local_identity, nested
from gencache.artifact.store import Location, read_resolved_config
from gencache.core.errors import CompatibilityError, FormatError, MissingEntriesError, MissingEntryError
from gencache.core.tokenizer import tokenizer_state

if TYPE_CHECKING:
    import torch


@dataclass(eq=False, slots=True)
class Generation:
    """The teacher's answer for one key: 1-D int64 CPU tensors (zero-copy views of the payload map), texts and
    finish reasons, one of each per returned sequence. Not frozen: a frozen dataclass costs a third of a read."""

    key: str
    sequences: tuple[torch.Tensor, ...]
    texts: tuple[str, ...]
    finish_reasons: tuple[str, ...]


@dataclass(eq=False, slots=True)
class GenerationArrays:
    """The same entry as :class:`Generation` with each sequence as a read-only 1-D little-endian int64 numpy array
    (what :meth:`GenerationCache.get_arrays` returns, with no torch involved)."""

    key: str
    sequences: tuple[np.ndarray[Any, np.dtype[np.int64]], ...]
    texts: tuple[str, ...]
    finish_reasons: tuple[str, ...]


class GenerationCache(Mapping[str, Generation], abc.ABC):
    """A read-only mapping from semantic key to :class:`Generation`.

    ``cache[key]`` raises :class:`MissingEntryError` (a ``KeyError``) for a key the cache does not hold;
    ``get``, ``in``, ``len``, iteration (keys in sorted order), ``keys()``, ``items()`` and ``values()`` behave as
    for any mapping (``items()`` and ``values()`` read every entry they yield). Two caches are equal only when
    they are the same object (comparing every entry's tensors is never what a caller means).
    """

    provenance: dict[str, Any]
    provenance_digest: str
    paths: tuple[Location, ...]  # the artifact directories (or ``s3://`` prefixes) read

    def _describe(self) -> str:
        return str(self.paths[0]) if len(self.paths) == 1 else f"({', '.join(map(str, self.paths))})"

    @abc.abstractmethod
    def _position(self, key: object) -> int:
        """Where ``key`` is held (implementation-defined), or -1."""

    @abc.abstractmethod
    def _entry(self, position: int) -> tuple[list[np.ndarray[Any, Any]], tuple[str, ...], tuple[str, ...]]:
        """The entry at ``position``: its sequences as views of the payload map, its texts and finish reasons."""

    @abc.abstractmethod
    def metadata(self, key: str) -> dict[str, Any] | None:
        """The manifest entry of ``key`` (tensor refs, texts, finish reasons, digests) as a new object, or None."""

    def __getitem__(self, key: str) -> Generation:
        """The entry of ``key``: zero-copy int64 views of one private memory map of the payload, its texts and
        finish reasons. ``.clone()`` a tensor before modifying it in place: an in-place edit would change what
        later reads of that key return in this process (the file itself is never written)."""
        arrays, texts, reasons = self._entry(self._found(key))
        import torch

        # each tensor's storage is exactly its own bytes of the map (zero-copy; it keeps the map alive), so
        # pickling it for another process carries only these bytes, never the whole payload
        return Generation(key, tuple(map(torch.from_numpy, arrays)), texts, reasons)

    def __contains__(self, key: object) -> bool:
        return self._position(key) >= 0

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def get_arrays(self, key: str) -> GenerationArrays:
        """``cache[key]`` with the sequences as read-only numpy arrays, checked the same way; a reader serves them
        without importing torch (what ``gencache export`` uses)."""
        arrays, texts, reasons = self._entry(self._found(key))
        for array in arrays:
            array.flags.writeable = False
        return GenerationArrays(key, tuple(arrays), texts, reasons)

    def get_many(self, keys: Iterable[str]) -> list[Generation]:
        """The entries of ``keys``, in order (repeats allowed), as one batch. Every key is looked up before any
        entry is read: :class:`MissingEntriesError` names how many are missing."""
        wanted = keys if isinstance(keys, (str, bytes)) else list(keys)
        self.require(wanted)
        return [self[key] for key in wanted]

    def _found(self, key: object) -> int:
        """Where ``key`` is held; :class:`MissingEntryError` when the cache does not hold it."""
        if (position := self._position(key)) < 0:
            raise MissingEntryError(
                f"Key {key!r} is not in the cache {self._describe()}; the sample was not generated for this artifact "
                "(check the data configs, or use .get() to test membership)."
            )
        return position

    def require(self, keys: Iterable[str]) -> None:
        """Coverage check: raise :class:`MissingEntriesError` unless every key is present (reads no entry).
        ``keys`` is an iterable of keys; one string is a ``TypeError``."""
        if isinstance(keys, (str, bytes)):
            raise TypeError(f"Give an iterable of keys, not one {type(keys).__name__}; wrap a single key in a list.")
        wanted = set(keys)
        missing = sorted(key for key in wanted if self._position(key) < 0)
        if missing:
            raise MissingEntriesError(
                f"Generation cache {self._describe()} is missing {len(missing)} required semantic samples "
                f"(of {len(wanted)} unique keys; first: {missing[0]}); generate an artifact for those data configs "
                "or add the artifact that holds them."
            )

    def _same_directory(self, field: str, requested: object) -> bool:
        """Whether ``requested`` is the local directory whose identity the artifact recorded for the path ``field``
        (none is recorded for a hub id or the other fields)."""
        if field not in ("model_path", "tokenizer_path") or not isinstance(requested, str):
            return False
        try:
            recorded = nested(read_resolved_config(self.paths[0]), "model", "identity", field)
        except FormatError:
            return False
        return isinstance(recorded, str) and recorded == local_identity(requested)

    def check_compatible(
        self, *, model_path: str, tokenizer_path: str, dtype: str | torch.dtype, tokenizer: Any
    ) -> None:
        """Raise one :class:`CompatibilityError` naming every provenance field that differs from the training
        setup (dtype as a string or ``torch.dtype``, the tokenizer state, and the paths as strings, where a local
        directory given by another string, relative or moved, matches when its identity is the one the artifact
        recorded at generation: :func:`gencache.artifact.resolved.local_identity`)."""
        ours = self.provenance
        requested = {
            "model_path": model_path,
            "tokenizer_path": tokenizer_path,
            "dtype": str(dtype).removeprefix("torch."),  # a torch.dtype's name
            "tokenizer": tokenizer_state(tokenizer),
        }
        differences = [
            f"{field} (cache {ours[field]!r}, requested {requested[field]!r})"
            for field in PROVENANCE_FIELDS
            if ours[field] != requested[field] and not self._same_directory(field, requested[field])
        ]
        if differences:
            fix = (
                "pass the training tokenizer through gencache.prepare_tokenizer() so its padding side and pad id "
                "match generation, or regenerate the cache with this teacher"
                if ours["tokenizer"] != requested["tokenizer"]
                else "train with the cache's teacher, tokenizer and dtype, or regenerate the cache with this teacher"
            )
            raise CompatibilityError(
                f"Generation cache {self._describe()} is incompatible with the training setup: "
                f"{'; '.join(differences)}. To fix it, {fix}."
            )
