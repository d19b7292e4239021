"""Issue 54 (Medium 11): a Clef server that never answers degrades a query (vector order,
marked degraded) within the request's deadline, on the API and the CLI, where the client's own
retries (`timeout_s` times `max_retries + 1`) would take minutes. MCP `search` too."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from mcp import Client
from typer.testing import CliRunner

from clef_pipelines.api.mcp_server import build_mcp_server
from clef_pipelines.api.service import RetrievalService
from clef_pipelines.cli.main import app
from tests.clef.fake_server import FakeServer, Reply
from tests.retrieval.conftest import PASSAGES, QUERY
from tests.retrieval.test_cli import write_config

#: The server "hangs": each request waits this long, past every deadline of these tests (and
#: short enough that the fake server's shutdown does not wait long for its sleeping handlers).
HANG_S = 4.0


def hanging_clef(fake: FakeServer, col: Any, hang: bool = True) -> None:
    """The fake server answers nothing in time (``hang``; else later, ``hang_from_now``); the
    client keeps its production patience."""
    if hang:
        hang_from_now(fake)
    col.settings.clef = col.settings.clef.model_copy(
        update={"timeout_s": 60.0, "max_retries": 5, "backoff_base_s": 0.5, "backoff_max_s": 30}
    )


def hang_from_now(fake: FakeServer) -> None:
    fake.script(*[Reply(delay_s=HANG_S) for _ in range(200)])


def assert_degraded_in_vector_order(body: dict[str, Any]) -> None:
    assert body["degraded"] is True and not body["abstain"], body
    texts = [p["text"] for p in body["passages"]]
    assert texts and set(texts) <= set(PASSAGES)


def test_api_retrieve_degrades_within_the_request_deadline(
    fake: FakeServer, collection_factory: Any, api_factory: Any
) -> None:
    col = collection_factory(fake)
    hanging_clef(fake, col, hang=False)
    api = api_factory(col, request_timeout_s=2.5)  # Clef may take 80% of it: 2 s
    # Warm as the `api` command warms it before serving: the query embedder, Clef, and the
    # offline guard that judges what a failed Clef leaves (the collection was not screened).
    api.service.warm()
    hang_from_now(fake)
    r = httpx.post(f"{api.base_url}/v1/retrieve", json={"query": QUERY}, timeout=30)
    assert r.status_code == 200, r.text  # not a 504
    assert_degraded_in_vector_order(r.json())
    r = httpx.post(
        f"{api.base_url}/v1/compact",
        json={"query": QUERY, "passages": PASSAGES[:3]},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert r.json()["degraded"] is True


def test_cli_query_degrades_within_the_clef_deadline(
    fake: FakeServer, collection_factory: Any, tmp_path: Path
) -> None:
    col = collection_factory(fake)
    hanging_clef(fake, col)
    cfg = write_config(tmp_path, col, retrieval={"clef_deadline_s": 1.5})
    out = CliRunner().invoke(app, ["query", QUERY, "--json", "-c", cfg])
    assert out.exit_code == 0, out.output
    (result,) = json.loads(out.output)
    assert_degraded_in_vector_order(result)


def test_mcp_search_degrades_within_the_request_deadline(
    fake: FakeServer, collection_factory: Any
) -> None:
    col = collection_factory(fake)
    hanging_clef(fake, col, hang=False)
    settings = col.settings.model_copy(deep=True)
    settings.api = settings.api.model_copy(update={"request_timeout_s": 2.5})

    async def go() -> Any:
        with RetrievalService(settings, store=col.store) as service:
            await asyncio.to_thread(service.warm)  # as the `mcp` command does before serving
            hang_from_now(fake)
            async with Client(build_mcp_server(service)) as client:
                found = await client.call_tool("search", {"query": QUERY})
                await service.aclose_loop_clients()
                return found

    found = asyncio.run(go())
    assert not found.is_error, found
    assert_degraded_in_vector_order(found.structured_content)
