"""Talking to the model hub without minutes of retries: one quick reachability probe per call, the local cache
when the hub cannot be reached, and one plain line naming the id when neither has it.

``huggingface_hub`` retries an unreachable host for about a minute before it gives up. gencache instead opens
one TCP connection to the hub endpoint (or the HTTPS proxy) with a short timeout, the first time a hub id is
used in a call (:func:`probe_scope`: a run, a dataset load); when that fails, or offline mode was asked for
(``HF_HUB_OFFLINE``), hub ids are read from the local cache only: transformers' loads get ``local_files_only``
(:func:`pretrained_kwargs`), and a hub dataset's load, for which ``datasets`` has no such argument, runs with the
libraries' offline constants set for that load alone (:func:`datasets_offline`, restored in ``finally``). The
environment is never changed; leaving the outermost scope forgets the probe, so a notebook whose one call found
the hub unreachable gets the hub back for its next call.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gencache.core.errors import ConfigError, DatasetError

PROBE_TIMEOUT_S = 3.0
OFFLINE_REASON = "HF_HUB_OFFLINE is set"
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class HubState:
    """Whether hub ids can be resolved online, and why not."""

    online: bool
    endpoint: str
    reason: str  # empty when online


_STATE: HubState | None = None


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def offline_requested() -> bool:
    """True when the user asked for offline mode (``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE`` or
    ``HF_DATASETS_OFFLINE``)."""
    return any(
        _truthy(os.environ.get(name)) for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _env_any(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def _probe_target(url: str) -> tuple[str, int]:
    proxy = _env_any("HTTPS_PROXY", "https_proxy") if url.startswith("https") else _env_any("HTTP_PROXY", "http_proxy")
    proxy = proxy or _env_any("ALL_PROXY", "all_proxy")
    parts = urlsplit(proxy if proxy else url)
    default = 443 if parts.scheme == "https" else 80
    return parts.hostname or "", parts.port or default


def probe(timeout: float = PROBE_TIMEOUT_S) -> HubState:
    """Open (and close) one TCP connection to the hub endpoint or the HTTPS proxy; no request is sent."""
    url = endpoint()
    host, port = _probe_target(url)
    if not host:
        return HubState(False, url, f"the hub endpoint {url!r} has no host name")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as error:
        return HubState(False, url, f"{url} cannot be reached ({error.strerror or error})")
    return HubState(True, url, "")


#: The module constants of the already-imported libraries a hub dataset's load reads (datasets reads its own and,
#: through huggingface_hub, the hub's).
_OFFLINE_CONSTANTS = (
    ("huggingface_hub.constants", "HF_HUB_OFFLINE"),
    ("datasets.config", "HF_HUB_OFFLINE"),
    ("datasets.config", "HF_DATASETS_OFFLINE"),
)
_LOCK = threading.RLock()
_DEPTH = 0


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in _TRUE


@contextlib.contextmanager
def probe_scope() -> Iterator[None]:
    """Within this block the hub is probed at most once (the first :func:`hub_state`); leaving the outermost block
    forgets the probe. Blocks nest (an inner one shares the outer one's probe)."""
    global _DEPTH, _STATE
    with _LOCK:
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                _STATE = None


def hub_state() -> HubState:
    """The hub's state: probed once per :func:`probe_scope`; outside a scope, a fresh probe."""
    global _STATE
    with _LOCK:
        if _DEPTH == 0:
            return _probe_or_requested()
        if _STATE is None:
            _STATE = _probe_or_requested()
        return _STATE


def _probe_or_requested() -> HubState:
    return HubState(False, endpoint(), OFFLINE_REASON) if offline_requested() else probe()


@contextlib.contextmanager
def datasets_offline(state: HubState | None) -> Iterator[None]:
    """A hub dataset's load while the hub cannot be reached (``state`` offline): ``datasets`` has no per-call
    switch, so its and huggingface_hub's offline constants are set for this block (the local datasets cache
    still serves what it holds) and put back afterwards. Blocks nest and overlap across threads: the first to
    enter saves the constants, the last to leave puts them back (a load in another thread at the same moment is
    offline too). Nothing changes for an online (or ``None``) state."""
    if state is None or state.online:
        yield
        return
    _OFFLINE.enter()
    try:
        yield
    finally:
        _OFFLINE.leave()


class _OfflineBlocks:
    """The blocks of :func:`datasets_offline` open now, in any thread, and the constants' values from before the
    first of them (a module imported while one is open is saved when the next block enters)."""

    def __init__(self) -> None:
        self.open = 0
        self.saved: dict[tuple[str, str], tuple[Any, Any]] = {}

    def enter(self) -> None:
        with _LOCK:
            self.open += 1
            for module_name, name in _OFFLINE_CONSTANTS:
                module = sys.modules.get(module_name)
                if module is not None and hasattr(module, name) and (module_name, name) not in self.saved:
                    self.saved[module_name, name] = (module, getattr(module, name))
                    setattr(module, name, True)

    def leave(self) -> None:
        with _LOCK:
            self.open -= 1
            if self.open == 0:
                for (_, name), (module, value) in self.saved.items():
                    setattr(module, name, value)
                self.saved.clear()


_OFFLINE = _OfflineBlocks()


def pretrained_kwargs(model_path: str, revision: str | None) -> dict[str, Any]:
    """The keyword arguments of a ``from_pretrained`` (or ``cached_file``) call for ``model_path``: the pinned
    revision, if any, and ``local_files_only`` when ``model_path`` is a hub id and the hub cannot be reached (the
    local cache serves it, or the call fails at once)."""
    kwargs = revision_kwargs(revision)
    if not os.path.isdir(model_path) and not hub_state().online:
        kwargs["local_files_only"] = True
    return kwargs


def revision_kwargs(revision: str | None) -> dict[str, Any]:
    """``{"revision": revision}`` for a ``from_pretrained`` call, or nothing when no revision is pinned."""
    return {"revision": revision} if revision else {}


def _hint(state: HubState) -> str:
    if state.reason == OFFLINE_REASON:
        return "download it into the local cache first (with the hub reachable) or give a local path"
    return "set HF_HUB_OFFLINE=1 if it is in a local cache elsewhere (HF_HOME), or give a local path"


def model_in_cache(repo_id: str, revision: str | None) -> bool:
    """True when the local hub cache holds the ``config.json`` of ``repo_id`` (at ``revision``)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    except Exception:  # an id the cache cannot even name (invalid repo id)
        return False
    return isinstance(found, str)


def require_model_id(field: str, repo_id: str, revision: str | None) -> None:
    """Refuse a hub model id that can be neither downloaded (hub unreachable) nor found in the local cache."""
    state = hub_state()
    if state.online or model_in_cache(repo_id, revision):
        return
    at = f" at revision {revision!r}" if revision else ""
    raise ConfigError(
        f"{field} {repo_id!r}{at} is a hub id, but {state.reason} and it is not in the local hub cache; {_hint(state)}."
    )


def dataset_unavailable(label: str, repo_id: str, error_line: str, hint: str = "") -> DatasetError:
    """The error for a hub dataset that failed to load while the hub is unreachable (or offline mode is on)."""
    state = hub_state()
    elsewhere = (
        "" if state.reason == OFFLINE_REASON else ", or set HF_HUB_OFFLINE=1 if it is cached elsewhere (HF_HOME)"
    )
    return DatasetError(
        f"could not load {label} from the hub dataset {repo_id!r}{hint}: {state.reason} and it is not in the local "
        f"datasets cache ({error_line}); set source to a local copy (a directory laid out by split, or one "
        f"file){elsewhere}."
    )
