"""`ClefResource`: the shared Clef client as a Dagster resource, with per-run usage metadata.

@dg.asset
def screened(clef: ClefResource) -> dg.MaterializeResult:
    if clef.enabled: answers = clef.ask(state, questions)
    else: ...  # fall back, mark degraded
    return dg.MaterializeResult(metadata=clef.usage_metadata())
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from clef_pipelines.clef.client import SyncClefClient
from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.clef.errors import ClefError
from clef_pipelines.clef.wire import SystemOneResponse
from clef_pipelines.resources.settings import PipelineSettings


class ClefResource(dg.ConfigurableResource):
    """Settings come from the pipeline settings (`clef.*` of the validated config); any field
    set here overrides its `clef.*` value."""

    settings: PipelineSettings
    backend: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    release_dir: str | None = None
    cache_path: str | None = None
    cache: bool | None = None
    max_retries: int | None = None
    timeout_s: float | None = None

    _client: SyncClefClient | None = PrivateAttr(default=None)

    def clef_config(self) -> tuple[ClefConfig, str]:
        settings = self.settings.validated
        overrides = {
            k: v
            for k, v in {
                "backend": self.backend,
                "model": self.model,
                "base_url": self.base_url,
                "api_key_env": self.api_key_env,
                "release_dir": self.release_dir,
                "cache_path": self.cache_path,
                "cache": self.cache,
                "max_retries": self.max_retries,
                "timeout_s": self.timeout_s,
            }.items()
            if v is not None
        }
        cfg = settings.clef
        if overrides:
            cfg = ClefConfig.model_validate(cfg.model_dump() | overrides)
        return cfg, str(settings.data_path)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        cfg, data_dir = self.clef_config()
        self._client = SyncClefClient(cfg, data_dir=data_dir)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def client(self) -> SyncClefClient:
        if self._client is None:  # used outside a run (tests, scripts)
            cfg, data_dir = self.clef_config()
            self._client = SyncClefClient(cfg, data_dir=data_dir)
        return self._client

    @property
    def enabled(self) -> bool:
        """False when Clef is off: fall back and mark results degraded."""
        return self.client.enabled

    def ask(self, state: Any, questions: Mapping[str, Any], **kw: Any) -> SystemOneResponse:
        return self.client.ask(state, questions, **kw)

    def ask_many(
        self, items: Sequence[tuple[Any, Mapping[str, Any]]], **kw: Any
    ) -> list[SystemOneResponse | ClefError]:
        return self.client.ask_many(items, **kw)

    def usage(self) -> dict[str, Any]:
        return self.client.usage.snapshot()

    def usage_metadata(self) -> dict[str, dg.MetadataValue]:
        """This run's Clef usage so far, as materialisation metadata (keys `clef/...`)."""
        return usage_metadata(self.usage())


def usage_metadata(snapshot: Mapping[str, Any]) -> dict[str, dg.MetadataValue]:
    s = snapshot
    return {
        "clef/backend": dg.MetadataValue.text(f"{s['backend']} ({s['model']})"),
        "clef/requests": dg.MetadataValue.int(s["requests"]),
        "clef/cache_hits": dg.MetadataValue.int(s["cached"]),
        "clef/retries": dg.MetadataValue.int(s["retries"]),
        "clef/errors": dg.MetadataValue.int(s["errors"]),
        "clef/input_tokens": dg.MetadataValue.int(s["input_tokens"]),
        "clef/cost_usd": dg.MetadataValue.float(float(s["cost_usd"])),
        "clef/latency_p50_ms": dg.MetadataValue.float(float(s["latency_p50_ms"])),
        "clef/latency_p95_ms": dg.MetadataValue.float(float(s["latency_p95_ms"])),
    }
