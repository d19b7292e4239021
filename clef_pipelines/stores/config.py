"""Store configuration: which vector store holds the collections, and how to reach it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PrivateAttr

from clef_pipelines._strict import StrictModel
from clef_pipelines.stores.text import TextLanguage


class LanceDBConfig(StrictModel):
    """Embedded LanceDB under the data directory (the default)."""

    path: str | None = Field(
        None,
        description="Folder of the database, or an object-store URL (s3://bucket/lancedb: "
        "reached with the object_store settings); default <data_dir>/lancedb.",
    )
    index_threshold: int = Field(
        50_000,
        ge=1,
        description="The index step builds an ANN index once a collection holds this many rows.",
    )
    index_type: Literal["IVF_HNSW_SQ", "IVF_PQ", "IVF_FLAT"] = Field(
        "IVF_HNSW_SQ", description="ANN index built at the threshold."
    )
    nprobes: int = Field(20, ge=1, description="IVF partitions searched per query.")
    refine_factor: int = Field(
        10, ge=1, description="Re-rank k * refine_factor candidates with exact distances."
    )
    ef: int = Field(100, ge=1, description="HNSW candidate list size per query (IVF_HNSW_*).")
    cleanup_older_than_s: float = Field(
        60.0,
        ge=0,
        description="Optimize deletes table versions older than this (0: all but the latest; "
        "unsafe while another process reads the table).",
    )
    optimize_every: int = Field(
        20,
        ge=0,
        description="Compact, update indexes and delete old versions every N writes (0: only "
        "in maintain()), once `upkeep_fraction` of the table has been written since.",
    )
    upkeep_fraction: float = Field(
        0.5,
        ge=0,
        description="Upkeep during writes waits until the rows written or deleted since the last "
        "one are this share of the table (each upkeep updates every index, so a load's upkeeps "
        "stay O(log rows); 0: every `optimize_every` writes).",
    )
    upkeep_rows: int = Field(
        131_072,
        ge=0,
        description="Upkeep during writes comes at the latest once this many rows were written or "
        "deleted since the last one, whatever the table's size: its index update's memory "
        "follows the rows it folds in, so a share of a large table made the sync's memory "
        "grow with the table (0: `upkeep_fraction` alone).",
    )
    index_delta_rows: int = Field(
        262_144,
        ge=0,
        description="Upkeep folds new rows into a scalar or full-text index's latest delta while "
        "that covers fewer than this many rows, else into a new delta: merging into one index "
        "rewrote it whole, with memory that grew with the table. A query searches every delta "
        "(same results, a cost that grows with their number). 0: always merge.",
    )
    compaction_target_rows: int = Field(
        16_384,
        ge=1,
        description="Upkeep compacts fragments smaller than this into fragments of this many "
        "rows and leaves larger ones alone, so one upkeep's memory is set by this, not by the "
        "table (LanceDB's own target, 1M rows, rewrites a smaller table whole every time).",
    )
    index_segment_rows: int = Field(
        100_000,
        ge=0,
        description="The index step builds the ANN index in segments of at most this many "
        "rows (whole fragments), each trained on its own rows, and gives rows written later "
        "segments of their own, so one build's memory is set by this, not by the table "
        "(one LanceDB build runs its IVF pass over the whole table). A query searches every "
        "segment, so fewer, larger segments query faster. 0: one index over the whole table, "
        "rebuilt when the table has doubled.",
    )
    metadata_cache_mb: int = Field(
        128,
        ge=1,
        description="Memory LanceDB's metadata cache may hold (manifests, fragment and file "
        "metadata). Every write is a table version whose manifest lists every fragment, and "
        "its default cache kept them all: a load's memory grew with the square of its writes "
        "between upkeeps (0.86 GB of cache after 1,200 appends of 512 rows).",
    )
    index_cache_mb: int = Field(
        128,
        ge=1,
        description="Memory LanceDB's index cache may hold (opened scalar, full-text and ANN "
        "index pages). LanceDB's default is 6 GB, and a refresh's deletes by document id on a "
        "large table filled it: the 1% refresh of a million documents (7.6M rows) peaked at "
        "3.0 GB with it and 1.4 GB with 128 MB. Raise it for a query service over a large "
        "collection with an ANN index, whose probed partitions it keeps.",
    )
    pipeline_metadata_cache_mb: int = Field(
        16,
        ge=1,
        description="Memory LanceDB's metadata cache may hold in the Dagster pipeline's steps "
        "(store_sync, the index step, asset checks, evaluation), in place of "
        "metadata_cache_mb, which sizes it for queries. A load writes a table version per "
        "batch and never reads the old versions' manifests again: with 128 MB the sync's "
        "memory grew with the table until the cache was full.",
    )


class QdrantConfig(StrictModel):
    """Qdrant: a server by URL, or qdrant-client's local mode by path or ':memory:'."""

    url: str | None = Field(None, description="Server URL, e.g. http://127.0.0.1:6333.")
    api_key_env: str | None = Field(None, description="Name of the env variable with the API key.")
    path: str | None = Field(
        None, description="Local mode folder or ':memory:'; default <data_dir>/qdrant."
    )
    batch_size: int = Field(1000, ge=1, description="Points per upsert request.")
    timeout_s: int = Field(60, ge=1, description="Request timeout against a server.")
    hnsw_m: int = Field(
        16, ge=2, description="HNSW degree the index step switches on (server only)."
    )
    hnsw_ef_construct: int = Field(100, ge=4, description="HNSW build candidate list size.")


