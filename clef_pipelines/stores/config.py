"""Store configuration: which vector store holds the collections, and how to reach it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from clef_pipelines._strict import StrictModel


class LanceDBConfig(StrictModel):
    """Embedded LanceDB under the data directory (the default)."""

    path: str | None = Field(None, description="Folder of the database; default <data_dir>/lancedb.")
    index_threshold: int = Field(
        50_000, description="Build an ANN index once a collection holds this many rows."
    )


class QdrantConfig(StrictModel):
    """Qdrant: a server by URL, or qdrant-client's local mode by path or ':memory:'."""

    url: str | None = Field(None, description="Server URL, e.g. http://127.0.0.1:6333.")
    api_key_env: str | None = Field(None, description="Name of the env variable with the API key.")
    path: str | None = Field(
        None, description="Local mode folder or ':memory:'; default <data_dir>/qdrant."
    )


class PgVectorConfig(StrictModel):
    """PostgreSQL with pgvector, through psycopg 3."""

    dsn_env: str = Field(
        "CLEF_PG_DSN", description="Name of the env variable holding the connection string."
    )
    schema_name: str = Field("public", description="Schema that holds one table per collection.")


class StoreConfig(StrictModel):
    kind: Literal["lancedb", "qdrant", "pgvector", "memory"] = "lancedb"
    lancedb: LanceDBConfig = LanceDBConfig()
    qdrant: QdrantConfig = QdrantConfig()
    pgvector: PgVectorConfig = PgVectorConfig()
