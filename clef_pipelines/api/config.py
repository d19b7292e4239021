"""Settings of the HTTP API and the MCP server (`api:` in the YAML)."""

from __future__ import annotations

from pydantic import Field

from clef_pipelines._strict import StrictModel


class ApiConfig(StrictModel):
    host: str = Field(
        "127.0.0.1", description="Bind address; anything but loopback needs an API key."
    )
    port: int = Field(8765, ge=1, le=65535)
    api_key_env: str = Field(
        "CLEF_API_KEY",
        description="Env variable holding the bearer key clients must send. Unset: no auth, "
        "allowed on loopback only.",
    )
    max_body_bytes: int = Field(
        2_000_000, ge=1024, description="Larger request bodies get HTTP 413."
    )
    request_timeout_s: float = Field(
        120.0, gt=0, description="A request still running after this gets HTTP 504."
    )
    max_passages: int = Field(
        500, ge=1, description="Most passages one compact or chat request may carry."
    )
    max_query_chars: int = Field(4000, ge=16, description="Longest query accepted.")
    collections: list[str] | None = Field(
        None, description="Collections served (default: every collection in the store)."
    )
