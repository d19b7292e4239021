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
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="A connection whose request headers have not all arrived this long after "
        "its first byte is closed (slow clients cannot hold connections open).",
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="A request body not received within this gets HTTP 408."
    )
    max_connections: int = Field(
        1000,
        ge=1,
        description="Most open connections. Past it, a new connection closes the oldest one "
        "still waiting for its headers, or gets HTTP 503 when all are busy. Keep it below the "
        "process's file descriptor limit (`ulimit -n`).",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host header names accepted besides the bind address (and, on loopback, "
        "localhost, 127.0.0.1 and ::1); others get HTTP 421 (DNS rebinding). `*` accepts any. "
        "A wildcard bind (0.0.0.0, ::) with this list empty accepts any Host.",
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="Origin header values accepted (e.g. https://app.example.com); a request "
        "carrying any other Origin gets HTTP 403 (a browser page on another site). `*` accepts "
        "any. Requests without an Origin (programs, not browsers) are not affected.",
    )
    max_passages: int = Field(
        500, ge=1, description="Most passages one compact or chat request may carry."
    )
    max_query_chars: int = Field(4000, ge=16, description="Longest query accepted.")
    collections: list[str] | None = Field(
        None, description="Collections served (default: every collection in the store)."
    )
