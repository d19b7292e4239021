"""Issue 7: `serve` against hostile clients: deep JSON, a lowercase scheme, odd model names,
anonymous /health, and half-sent requests."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from clef_pipelines.clef.backends.local import LocalBackend
from clef_pipelines.clef.serve import build_app, uvicorn_config
from tests.clef.conftest import ServedApp
from tests.clef.test_wire import body as make_body

KEY = "hardening-key"


@pytest.fixture(scope="module")
def served(tiny_release: Path):  # type: ignore[no-untyped-def]
    import uvicorn

    backend = LocalBackend("clef", release_dir=str(tiny_release), max_length=4096, max_batch=4)
    app = build_app(backend, api_key=KEY, max_body_bytes=4 * 1024 * 1024, body_timeout_s=1.0)
    served = ServedApp(app)
    # The real serve settings (h11 with a header deadline), made short for the test.
    served.server = uvicorn.Server(uvicorn_config(app, header_timeout_s=1.0, log_level="warning"))
    with served as server:
        yield SimpleNamespace(url=server.base_url, port=server.port, release_dir=tiny_release)


def _post(url: str, *, content: bytes | None = None, json_body=None, auth: str = f"Bearer {KEY}"):  # type: ignore[no-untyped-def]
    return httpx.post(
        url + "/v1/systemone",
        content=content,
        json=json_body,
        headers={"authorization": auth, "content-type": "application/json"},
        timeout=60,
    )


def test_json_nested_100k_deep_is_a_400(served) -> None:  # type: ignore[no-untyped-def]
    deep = b'{"state": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = _post(served.url, content=deep)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "bad_json" and "deep" in r.json()["error"]["message"]


def test_the_bearer_scheme_is_case_insensitive(served) -> None:  # type: ignore[no-untyped-def]
    for scheme in ("bearer", "BEARER", "Bearer"):
        r = _post(served.url, json_body=make_body(), auth=f"{scheme} {KEY}")
        assert r.status_code == 200, (scheme, r.text)
    assert _post(served.url, json_body=make_body(), auth=f"basic {KEY}").status_code == 401
    assert _post(served.url, json_body=make_body(), auth="bearer wrong").status_code == 401


def test_an_unknown_model_is_refused_not_echoed(served) -> None:  # type: ignore[no-untyped-def]
    body = make_body()
    body["model"] = "gpt-<script>alert(1)</script>"
    r = _post(served.url, json_body=body)
    assert r.status_code == 422 and r.json()["error"]["field"] == "model"
    body["model"] = "clef-flash"
    ok = _post(served.url, json_body=body)
    assert ok.status_code == 200 and ok.json()["model"] == "clef"  # the model that answered


def test_health_tells_anonymous_callers_nothing(served) -> None:  # type: ignore[no-untyped-def]
    anonymous = httpx.get(served.url + "/health", timeout=30)
    assert anonymous.status_code == 200 and anonymous.json() == {"status": "ok"}
    full = httpx.get(served.url + "/health", headers={"authorization": f"Bearer {KEY}"}).json()
    assert full["model"] == "clef" and "engine" in full
    assert (
        str(served.release_dir)
        not in httpx.get(served.url + "/health", headers={"authorization": f"Bearer {KEY}"}).text
    )


def _closed_by_server(sock: socket.socket) -> bool:
    """Wait (bounded) for the server to answer or hang up; True when it did either."""
    sock.settimeout(30)
    try:
        data = sock.recv(65536)
    except TimeoutError:
        return False
    return data == b"" or data.startswith(b"HTTP/1.1 408")


def test_half_sent_headers_and_bodies_are_cut_off(served) -> None:  # type: ignore[no-untyped-def]
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\n")  # never ends the headers
        assert _closed_by_server(sock)
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.sendall(
            b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
            + f"Authorization: Bearer {KEY}\r\n\r\n".encode()
            + b'{"state": "'
        )  # a body that never completes
        assert _closed_by_server(sock)
    # The server still answers whole requests.
    assert _post(served.url, json_body=make_body()).status_code == 200
