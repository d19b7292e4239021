"""The embedder as a Dagster resource: loaded lazily, so a run that embeds nothing loads nothing."""

from __future__ import annotations

import dagster as dg
from pydantic import PrivateAttr

from clef_pipelines.embedding import Embedder, make_embedder
from clef_pipelines.resources.settings import PipelineSettings


class EmbedderResource(dg.ConfigurableResource):
    settings: PipelineSettings
    _embedder: Embedder | None = PrivateAttr(None)

    def get(self) -> Embedder:
        if self._embedder is None:
            self._embedder = make_embedder(self.settings.settings.embedder)
        return self._embedder

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._embedder is not None:
            self._embedder.close()
            self._embedder = None
