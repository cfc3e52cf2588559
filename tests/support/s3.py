"""A real S3 API server for the tests: moto's server on 127.0.0.1, one per session (``s3_server``); a fresh bucket
per test with the AWS environment set (``s3_env``); and :class:`FaultProxy`, which stands between a client and the
server to answer chosen requests with 503 SlowDown or to hold their responses, so that retries and failures are
injected from outside the product.

The client is configured only by the AWS SDKs' standard environment (the endpoint, test credentials, the region,
empty config files so that ``~/.aws`` is never read), which reaches the product both in-process and in the children
a test starts. conftest.py loads this module in every session, so boto3 is imported only when a client is made: a
machine without it (a lent GPU machine running only tests/test_gpu.py) still runs its tests.
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

#: Variables of a developer's shell that would send boto3 elsewhere (a named profile, a real S3 endpoint, a token).
UNSET = ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN")

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message><RequestId>fault-proxy</RequestId></Error>"
)
SLOW_DOWN_HEADERS = [("Content-Type", "application/xml"), ("Content-Length", str(len(SLOW_DOWN)))]


def set_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


class S3Server:
    """``python -m moto.server`` as a child process on a fixed local port.

    moto keeps every bucket and object in memory: :meth:`stop` then :meth:`start` gives an *empty* server on the
    same endpoint (a test that restarts it creates its bucket again)."""

    def __init__(self, directory: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port: int = probe.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        empty = directory / "aws-config-empty"
        empty.touch()
        self.env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": str(empty),
            "AWS_SHARED_CREDENTIALS_FILE": str(empty),
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        self.log = directory / "moto.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        """Start the server (nothing if it runs) and wait until it answers HTTP."""
        if self.process is not None:
            return
        with self.log.open("ab") as log:
            command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"moto's S3 server did not answer on {self.endpoint}; its log:\n{self.log.read_text()}")
            time.sleep(0.1)

    def answers(self) -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            connection.request("GET", "/")
            connection.getresponse().read()
            return True
        except OSError:
            return False
        finally:
            connection.close()

    def stop(self) -> None:
        """Stop the server; everything it held is lost."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def client(self, endpoint: str | None = None, **config: Any) -> Any:
        """A boto3 S3 client on this server, or on ``endpoint`` (a :class:`FaultProxy` in front of it); ``config``
        goes to ``botocore.config.Config`` (``retries={"mode": "standard", "max_attempts": 5}``). It is made in
        this server's environment whatever the process's is."""
        import boto3
        from botocore.config import Config

        with pytest.MonkeyPatch.context() as monkeypatch:
            set_env(monkeypatch, self.env)
            return boto3.client("s3", endpoint_url=endpoint or self.endpoint, config=Config(**config))


@dataclass
class S3Env:
    """One test's bucket on the session's server, the environment already set for the test."""

    bucket: str
    client: Any
    env: dict[str, str]

    def url(self, path: str = "") -> str:
        return f"s3://{self.bucket}/{path}"

    def keys(self, prefix: str = "") -> list[str]:
        """The keys of the objects under ``prefix``, sorted."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def uploads(self, prefix: str = "") -> list[dict[str, Any]]:
        """The multipart uploads under ``prefix`` that were neither completed nor aborted (boto3's dicts)."""
        pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=prefix)
        return [upload for page in pages for upload in page.get("Uploads", [])]


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's S3 server, started once per session (see :class:`S3Server` for stopping and restarting it)."""
    server = S3Server(tmp_path_factory.mktemp("s3-server"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Env:
    """A fresh bucket, with the server's AWS environment set for the test (its children inherit it). A test that
    puts a :class:`FaultProxy` in front sets ``AWS_ENDPOINT_URL`` to the proxy's endpoint itself."""
    s3_server.start()  # a test that stopped it and failed before restarting it
    set_env(monkeypatch, s3_server.env)
    client = s3_server.client()
    bucket = f"gencache-test-{uuid.uuid4().hex[:16]}"
    client.create_bucket(Bucket=bucket)
    return S3Env(bucket, client, dict(s3_server.env))


@dataclass
class Fault:
    method: str | None
    match: str | None
    times: int | None  # how many more requests it applies to; None: every one
    delay: float  # seconds to hold the response; 0: answer 503 SlowDown instead of forwarding


class FaultProxy:
    """An HTTP proxy in front of ``upstream`` that forwards each request unchanged and returns the answer unchanged,
    except those a fault matches. ``requests``, ``sent`` (request body bytes) and ``received`` (response body bytes)
    count, by method, every request the proxy answered, faults included::

        with FaultProxy(s3_server.endpoint) as proxy:
            proxy.fail(2, method="PUT", match="partNumber=")
            client = s3_server.client(proxy.endpoint, retries={"mode": "standard", "max_attempts": 5})
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = urllib.parse.urlsplit(upstream).netloc
        self.faults: list[Fault] = []
        self.requests: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()
        self.received: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), _handler(self))
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def fail(self, times: int, method: str | None = None, match: str | None = None) -> None:
        """Answer the next ``times`` requests with this method and ``match`` in their path and query with 503."""
        self.faults.append(Fault(method, match, times, 0.0))

    def delay(
        self, seconds: float, method: str | None = None, match: str | None = None, times: int | None = None
    ) -> None:
        """Hold the responses to the matching requests (the next ``times`` of them, or all) for ``seconds``."""
        self.faults.append(Fault(method, match, times, seconds))

    def take(self, method: str, path: str, sent: int) -> Fault | None:
        """Count a request and take the first fault that matches it."""
        with self.lock:
            self.requests[method] += 1
            self.sent[method] += sent
            for fault in self.faults:
                if fault.method in (None, method) and (fault.match is None or fault.match in path):
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times == 0:
                            self.faults.remove(fault)
                    return fault
        return None

    def __enter__(self) -> FaultProxy:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up on a held response
            super().handle_error(request, client_address)


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            fault = proxy.take(self.command, self.path, len(body))
            if fault is not None and not fault.delay:
                self.answer(503, SLOW_DOWN_HEADERS, SLOW_DOWN)
                return
            headers = {name: value for name, value in self.headers.items() if name.lower() != "expect"}
            connection = http.client.HTTPConnection(proxy.upstream, timeout=60)
            try:
                connection.request(self.command, self.path, body, headers)
                response = connection.getresponse()
                answer = response.read()
            finally:
                connection.close()
            if fault is not None:
                time.sleep(fault.delay)
            kept = [(k, v) for k, v in response.getheaders() if k.lower() not in ("connection", "transfer-encoding")]
            if self.command != "HEAD" and response.getheader("Content-Length") is None:
                kept.append(("Content-Length", str(len(answer))))
            self.answer(response.status, kept, answer)

        def answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
            with proxy.lock:
                proxy.received[self.command] += len(body)
            self.send_response_only(status)
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = forward

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
