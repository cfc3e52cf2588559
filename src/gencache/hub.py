"""Talking to the model hub without minutes of retries: one quick reachability probe per process, the local cache
when the hub cannot be reached, and one plain line naming the id when neither has it.

``huggingface_hub`` retries an unreachable host for about a minute before it gives up. gencache instead opens
one TCP connection to the hub endpoint (or the HTTPS proxy) with a short timeout, the first time a hub id is
used; when that fails, the libraries are switched to their offline mode for the rest of the process, so what is
in the local cache still loads and everything else fails at once. ``HF_HUB_OFFLINE=1`` skips the probe.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from gencache.errors import ConfigError, DatasetError

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
        os.environ.get(name, "").strip().lower() in _TRUE
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
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


def go_offline() -> None:
    """Switch ``huggingface_hub``, ``transformers`` and ``datasets`` to their offline mode for this process (the
    local cache still serves what it holds)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    import sys

    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]
    datasets_config = sys.modules.get("datasets.config")
    if datasets_config is not None:
        datasets_config.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]
        if hasattr(datasets_config, "HF_DATASETS_OFFLINE"):
            datasets_config.HF_DATASETS_OFFLINE = True  # type: ignore[attr-defined]


def hub_state() -> HubState:
    """The hub's state for this process: probed once; offline mode when asked for or when the probe fails."""
    global _STATE
    if _STATE is None:
        _STATE = HubState(False, endpoint(), OFFLINE_REASON) if offline_requested() else probe()
        if not _STATE.online:
            go_offline()
    return _STATE


def reset() -> None:
    """Forget the probe (tests)."""
    global _STATE
    _STATE = None


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


__all__ = [
    "HubState",
    "dataset_unavailable",
    "go_offline",
    "hub_state",
    "model_in_cache",
    "probe",
    "require_model_id",
    "reset",
]
