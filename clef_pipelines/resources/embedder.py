"""The embedder as a Dagster resource: loaded lazily, so a run that embeds nothing loads nothing."""

from __future__ import annotations

import dagster as dg
from pydantic import Field, PrivateAttr

from clef_pipelines.embedding import Embedder, make_embedder
from clef_pipelines.resources.settings import PipelineSettings


class EmbedderResource(dg.ConfigurableResource):
    """`kind`, `model` and `dimension` show in the UI (filled from `embedder.*` of the
    settings); set at launch, they override the settings for that run (a collection built with
    another embedder refuses the run)."""

    settings: PipelineSettings
    kind: str = Field(default="", description="embedder.kind (empty: the settings').")
    model: str | None = Field(default=None, description="embedder.model (openai kind).")
    dimension: int | None = Field(default=None, description="embedder.dimension, where it is set.")
    _embedder: Embedder | None = PrivateAttr(None)

    def get(self) -> Embedder:
        if self._embedder is None:
            cfg = self.settings.settings.embedder
            given = {"kind": self.kind or None, "model": self.model, "dimension": self.dimension}
            update = {k: v for k, v in given.items() if v is not None and v != getattr(cfg, k)}
            if update:
                cfg = cfg.model_validate(cfg.model_dump() | update)
            self._embedder = make_embedder(cfg)
        return self._embedder

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._embedder is not None:
            self._embedder.close()
            self._embedder = None