class PgVectorConfig(StrictModel):
    """PostgreSQL with pgvector, through psycopg 3."""

    dsn_env: str = Field(
        "CLEF_PG_DSN", description="Name of the env variable holding the connection string."
    )
    schema_name: str = Field("public", description="Schema that holds one table per collection.")
    hnsw_m: int = Field(16, ge=2, description="HNSW graph degree (index build parameter).")
    hnsw_ef_construction: int = Field(64, ge=4, description="HNSW build candidate list size.")
    ef_search: int = Field(100, ge=1, description="HNSW search candidate list size (>= top_k).")
    maintenance_work_mem: str = Field(
        "512MB", description="PostgreSQL memory for the one HNSW build after a load."
    )
    # 500: ts_rank over the candidates is most of a text query's time; on SciFact train
    # (docs/BENCHMARKS.md) 500 costs hybrid 0.005 nDCG@10 against 1000 (recall@10 +0.011,
    # recall@100 equal) and makes hybrid about a fifth faster; 300 costs 0.018.
    text_candidates: int = Field(
        500,
        ge=0,
        description="Rows a full-text query ranks at most (at least top_k): those holding the "
        "query's rarest terms, by ANALYZE's term frequencies. Keeps text and hybrid latency "
        "flat as the table grows; 0 ranks every match (cost grows with the table); more "
        "ranks slightly better and slower (1000: +0.005 hybrid nDCG@10 on SciFact).",
    )
    text_idf: bool = Field(
        False,
        description="Weigh each query term's ts_rank by its BM25 IDF (ANALYZE's term "
        "frequencies): SciFact train text nDCG@10 0.607 -> 0.669, hybrid 0.719 -> 0.729, at "
        "about twice the full-text query time.",
    )


class StoreConfig(StrictModel):
    kind: Literal["lancedb", "qdrant", "pgvector", "memory"] = "lancedb"
    text_language: TextLanguage = Field(
        "english",
        description="Stemming and stop words of the full-text index; fixed when a collection "
        "is made.",
    )
    lancedb: LanceDBConfig = LanceDBConfig()
    qdrant: QdrantConfig = QdrantConfig()
    pgvector: PgVectorConfig = PgVectorConfig()

    # Set by `Settings` from its `data_dir` and `object_store` (not keys of this section):
    # every caller opens the store from `settings.store` alone, and a LanceDB on an object
    # store needs the bucket's endpoint and keys, and its default place under `data_dir`.
    _data_url: str | None = PrivateAttr(None)
    _object_store: Any = PrivateAttr(None)
