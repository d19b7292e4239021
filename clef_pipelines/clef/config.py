"""Clef configuration: which backend answers System One requests, and its limits."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from clef_pipelines._strict import StrictModel


class ClefConfig(StrictModel):
    backend: Literal["auto", "workers-ai", "self-hosted", "local", "ray", "off"] = "auto"
    model: Literal["clef", "clef-flash"] = "clef-flash"
    base_url: str | None = Field(
        None, description="Self-hosted System One endpoint base URL (or env CLEF_BASE_URL)."
    )
    api_key_env: str | None = Field(
        None, description="Name of the env variable holding a self-hosted bearer key."
    )
    release_dir: str | None = Field(None, description="Release folder for local / ray backends.")
