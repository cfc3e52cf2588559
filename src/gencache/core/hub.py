"""Talking to the model hub without minutes of retries: one quick reachability probe per process, the local cache
when the hub cannot be reached, and one plain line naming the id when neither has it.

``huggingface_hub`` retries an unreachable host for about a minute before it gives up. gencache instead opens
one TCP connection to the hub endpoint (or the HTTPS proxy) with a short timeout, the first time a hub id is
used; when that fails, the libraries are switched to their offline mode, so what is in the local cache still loads
and everything else fails at once. ``HF_HUB_OFFLINE=1`` skips the probe.

Both the probe and the offline switch last for one :func:`offline_scope` (a run, a dataset load): leaving the
outermost scope restores the environment variables and the libraries' constants it changed and forgets the probe,
so a notebook whose one call found the hub unreachable gets the hub back for its next call. Outside any scope,
:func:`hub_state` probes but changes nothing.
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


#: The environment variables offline mode sets (read by the libraries imported after it is switched on).
_OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
#: The module constants the already-imported libraries read instead (transformers reads huggingface_hub's).
_OFFLINE_CONSTANTS = (
    ("huggingface_hub.constants", "HF_HUB_OFFLINE"),
    ("datasets.config", "HF_HUB_OFFLINE"),
    ("datasets.config", "HF_DATASETS_OFFLINE"),
)
_ABSENT = object()


class _Scope:
    """The open scopes' depth and what switching offline changed (restored when the outermost one closes)."""

    def __init__(self) -> None:
        self.depth = 0
        self.saved_env: dict[str, str | None] | None = None
        self.saved_constants: dict[tuple[str, str], Any] = {}


_SCOPE = _Scope()
_LOCK = threading.RLock()


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in _TRUE


def _constant_from_env(module: str, name: str) -> bool:
    """The value ``module.name`` takes when the library is imported with the current environment."""
    hub_offline = _truthy(os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE"))
    if module == "datasets.config":
        own = os.environ.get("HF_DATASETS_OFFLINE")
        return hub_offline if own is None else _truthy(own)
    return hub_offline


def _go_offline() -> None:
    """Switch ``huggingface_hub``, ``transformers`` and ``datasets`` to their offline mode until the scope closes
    (the local cache still serves what it holds). The first switch in a scope saves what it changes; a library
    imported after it read the switched environment, so it has nothing of its own to save."""
    first = _SCOPE.saved_env is None
    if first:
        _SCOPE.saved_env = {name: os.environ.get(name) for name in _OFFLINE_ENV}
    for name in _OFFLINE_ENV:
        os.environ[name] = "1"
    for module_name, name in _OFFLINE_CONSTANTS:
        module = sys.modules.get(module_name)
        if module is None or not hasattr(module, name):
            continue
        if first:
            _SCOPE.saved_constants[(module_name, name)] = getattr(module, name)
        setattr(module, name, True)


def _restore() -> None:
    """Undo :func:`_go_offline`: the environment as the scope found it; the constants of libraries imported before
    the switch as they were, those of libraries imported since as their import would have set them."""
    if _SCOPE.saved_env is None:
        return
    for name, value in _SCOPE.saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    for module_name, name in _OFFLINE_CONSTANTS:
        module = sys.modules.get(module_name)
        if module is None or not hasattr(module, name):
            continue
        saved = _SCOPE.saved_constants.get((module_name, name), _ABSENT)
        setattr(module, name, _constant_from_env(module_name, name) if saved is _ABSENT else saved)
    _SCOPE.saved_env, _SCOPE.saved_constants = None, {}


@contextlib.contextmanager
def offline_scope() -> Iterator[None]:
    """Within this block the hub is probed at most once and, when it cannot be reached (or offline mode was asked
    for), the libraries are in offline mode; leaving the outermost block restores the environment variables and
    library constants that were changed and forgets the probe. Blocks nest (an inner one shares the outer one's)."""
    global _STATE
    with _LOCK:
        _SCOPE.depth += 1
    try:
        yield
    finally:
        with _LOCK:
            _SCOPE.depth -= 1
            if _SCOPE.depth == 0:
                _restore()
                _STATE = None


def hub_state() -> HubState:
    """The hub's state: probed once per :func:`offline_scope`, which it switches to offline mode when asked for or
    when the probe fails; outside a scope, a fresh probe that changes nothing."""
    global _STATE
    with _LOCK:
        if _SCOPE.depth == 0:
            return _probe_or_requested()
        if _STATE is None:
            _STATE = _probe_or_requested()
        if not _STATE.online:
            _go_offline()
        return _STATE


def _probe_or_requested() -> HubState:
    return HubState(False, endpoint(), OFFLINE_REASON) if offline_requested() else probe()


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
