"""`api` and `mcp`: the retrieval service for other programs (HTTP + OpenAI-compatible, MCP).

Both load the embedder and open the store once, then answer every request warm.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

import typer

from clef_pipelines.cli.app import app
from clef_pipelines.cli.common import (
    ConfigOption,
    console,
    fail,
    load_cli_settings,
    terminal_safe,
)
from clef_pipelines.redact import secret_from_env


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _service(config, host: str | None, port: int | None):  # type: ignore[no-untyped-def]
    from clef_pipelines.api.config import ApiConfig
    from clef_pipelines.api.service import RetrievalService

    settings = load_cli_settings(config)
    api: ApiConfig = getattr(settings, "api", None) or ApiConfig()
    api = api.model_copy(
        update={k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    )
    key = secret_from_env(api.api_key_env)
    if key is None and not is_loopback(api.host):
        fail(
            f"api.host {api.host} is not loopback: set {api.api_key_env} (api.api_key_env) "
            "to the bearer key clients must send"
        )
    try:
        service = RetrievalService(settings, api=api)
    except Exception as exc:  # noqa: BLE001 - a store or embedder that cannot open
        fail(f"cannot start the service: {exc}")
    return service, api, key


@app.command("api")
def api_command(
    host: Annotated[str | None, typer.Option(help="Bind address (default api.host).")] = None,
    port: Annotated[int | None, typer.Option(help="TCP port (default api.port).")] = None,
    config: ConfigOption = None,
) -> None:
    """HTTP API: /v1/retrieve, /v1/answer, /v1/compact, OpenAI-compatible /v1/chat/completions."""
    import uvicorn

    from clef_pipelines.api.http import api_uvicorn_config, build_app

    service, api, key = _service(config, host, port)
    try:
        service.warm()
        auth = f"bearer key from {api.api_key_env}" if key else "no auth (loopback only)"
        console.print(
            f"clef-pipelines API on http://{api.host}:{api.port} ({auth}); "
            f"collections: {terminal_safe(', '.join(service.collections()) or 'none yet')}",
            markup=False,
        )
        # Half-sent requests and slow clients must not hold connections forever.
        uvicorn.Server(api_uvicorn_config(build_app(service, api_key=key), api)).run()
    finally:
        service.close()


@app.command("mcp")
def mcp_command(
    transport: Annotated[
        str, typer.Option(help="stdio (for an agent that starts this process) or http.")
    ] = "stdio",
    host: Annotated[str | None, typer.Option(help="Bind address for http.")] = None,
    port: Annotated[int | None, typer.Option(help="TCP port for http.")] = None,
    config: ConfigOption = None,
) -> None:
    """MCP server: tools search, answer, compact and list_collections."""
    import anyio

    from clef_pipelines.api.mcp_server import build_mcp_server, serve_stdio

    if transport not in ("stdio", "http"):
        fail(f"--transport must be stdio or http, not {transport!r}")
    service, api, key = _service(config, host, port)
    if transport == "http" and key is not None:
        fail(
            f"{api.api_key_env} is set, but the MCP http transport has no bearer check here: "
            "serve it on loopback without a key, or put it behind your own gateway"
        )
    kind: Literal["stdio", "streamable-http"] = (
        "stdio" if transport == "stdio" else ("streamable-http")
    )
    try:
        service.warm()
        server = build_mcp_server(service)
        if kind == "stdio":
            anyio.run(serve_stdio, server)
        else:
            server.run("streamable-http", host=api.host, port=api.port)
    finally:
        service.close()
