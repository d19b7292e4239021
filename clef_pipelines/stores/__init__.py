"""Vector stores: one interface, one file per backend, one conformance suite."""

from clef_pipelines.stores.base import (
    CollectionSpec,
    Hit,
    StoreError,
    VectorStore,
)

__all__ = ["CollectionSpec", "Hit", "StoreError", "VectorStore", "open_store"]


def open_store(config, data_dir):  # type: ignore[no-untyped-def]
    """Open the store that `config` (a StoreConfig) names; relative paths under data_dir."""
    from clef_pipelines.stores.factory import open_store as _open

    return _open(config, data_dir)
