"""The vector store as a Dagster resource, opened from the pipeline settings."""

from __future__ import annotations

import dagster as dg
from pydantic import PrivateAttr

from clef_pipelines.resources.settings import PipelineSettings
from clef_pipelines.stores import VectorStore, open_store


class VectorStoreResource(dg.ConfigurableResource):
    """Opens the store that `store.kind` names, once per run, and closes it at teardown.

    Steps write a table version per batch and never read old versions back, so LanceDB's
    metadata cache takes the pipeline's size (`store.lancedb.pipeline_metadata_cache_mb`),
    not the query side's."""

    settings: PipelineSettings
    _store: VectorStore | None = PrivateAttr(None)

    def get(self) -> VectorStore:
        if self._store is None:
            cfg = self.settings.settings
            self._store = open_store(cfg.store, cfg.data_path, for_pipeline=True)
        return self._store

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
