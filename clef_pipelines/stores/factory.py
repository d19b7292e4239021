"""Open the store a `StoreConfig` names."""

from __future__ import annotations

import pathlib

from clef_pipelines.objectstore import (
    ObjectStoreConfig,
    is_cloud_url,
    join,
    lancedb_storage_options,
)
from clef_pipelines.redact import register_url_secrets, secret_from_env
from clef_pipelines.stores.base import StoreError, VectorStore
from clef_pipelines.stores.config import StoreConfig


def _under(data_dir: pathlib.Path, path: str | None, default: str) -> pathlib.Path:
    if path is None:
        return pathlib.Path(data_dir) / default
    p = pathlib.Path(path).expanduser()
    return p if p.is_absolute() else pathlib.Path(data_dir) / p


def lancedb_path(config: StoreConfig, data_dir: pathlib.Path) -> pathlib.Path:
    """The local folder LanceDB tables of these settings live in (see `lancedb_location` for
    one that may be an object-store URL)."""
    return _under(data_dir, config.lancedb.path, "lancedb")


def lancedb_location(config: StoreConfig, data_dir: pathlib.Path) -> str:
    """Where LanceDB tables of these settings live: an object-store URL (`store.lancedb.path`
    one, or `<data_dir>/lancedb` when data_dir is one), else the local folder."""
    path = config.lancedb.path
    if path is not None and is_cloud_url(path):
        return path.rstrip("/")
    data_url = config._data_url
    if data_url is not None and (path is None or not pathlib.Path(path).expanduser().is_absolute()):
        return join(data_url, path or "lancedb")
    return str(lancedb_path(config, data_dir))


def store_location(config: StoreConfig, data_dir: pathlib.Path) -> str:
    """Where the store of these settings is, in one line (no secret: pgvector's DSN is named
    by its environment variable, `env:NAME`)."""
    if config.kind == "lancedb":
        return lancedb_location(config, data_dir)
    if config.kind == "qdrant":
        return config.qdrant.url or str(_under(data_dir, config.qdrant.path, "qdrant"))
    if config.kind == "pgvector":
        return f"env:{config.pgvector.dsn_env}"
    return "memory (this process)"


def with_location(config: StoreConfig, kind: str, location: str) -> StoreConfig:
    """`config` with another kind and location (as `store_location` writes them) set over it."""
    if kind and kind != config.kind:
        config = config.model_copy(update={"kind": kind})
    if not location or location == store_location(config, pathlib.Path(".")):
        return config
    if config.kind == "lancedb":
        part = config.lancedb.model_copy(update={"path": location})
        return config.model_copy(update={"lancedb": part})
    if config.kind == "qdrant":
        field = "url" if "://" in location else "path"
        part = config.qdrant.model_copy(update={field: location})
        return config.model_copy(update={"qdrant": part})
    if config.kind == "pgvector":
        part = config.pgvector.model_copy(update={"dsn_env": location.removeprefix("env:")})
        return config.model_copy(update={"pgvector": part})
    return config


_MEMORY_STORE: VectorStore | None = None


def _process_memory_store() -> VectorStore:
    """One in-memory store per process, so that an in-process ingestion run and a later query
    in the same process see the same collections (it is gone when the process ends)."""
    global _MEMORY_STORE
    if _MEMORY_STORE is None:
        from clef_pipelines.stores.memory import MemoryStore

        _MEMORY_STORE = MemoryStore()
    return _MEMORY_STORE


def open_store(
    config: StoreConfig, data_dir: pathlib.Path, *, for_pipeline: bool = False
) -> VectorStore:
    """The store for ``config.kind``; relative paths are resolved under ``data_dir``.

    ``for_pipeline``: opened by a Dagster step (ingestion, evaluation) rather than to serve
    queries; LanceDB's metadata cache is then ``store.lancedb.pipeline_metadata_cache_mb``.
    """
    kind = config.kind
    if kind == "lancedb":
        from clef_pipelines.stores.lancedb_store import LanceDBStore

        c = config.lancedb
        location = lancedb_location(config, data_dir)
        remote = is_cloud_url(location)
        object_store = config._object_store or ObjectStoreConfig()
        return LanceDBStore(
            location,
            storage_options=lancedb_storage_options(object_store, location) if remote else None,
            object_store=object_store,
            index_threshold=c.index_threshold,
            index_type=c.index_type,
            nprobes=c.nprobes,
            refine_factor=c.refine_factor,
            optimize_every=c.optimize_every,
            ef=c.ef,
            cleanup_older_than_s=c.cleanup_older_than_s,
            upkeep_fraction=c.upkeep_fraction,
            upkeep_rows=c.upkeep_rows,
            index_delta_rows=c.index_delta_rows,
            compaction_target_rows=c.compaction_target_rows,
            index_segment_rows=c.index_segment_rows,
            metadata_cache_mb=c.pipeline_metadata_cache_mb if for_pipeline else c.metadata_cache_mb,
            index_cache_mb=c.index_cache_mb,
        )
    if kind == "qdrant":
        try:
            from clef_pipelines.stores.qdrant_store import QdrantStore
        except ImportError as exc:  # pragma: no cover - optional dependency
            raise StoreError(
                "store.kind 'qdrant' needs qdrant-client: pip install 'clef-pipelines[qdrant]'"
            ) from exc
        q = config.qdrant
        register_url_secrets(q.url)
        if q.url:
            api_key = None
            if q.api_key_env:
                api_key = secret_from_env(q.api_key_env)
                if not api_key:
                    raise StoreError(
                        f"store.qdrant.api_key_env names {q.api_key_env!r}, which is not set"
                    )
            return QdrantStore(
                url=q.url,
                api_key=api_key,
                batch_size=q.batch_size,
                timeout=q.timeout_s,
                hnsw_m=q.hnsw_m,
                hnsw_ef_construct=q.hnsw_ef_construct,
            )
        path = ":memory:" if q.path == ":memory:" else str(_under(data_dir, q.path, "qdrant"))
        return QdrantStore(path=path, batch_size=q.batch_size)
    if kind == "pgvector":
        p = config.pgvector
        # psycopg errors may echo parts of the connection string: its password is registered.
        dsn = secret_from_env(p.dsn_env)
        if not dsn:
            raise StoreError(
                f"store.kind 'pgvector' reads its connection string from the env variable "
                f"{p.dsn_env!r}, which is not set (e.g. postgresql://user@127.0.0.1:5432/db)"
            )
        try:
            from clef_pipelines.stores.pgvector_store import PgVectorStore
        except ImportError as exc:  # pragma: no cover - optional dependency
            raise StoreError(
                "store.kind 'pgvector' needs psycopg and pgvector: "
                "pip install 'clef-pipelines[postgres]'"
            ) from exc
        return PgVectorStore(
            dsn,
            schema=p.schema_name,
            hnsw_m=p.hnsw_m,
            hnsw_ef_construction=p.hnsw_ef_construction,
            ef_search=p.ef_search,
            maintenance_work_mem=p.maintenance_work_mem,
            text_candidates=p.text_candidates,
            text_idf=p.text_idf,
        )
    if kind == "memory":
        return _process_memory_store()
    raise StoreError(f"unknown store kind {kind!r}")  # pragma: no cover - pydantic guards it
