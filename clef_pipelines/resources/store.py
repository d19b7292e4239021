"""The vector store as a Dagster resource, opened from the pipeline settings."""

from __future__ import annotations

import dagster as dg
from pydantic import Field, PrivateAttr

from clef_pipelines.resources.settings import PipelineSettings
from clef_pipelines.stores import VectorStore, open_store
from clef_pipelines.stores.factory import with_location


class VectorStoreResource(dg.ConfigurableResource):
    """Opens the store that `store.kind` names, once per run, and closes it at teardown.

    `kind` and `location` show in the UI (the code location fills them from the settings,
    `jobs.location.build_resources`); set at launch, they override the settings for that run.
    No secret is a field: pgvector's DSN and Qdrant's key stay in the environment variables
    the settings name.

    Steps write a table version per batch and never read old versions back, so LanceDB's
    metadata cache takes the pipeline's size (`store.lancedb.pipeline_metadata_cache_mb`),
    not the query side's."""

    settings: PipelineSettings
    kind: str = Field(
        default="",
        description="store.kind: lancedb, qdrant, pgvector or memory (empty: the settings').",
    )
    location: str = Field(
        default="",
        description="Where the store is: LanceDB's folder, Qdrant's URL or local folder, "
        "or env:NAME, the variable holding PostgreSQL's DSN (empty: the settings').",
    )
    _store: VectorStore | None = PrivateAttr(None)

    def get(self) -> VectorStore:
        if self._store is None:
            cfg = self.settings.settings
            store = with_location(cfg.store, self.kind, self.location)
            self._store = open_store(store, cfg.data_path, for_pipeline=True)
        return self._store

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
