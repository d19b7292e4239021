"""A real S3 API on loopback for the tests and benchmarks: moto's server, behind a small proxy
that can answer chosen requests with an HTTP error (500, 403) before they reach moto, and that
counts the requests and bytes that pass.

moto implements S3 (listing, ETags, conditional writes, versioning) but cannot be told to fail
one object; the proxy does, so the client sees the real status on the wire, with S3's XML
error body. Use `running_s3()` (a context manager) or the `s3` fixture in tests/conftest.py;
`S3Server.settings()` gives the `object_store:` section that reaches it through the proxy,
with its keys read from the environment variables `KEY_ENV` and `SECRET_ENV`. moto, boto3 and
s3fs are test dependencies (the `dev` extra), imported only when a server starts.
"""

from __future__ import annotations

import http.client
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: The variables the test settings name for the keys (moto accepts any non-empty keys).
KEY_ENV = "CLEF_TEST_S3_KEY"
SECRET_ENV = "CLEF_TEST_S3_SECRET"
KEY = "clef-test-key-id"
SECRET = "clef-test-secret-value"
REGION = "us-east-1"


@dataclass
class Rule:
    """Answer requests whose method and path (`/bucket/key?query`) match with `status`."""

    status: int
    path: re.Pattern[str]
    method: str | None = None
    code: str = "InternalError"


@dataclass
class Traffic:
    """What went through the proxy: requests by method, and bytes up and down."""

    requests: dict[str, int] = field(default_factory=dict)
    gets: list[str] = field(default_factory=list)
    bytes_in: int = 0
    bytes_out: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.gets.clear()
            self.bytes_in = self.bytes_out = 0

    def object_gets(self) -> list[str]:
        """Paths of GET requests for objects (a listing is a GET of the bucket with a query)."""
        with self.lock:
            return [p for p in self.gets if "list-type=" not in p and p.count("/") >= 2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        return

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _relay(self) -> None:
        body = self._body()
        s3: S3Server = self.server.s3
        with s3.traffic.lock:
            s3.traffic.requests[self.command] = s3.traffic.requests.get(self.command, 0) + 1
            s3.traffic.bytes_in += len(body)
            if self.command == "GET":
                s3.traffic.gets.append(self.path)
        for rule in list(s3.rules):
            if (rule.method in (None, self.command)) and rule.path.search(self.path):
                self._error(rule)
                return
        conn = http.client.HTTPConnection("127.0.0.1", s3.moto_port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding",)}
        headers["Content-Length"] = str(len(body))
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        with s3.traffic.lock:
            s3.traffic.bytes_out += len(data)
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        length = resp.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
        self.send_header("Content-Length", length or "0")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        conn.close()

    def _error(self, rule: Rule) -> None:
        message = "Access Denied" if rule.status == 403 else "We encountered an internal error."
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{rule.code}</Code><Message>{message}</Message>"
            f"<Resource>{self.path}</Resource><RequestId>proxy</RequestId></Error>"
        ).encode()
        self.send_response(rule.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _relay  # noqa: N815


class S3Server:
    """moto's S3 on a loopback port, and the proxy in front of it (`endpoint`)."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.moto_port = _free_port()
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=self.moto_port, verbose=False)
        self.rules: list[Rule] = []
        self.traffic = Traffic()
        self._proxy = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
        self._proxy.daemon_threads = True
        self._proxy.s3 = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._proxy.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The proxy's URL: what the code under test is given."""
        return f"http://127.0.0.1:{self._proxy.server_address[1]}"

    @property
    def moto_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.moto_port}"

    def start(self) -> S3Server:
        self._moto.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._proxy.shutdown()
        self._proxy.server_close()
        self._moto.stop()

    def fail(self, path_pattern: str, status: int, method: str | None = "GET") -> None:
        """Answer matching requests with `status` (403 as AccessDenied, else InternalError)."""
        code = "AccessDenied" if status == 403 else "InternalError"
        self.rules.append(Rule(status, re.compile(path_pattern), method, code))

    def heal(self) -> None:
        self.rules.clear()

    def env(self) -> dict[str, str]:
        """The variables the test settings read the keys from."""
        return {KEY_ENV: KEY, SECRET_ENV: SECRET}

    def settings(self) -> dict[str, Any]:
        """The `object_store:` section that reaches this server through the proxy."""
        return {
            "endpoint_url": self.endpoint,
            "region": REGION,
            "access_key_id_env": KEY_ENV,
            "secret_access_key_env": SECRET_ENV,
            # One attempt: a 500 the proxy sends stays a 500 (the client's retries would only
            # add seconds, and the rule answers every attempt the same).
            "max_attempts": 1,
        }

    def client(self) -> Any:
        """A boto3 client straight to moto (setting up buckets is not what is tested)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.moto_endpoint,
            region_name=REGION,
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
        )

    def bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name


@contextmanager
def running_s3() -> Iterator[S3Server]:
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()
