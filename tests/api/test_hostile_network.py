"""Issue 54 (High 4, 5): the HTTP API as a hostile network sees it, over the real `api` server
settings (`api_uvicorn_config`) on loopback: slow clients cannot hold connections or starve a
normal request, and what a browser can be made to send (DNS rebinding, CSRF) is refused."""

from __future__ import annotations

import os
import resource
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import httpx
import pytest

from tests.retrieval.conftest import QUERY

SLOW_CONNECTIONS = 2000


#: The connection cap of the test (the default, 1000, works the same way).
CAP = 500


@contextmanager
def file_descriptors_for(sockets: int) -> Iterator[None]:
    """Room for the test's client sockets and the server's, which live in this one process.
    Not lower: asyncio accepts a burst of waiting connections before the cap sees any of them,
    so a limit just above the cap would fail the test by chance, not by the server's fault."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = len(os.listdir("/proc/self/fd")) + sockets + 1000
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"the hard file descriptor limit ({hard}) is below {wanted}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _hung_up(sock: socket.socket, within_s: float = 10.0) -> bytes | None:
    """What the server sent before hanging up (b"" for nothing); None if it kept the line."""
    sock.settimeout(within_s)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return got


def test_2000_slow_connections_do_not_lock_out_a_normal_request(
    collection_factory: Any, api_factory: Any
) -> None:
    api = api_factory(collection_factory(None), max_connections=CAP)
    slow: list[socket.socket] = []
    with file_descriptors_for(2 * SLOW_CONNECTIONS), _closing(slow):
        for i in range(SLOW_CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", api.served.port), timeout=10)
            if i % 2:  # half send the start of a request, the other half nothing at all
                _send(sock, b"GET /v1/collections HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            slow.append(sock)
        for sock in slow[1::2]:
            _send(sock, b"X-Slow: 1\r\n")  # a header line now and then, never the end
        r = httpx.post(f"{api.base_url}/v1/retrieve", json={"query": QUERY}, timeout=30)
        assert r.status_code == 200, r.text
        assert r.json()["passages"]
        # The cap holds: the oldest slow connections were closed to make room.
        server = api.served.server
        open_now = [c for c in server.server_state.connections if not c.transport.is_closing()]
        assert len(open_now) <= CAP


def _send(sock: socket.socket, data: bytes) -> None:
    """Send, unless the server closed the connection already (the cap at work)."""
    with suppress(OSError):
        sock.sendall(data)


@contextmanager
def _closing(sockets: list[socket.socket]) -> Iterator[None]:
    try:
        yield
    finally:
        for sock in sockets:
            sock.close()


def test_over_the_cap_with_every_connection_busy_is_a_503(
    collection_factory: Any, api_factory: Any
) -> None:
    api = api_factory(collection_factory(None), max_connections=2)
    port = api.served.port
    busy = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
    try:
        for sock in busy:  # whole headers, half a body: requests in progress, not slow headers
            sock.sendall(
                b"POST /v1/retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            )
        time.sleep(0.2)  # let the server read both requests' headers
        with socket.create_connection(("127.0.0.1", port), timeout=10) as third:
            answer = _hung_up(third)
        assert answer is not None and answer.startswith(b"HTTP/1.1 503"), answer
        assert b'"type": "unavailable"' in answer
    finally:
        for sock in busy:
            sock.close()
    r = httpx.post(f"{api.base_url}/v1/retrieve", json={"query": QUERY}, timeout=30)
    assert r.status_code == 200, r.text


def test_headers_and_bodies_have_deadlines(collection_factory: Any, api_factory: Any) -> None:
    api = api_factory(collection_factory(None), header_timeout_s=0.5, body_timeout_s=0.5)
    port = api.served.port
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /v1/collections HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        # A header line every 0.2 s keeps no connection alive past the header deadline.
        closed, deadline = False, time.monotonic() + 10
        while not closed and time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                sock.sendall(b"X-Slow: 1\r\n")
                sock.settimeout(0.01)
                closed = sock.recv(1) == b""
            except TimeoutError:
                pass
            except OSError:  # reset: the server closed it
                closed = True
        assert closed
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /v1/retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            b'{"query": '
        )  # a body that never completes
        answer = _hung_up(sock)
        assert answer is not None and answer.startswith(b"HTTP/1.1 408"), answer
        assert b'"type":"timeout"' in answer and b'"field":"body"' in answer
    r = httpx.post(f"{api.base_url}/v1/retrieve", json={"query": QUERY}, timeout=30)
    assert r.status_code == 200, r.text


def test_keyless_loopback_api_refuses_what_a_hostile_page_sends(
    collection_factory: Any, api_factory: Any
) -> None:
    """DNS rebinding: a page on evil.example, its name now pointing at 127.0.0.1, sends a
    `text/plain` POST (no preflight) with its own Host and Origin."""
    col = collection_factory(None)
    api = api_factory(col)
    url = api.base_url
    body = f'{{"query": "{QUERY}", "collection": "{col.name}"}}'
    rebinding = {"host": "evil.example:8765", "origin": "http://evil.example:8765"}
    plain = {"content-type": "text/plain;charset=UTF-8"}
    for headers, status, field in [
        ({**rebinding, **plain}, 421, "host"),
        ({"host": "evil.example"}, 421, "host"),
        ({"origin": "http://evil.example", **plain}, 403, "origin"),
        ({"origin": "null"}, 403, "origin"),
        (plain, 415, "content-type"),
        ({"content-type": "application/x-www-form-urlencoded"}, 415, "content-type"),
        ({}, 415, "content-type"),
    ]:
        r = httpx.post(f"{url}/v1/retrieve", content=body, headers=headers, timeout=30)
        assert r.status_code == status, (headers, r.text)
        assert r.json()["error"]["field"] == field
        assert col.name not in r.text
    r = httpx.get(f"{url}/v1/collections", headers={"host": "evil.example"}, timeout=30)
    assert r.status_code == 421 and col.name not in r.text
    r = httpx.get(f"{url}/v1/collections", headers={"origin": "https://evil.example"})
    assert r.status_code == 403 and col.name not in r.text
    # Loopback's own names, and a program that sends no Origin, are served.
    for host in ("localhost", "127.0.0.1", f"localhost:{api.served.port}", "[::1]:80"):
        r = httpx.post(f"{url}/v1/retrieve", json={"query": QUERY}, headers={"host": host})
        assert r.status_code == 200, (host, r.text)


def test_allowed_hosts_and_origins_are_settings(collection_factory: Any, api_factory: Any) -> None:
    api = api_factory(
        collection_factory(None),
        allowed_hosts=["rag.internal"],
        allowed_origins=["https://app.example"],
    )
    ok = {"host": "rag.internal:443", "origin": "https://app.example"}
    r = httpx.post(f"{api.base_url}/v1/retrieve", json={"query": QUERY}, headers=ok, timeout=30)
    assert r.status_code == 200, r.text
    other = {"host": "rag.internal", "origin": "https://app.example.evil"}
    r = httpx.post(f"{api.base_url}/v1/retrieve", json={"query": QUERY}, headers=other)
    assert r.status_code == 403
