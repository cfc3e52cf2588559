"""A real headless Chromium driven over the DevTools protocol with the standard library only: the browser is started
with ``--remote-debugging-pipe`` (it reads commands on its fd 3 and writes replies and events on its fd 4, each a
JSON message ended by a NUL byte), a page is opened in a fresh target, and what it logged, threw and requested is
collected while it loads."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> str | None:
    """The first Chromium-family binary on PATH (Debian's package installs ``chromium``)."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageLoad:
    """What a page did while it loaded: console messages and log entries by level, exceptions thrown, and the URL
    of every request it made (the page's own included)."""

    console: list[tuple[str, str]] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


def _high(*fds: int) -> tuple[int, ...]:
    """``fds`` moved to descriptors above 4 (so that wiring 3 and 4 in the child never overwrites one of them)."""
    import fcntl

    moved = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in fds)
    for fd in fds:
        os.close(fd)
    return moved


class Browser:
    """One headless Chromium process and its DevTools pipe."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_browser_read, self._to_browser = _high(*os.pipe())
        self._from_browser, from_browser_write = _high(*os.pipe())

        def wire() -> None:  # the protocol's fixed descriptors in the child: commands on 3, replies on 4
            os.dup2(to_browser_read, 3)  # inheritable; every other descriptor of this process closes on exec
            os.dup2(from_browser_write, 4)

        self.process = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=wire,
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the browser did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise RuntimeError("the browser closed its DevTools pipe")
                self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        decoded: dict[str, Any] = json.loads(message)
        return decoded

    def call(self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None) -> Any:
        """Send one command and return its result (events that arrive meanwhile are kept in :attr:`events`)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 60
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 60) -> dict[str, Any]:
        """The first event ``method`` (one already received, or the next to arrive)."""
        for event in self.events:
            if event.get("method") == method:
                return event
        deadline = time.monotonic() + timeout
        while True:
            event = self._read_message(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close")
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


@contextmanager
def chromium(binary: str, profile: Path) -> Iterator[Browser]:
    browser = Browser(binary, profile)
    try:
        yield browser
    finally:
        browser.close()


def load_page(browser: Browser, url: str) -> tuple[str, PageLoad]:
    """Open ``url`` in a fresh target with the console, the log and the network watched, wait for its load event
    and a moment of quiet after it; the session id and what the page did."""
    target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.call(f"{domain}.enable", session=session)
    browser.events.clear()
    browser.call("Page.navigate", {"url": url}, session=session)
    browser.wait_for("Page.loadEventFired")
    browser.call(
        "Runtime.evaluate",
        {"expression": "new Promise(r => setTimeout(r, 300))", "awaitPromise": True},
        session=session,
    )
    load = PageLoad()
    for event in browser.events:
        if event.get("sessionId") != session:
            continue
        params = event.get("params", {})
        method = event.get("method")
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", []))
            load.console.append((params.get("type", ""), text))
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            load.console.append((entry.get("level", ""), entry.get("text", "")))
        elif method == "Runtime.exceptionThrown":
            load.exceptions.append(json.dumps(params.get("exceptionDetails", {}))[:500])
        elif method == "Network.requestWillBeSent":
            load.requests.append(params.get("request", {}).get("url", ""))
    return session, load


def evaluate(browser: Browser, session: str, expression: str) -> Any:
    """The value of a JavaScript expression in the page (returned by value)."""
    result = browser.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
    return result["result"].get("value")


def screenshot(browser: Browser, session: str, path: Path) -> bytes:
    """A PNG of the whole page, written to ``path``."""
    data = base64.b64decode(
        browser.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=session)[
            "data"
        ]
    )
    path.write_bytes(data)
    return data
