"""Vector stores: one interface, one file per backend, one conformance suite."""

from clef_pipelines.stores.base import (
    CollectionSpec,
    Hit,
    StoreError,
    VectorStore,
)

__all__ = ["CollectionSpec", "Hit", "StoreError", "VectorStore", "open_store"]


def open_store(config, data_dir, *, for_pipeline=False):  # type: ignore[no-untyped-def]
    """Open the store that `config` (a StoreConfig) names; relative paths under data_dir
    (`for_pipeline`: opened by a Dagster step, with the pipeline's cache sizes)."""
    from clef_pipelines.stores.factory import open_store as _open

    return _open(config, data_dir, for_pipeline=for_pipeline)
