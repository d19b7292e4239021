"""Issue 54 (Medium 12, 13, Low): the MCP tools have the HTTP API's limits, say what is not
set up, and MCP over stdio answers every request line, unreadable or deeply nested."""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mcp import Client

from clef_pipelines.api.mcp_server import build_mcp_server
from clef_pipelines.api.models import MAX_TOP_K
from clef_pipelines.api.service import RetrievalService
from tests.api.test_mcp import _config
from tests.retrieval.conftest import PASSAGES, QUERY


def _text(result: Any) -> str:
    return " ".join(c.text for c in result.content if hasattr(c, "text"))


def test_tools_have_the_api_limits(collection_factory: Any) -> None:
    col = collection_factory(None)

    async def go() -> dict[str, Any]:
        with RetrievalService(col.settings, store=col.store) as service:
            async with Client(build_mcp_server(service)) as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                calls = {
                    f"top_k={k}": await client.call_tool("search", {"query": QUERY, "top_k": k})
                    for k in (-1, 0, MAX_TOP_K + 1, 100_000_000)
                }
                calls["ok"] = await client.call_tool("search", {"query": QUERY, "top_k": 5})
                calls["long query"] = await client.call_tool("search", {"query": "q" * 1_400_000})
                calls["empty collection"] = await client.call_tool(
                    "search", {"query": QUERY, "collection": ""}
                )
                calls["50,000 passages"] = await client.call_tool(
                    "compact", {"query": QUERY, "passages": ["a passage"] * 50_000}
                )
                calls["answer"] = await client.call_tool("answer", {"query": QUERY})
                await service.aclose_loop_clients()
                return {"tools": tools, **calls}

    out = asyncio.run(go())
    top_k = out["tools"]["search"].input_schema["properties"]["top_k"]
    assert MAX_TOP_K in [s.get("maximum") for s in top_k.get("anyOf", [top_k])]
    for k in (-1, 0, MAX_TOP_K + 1, 100_000_000):
        assert out[f"top_k={k}"].is_error and "top_k" in _text(out[f"top_k={k}"])
    assert not out["ok"].is_error and out["ok"].structured_content["passages"]
    assert out["long query"].is_error and "query" in _text(out["long query"])
    assert out["empty collection"].is_error and "collection" in _text(out["empty collection"])
    assert out["50,000 passages"].is_error and "passages" in _text(out["50,000 passages"])
    # No model configured: the agent is told so, not handed an internal error.
    assert out["answer"].is_error
    assert "retrieval.answer.model is not set" in _text(out["answer"])


class _Stdio:
    """`clef-pipelines mcp` over raw stdin/stdout, one JSON-RPC line each way."""

    def __init__(self, config: str) -> None:
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "clef_pipelines", "mcp", "--config", config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self._buffer = b""

    def send(self, line: str | bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() if isinstance(line, str) else line)
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()

    def reply(self, within_s: float = 20.0) -> dict[str, Any]:
        """The next line the server writes; fails rather than waits forever."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + within_s
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                assert left > 0 and sel.select(left), "no answer from the MCP server"
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                assert chunk, "the MCP server exited"
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(30)


def test_stdio_answers_unreadable_and_deeply_nested_requests(tmp_path: Path) -> None:
    server = _Stdio(_config(tmp_path))
    try:
        server.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "probe", "version": "0"},
                    },
                }
            )
        )
        assert server.reply(120)["id"] == 0
        server.send('{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        server.send("this is not JSON {")
        unreadable = server.reply()
        assert unreadable["id"] is None and unreadable["error"]["code"] == -32700
        deep = "[" * 100_000 + "]" * 100_000
        call = '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "search", '
        server.send(call + f'"arguments": {{"query": "x", "where": {{"a": {deep}}}}}}}}}')
        nested = server.reply()
        assert nested["id"] == 7 and nested["error"]["code"] == -32600
        assert "deep" in nested["error"]["message"]
        # The id after the nesting, and an "id" key inside it that is not the request's.
        server.send(
            '{"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "search", '
            f'"arguments": {{"id": 99, "where": {deep}}}}}, "id": "after"}}'
        )
        assert server.reply()["id"] == "after"
        nested_300 = '{"a": ' * 300 + "1" + "}" * 300  # readable by Python, not by the library
        server.send(call.replace('"id": 7', '"id": 8') + f'"arguments": {nested_300}}}}}')
        assert server.reply()["id"] == 8
        # Still serving.
        server.send(
            '{"jsonrpc": "2.0", "id": 9, "method": "tools/call", '
            '"params": {"name": "search", "arguments": {"query": "x", "top_k": 0}}}'
        )
        refused = server.reply()
        assert refused["id"] == 9 and refused["result"]["isError"]
    finally:
        server.close()


def test_compact_passage_count_matches_the_api(collection_factory: Any) -> None:
    col = collection_factory(None)
    settings = col.settings.model_copy(deep=True)
    settings.api = settings.api.model_copy(update={"max_passages": 3})

    async def go() -> tuple[Any, Any]:
        with RetrievalService(settings, store=col.store) as service:
            async with Client(build_mcp_server(service)) as client:
                ok = await client.call_tool("compact", {"query": QUERY, "passages": PASSAGES[:3]})
                over = await client.call_tool("compact", {"query": QUERY, "passages": PASSAGES[:4]})
                await service.aclose_loop_clients()
                return ok, over

    ok, over = asyncio.run(go())
    assert not ok.is_error and over.is_error and "over 3" in _text(over)
