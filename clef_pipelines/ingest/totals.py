"""What the store holds for one source: the state an asset page shows beside a run's changes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass

import polars as pl

from clef_pipelines.stores.base import VectorStore

#: Records per slice of a scan whose document ids are deduplicated at once.
_SLICE = 20_000


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


def distinct_doc_ids(parts: list[pl.Series]) -> pl.Series:
    """The distinct document ids of the slices `scan_doc_ids` gave."""
    if not parts:
        return pl.Series("doc_id", [], dtype=pl.String)
    return pl.concat(parts).unique()


def scan_doc_ids(
    store: VectorStore, collection: str, source: str, counts: dict[str, int] | None = None
) -> Iterator[pl.Series]:
    """The source's stored document ids, one slice of the scan at a time, each slice's
    distinct ids as a polars Series; with ``counts``, adds the records, quarantined records
    and tokens of the retrievable ones into it.

    Why slices of polars strings and not a set of Python strings: a set of every document id
    of the source costs about 90 bytes a document (45 MB at 500,000 documents, and the
    checks held two), so the step's memory grew with the source; the slices hold one slice of
    records as Python objects at a time, and their distinct ids (a document's chunks are
    written together, so about one id a document) about 20 bytes a document."""
    fields = ["doc_id"] if counts is None else ["doc_id", "tokens", "quarantined"]
    ids: list[str] = []
    for rec in store.scan(collection, where={"source": source}, fields=fields):
        ids.append(rec.get("doc_id") or "")
        if counts is not None:
            counts["records"] += 1
            if rec.get("quarantined"):
                counts["quarantined"] += 1
            else:
                counts["tokens"] += int(rec.get("tokens") or 0)
        if len(ids) >= _SLICE:
            yield pl.Series("doc_id", ids, dtype=pl.String).unique()
            ids = []
    if ids:
        yield pl.Series("doc_id", ids, dtype=pl.String).unique()


def source_totals(store: VectorStore, collection: str, source: str) -> SourceTotals:
    """One scan of the source's records, payload fields only (no vectors)."""
    if not store.has_collection(collection):
        return SourceTotals()
    counts = {"records": 0, "quarantined": 0, "tokens": 0}
    documents = distinct_doc_ids(list(scan_doc_ids(store, collection, source, counts)))
    records, quarantined, tokens = counts["records"], counts["quarantined"], counts["tokens"]
    return SourceTotals(
        documents=len(documents),
        records=records,
        chunks=records - quarantined,
        quarantined=quarantined,
        tokens=tokens,
    )
