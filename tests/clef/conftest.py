"""Fixtures for the Clef tests: a fake System One server on loopback and a tiny release."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clef.fake_server import FakeServer

# A stray Workers AI key or CLEF_BASE_URL in the developer's shell must not steer `auto`.
for _var in (
    "CLOUDFLARE_ACCOUNT_ID",
    "CLOUDFLARE_API_TOKEN",
    "CLEF_BASE_URL",
    "CLEF_WORKERS_AI_BASE_URL",
):
    os.environ.pop(_var, None)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    with FakeServer(token="test-key") as server:
        yield server


@pytest.fixture(scope="session")
def tiny_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from clef_pipelines.testing.tiny_release import build_tiny_release, vendored_model_code

    try:
        vendored_model_code()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    return build_tiny_release(tmp_path_factory.mktemp("tiny-release"))


class ServedApp:
    """A starlette app served by uvicorn on a loopback port, in a thread."""

    def __init__(self, app) -> None:  # type: ignore[no-untyped-def]
        import uvicorn

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        )
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self.server.serve(sockets=[self._sock])), daemon=True
        )

    def __enter__(self) -> ServedApp:
        self._thread.start()
        deadline = time.monotonic() + 120  # lifespan loads the engine
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=30)
