"""The MCP server, with the `mcp` package's own client session in process."""

from __future__ import annotations

import asyncio
import json
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
    assert json.loads(text) == data and PLANTED not in text and QUARANTINED not in text
    assert PLANTED not in str(data["passages"]) and QUARANTINED not in str(data)
    assert col.name in [c["name"] for c in out["listed"].structured_content["collections"]]
    kept = out["compact"].structured_content
    assert [p["text"] for p in kept["passages"]] == [PASSAGES[0]]
    assert kept["dropped"][0]["reason"] == "instructs_ai"
    assert out["bad"].is_error
    assert "nope" in " ".join(c.text for c in out["bad"].content if hasattr(c, "text"))


def test_replies_are_compact(collection_factory: Any) -> None:
    """A reply is compact JSON holding what an agent needs: about the passage text and their
    citations, not ~9x it as indented JSON with every score, offset and the trace."""
    col = collection_factory(None)
    col.settings.steering.guard.mode = "off"  # the reply's shape is the point, not the guard

    async def go() -> Any:
        with RetrievalService(col.settings, store=col.store) as service:
            async with Client(build_mcp_server(service)) as client:
                found = await client.call_tool("search", {"query": QUERY})
                compacted = await client.call_tool(
                    "compact", {"query": QUERY, "passages": PASSAGES[:6]}
                )
                await service.aclose_loop_clients()
                return found, compacted

    for reply in asyncio.run(go()):
        assert not reply.is_error
        text = "".join(c.text for c in reply.content if hasattr(c, "text"))
        assert "\n" not in text and json.loads(text) == reply.structured_content
        passages = reply.structured_content["passages"]
        assert passages and all(
            set(p) <= {"n", "id", "citation", "text", "conflict"} for p in passages
        )
        assert "trace" not in text and "vector_score" not in text
        assert len(text) < 2.5 * sum(len(p["text"]) for p in passages)


def test_answer_reply_is_compact(
    fake: FakeServer, collection_factory: Any, chat: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("LLM_KEY", "sk-test")
    fake.answer_with(judge(gate_p=0.9))
    col = collection_factory(
        fake, answer={"base_url": chat.base_url + "/v1", "model": "m", "api_key_env": "LLM_KEY"}
    )

    async def go() -> Any:
        with RetrievalService(col.settings, store=col.store) as service:
            async with Client(build_mcp_server(service)) as client:
                reply = await client.call_tool("answer", {"query": QUERY})
                await service.aclose_loop_clients()
                return reply

    reply = asyncio.run(go())
    assert not reply.is_error
    data = reply.structured_content
    assert data["answer"] == chat.reply and data["citations"][0]["n"] == 1
    assert data["retrieval"]["passages"][0]["text"] == PASSAGES[0]
    text = "".join(c.text for c in reply.content if hasattr(c, "text"))
    assert json.loads(text) == data and "trace" not in text


def _config(tmp_path: Any) -> str:
    import yaml

    cfg = tmp_path / "clef-pipelines.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(tmp_path / "data"),
                "embedder": {"kind": "hash", "dimension": 64},
                "store": {"kind": "lancedb"},
                "clef": {"backend": "off"},
            }
        )
    )
    return str(cfg)


async def _probe(client: Any) -> tuple[set[str], Any, Any]:
    tools = {t.name for t in (await client.list_tools()).tools}
    listed = await client.call_tool("list_collections", {})
    missing = await client.call_tool("search", {"query": "x", "collection": "nope"})
    return tools, listed, missing


def test_cli_over_stdio(tmp_path: Any) -> None:
    """`clef-pipelines mcp` started by an agent: JSON-RPC over the child's stdin/stdout, so
    nothing else may be printed there."""
    import sys

    from mcp import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "clef_pipelines", "mcp", "--config", _config(tmp_path)],
        env={"TOKENIZERS_PARALLELISM": "false"},
    )

    async def go() -> Any:
        async with Client(params, read_timeout_seconds=120) as client:
            return await _probe(client)

    tools, listed, missing = asyncio.run(go())
    assert "search" in tools and listed.structured_content == {"collections": []}
    assert missing.is_error and "nope" in missing.content[0].text


def test_cli_over_streamable_http(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys
    import time

    import httpx

    from tests.pg import free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "CLEF_API_KEY"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "clef_pipelines", "mcp", "--transport", "http"]
        + ["--port", str(port), "--config", _config(tmp_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, "mcp exited"
            try:
                httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "mcp did not start"
                time.sleep(0.3)

        async def go() -> Any:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                return await _probe(client)

        tools, listed, missing = asyncio.run(go())
    finally:
        proc.terminate()
        proc.wait(30)
    assert {"search", "answer", "compact", "list_collections"} <= tools
    assert listed.structured_content == {"collections": []}
    assert missing.is_error
