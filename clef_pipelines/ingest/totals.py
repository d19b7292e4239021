"""What the store holds for one source: the state an asset page shows beside a run's changes."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from clef_pipelines.stores.base import VectorStore


@dataclass(frozen=True)
class SourceTotals:
    """Counts over a source's stored records (quarantined records are stored but never
    retrieved, so `chunks` counts only the retrievable ones)."""

    documents: int = 0
    records: int = 0
    chunks: int = 0
    quarantined: int = 0
    tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def source_totals(store: VectorStore, collection: str, source: str) -> SourceTotals:
    """One scan of the source's records, payload fields only (no vectors)."""
    if not store.has_collection(collection):
        return SourceTotals()
    documents: set[str] = set()
    records = quarantined = tokens = 0
    for rec in store.scan(
        collection, where={"source": source}, fields=["doc_id", "tokens", "quarantined"]
    ):
        records += 1
        documents.add(rec.get("doc_id") or "")
        if rec.get("quarantined"):
            quarantined += 1
        else:
            tokens += int(rec.get("tokens") or 0)
    return SourceTotals(
        documents=len(documents),
        records=records,
        chunks=records - quarantined,
        quarantined=quarantined,
        tokens=tokens,
    )
