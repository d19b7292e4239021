"""The collection manifest's embedder check, shared by ingestion and queries.

Kept apart from `ingest.sync` so the query path does not import polars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clef_pipelines.stores.base import StoreError

if TYPE_CHECKING:
    from clef_pipelines.embedding.base import Embedder


class ManifestMismatch(StoreError):
    """The collection was built with another embedder (or dimension / metric)."""


def check_manifest(manifest: dict[str, Any] | None, collection: str, embedder: Embedder) -> None:
    """Refuse to mix vectors of two embedders in one collection."""
    if not manifest:
        return
    want = (manifest.get("embedder"), manifest.get("dimension"), manifest.get("metric"))
    have = (embedder.name, embedder.dimension, embedder.metric)
    if want != have:
        raise ManifestMismatch(
            f"collection {collection!r} was built with embedder {want[0]} ({want[1]}-d, "
            f"{want[2]}); this configuration uses {have[0]} ({have[1]}-d, {have[2]}). "
            "Use the same embedder, another collection, or drop this collection with "
            f"`clef-pipelines delete --collection {collection} --all --yes` and ingest again."
        )
