"""The MCP server, with the `mcp` package's own client session in process."""

from __future__ import annotations

import asyncio
from typing import Any

from mcp import Client

from clef_pipelines.api.mcp_server import build_mcp_server
from clef_pipelines.api.service import RetrievalService
from tests.api.conftest import QUARANTINED, add_quarantined
from tests.clef.fake_server import FakeServer
from tests.retrieval.conftest import PASSAGES, PLANTED, QUERY, judge


def test_tools_search_compact_and_list(fake: FakeServer, collection_factory: Any) -> None:
    fake.answer_with(judge(gate_p=0.9))
    col = collection_factory(fake)
    add_quarantined(col)

    async def go() -> dict[str, Any]:
        with RetrievalService(col.settings, store=col.store) as service:
            server = build_mcp_server(service)
            async with Client(server) as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                search = await client.call_tool("search", {"query": QUERY})
                listed = await client.call_tool("list_collections", {})
                compact = await client.call_tool(
                    "compact", {"query": QUERY, "passages": [PASSAGES[0], PLANTED]}
                )
                bad = await client.call_tool("search", {"query": QUERY, "collection": "nope"})
                await service.aclose_loop_clients()
                return {
                    "tools": tools,
                    "search": search,
                    "listed": listed,
                    "compact": compact,
                    "bad": bad,
                }

    out = asyncio.run(go())
    assert {"search", "answer", "compact", "list_collections"} <= out["tools"]
    search = out["search"]
    assert not search.is_error
    data = search.structured_content
    assert data["passages"][0]["text"] == PASSAGES[0]
    assert all(p["citation"] for p in data["passages"])
    text = " ".join(c.text for c in search.content if hasattr(c, "text"))
    assert "[1]" in text and PLANTED not in text and QUARANTINED not in text
    assert PLANTED not in str(data["passages"]) and QUARANTINED not in str(data)
    assert col.name in [c["name"] for c in out["listed"].structured_content["collections"]]
    kept = out["compact"].structured_content
    assert [p["text"] for p in kept["passages"]] == [PASSAGES[0]]
    assert kept["dropped"][0]["reason"] == "instructs_ai"
    assert out["bad"].is_error
    assert "nope" in " ".join(c.text for c in out["bad"].content if hasattr(c, "text"))
