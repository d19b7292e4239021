"""The document inventory of a source: what is new, changed, unchanged, removed or broken.

The store is the source of truth for what was ingested: every stored chunk carries its
document's `doc_hash` and `doc_chunk_count`, so a document counts as unchanged only when all of
its stored chunks carry the current hash and none is missing. A sync killed half-way therefore
leaves documents that look changed, and the next run repairs them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

# The settings' fingerprints live in a module without polars (the CLI's no-change check reads
# them); re-exported here, where the inventory that compares them lives.
from clef_pipelines.ingest.fingerprints import SETTING_NAMES as SETTING_NAMES
from clef_pipelines.ingest.fingerprints import (
    configured_pipeline_fingerprint as configured_pipeline_fingerprint,
)
from clef_pipelines.ingest.fingerprints import parts_fingerprint as parts_fingerprint
from clef_pipelines.ingest.fingerprints import pipeline_fingerprint as pipeline_fingerprint
from clef_pipelines.ingest.fingerprints import pipeline_parts as pipeline_parts
from clef_pipelines.ingest.fingerprints import settings_digest as settings_digest
from clef_pipelines.records import sha256_hex
from clef_pipelines.stores.base import VectorStore

NEW, CHANGED, UNCHANGED, REPAIR, REMOVED, FAILED = (
    "new",
    "changed",
    "unchanged",
    "repair",
    "removed",
    "failed",
)
#: An unchanged document with records a failed Clef call left `needs_rescreen` or
#: `needs_reenrich`: processed again, and only its unanswered texts are asked (the rest of its
#: answers come from the per-text cache, its unchanged chunks keep their vectors).
RESCREEN = "rescreen"
#: Statuses whose documents are parsed, chunked, embedded and synced.
TO_PROCESS = (NEW, CHANGED, REPAIR, RESCREEN)

#: The failure reason of a remote source's listing that failed (`parsing.remote`): the stored
#: documents the listing did not name are then failed with this reason, not removed.
UNLISTED = "unlisted"
_KEPT_UNLISTED = "not listed: the source's listing failed, so its stored records are kept"

#: The key, in a source's entry of the collection manifest, of its documents that store no
#: record (every paragraph dropped, no text): doc id -> the document hash they were processed
#: at. Without it such a document has nothing in the store to compare with, and every run
#: would process it again as new.
EMPTY_DOCUMENTS = "empty_documents"

INVENTORY_SCHEMA = {
    "source": pl.Utf8,
    "doc_id": pl.Utf8,
    "source_uri": pl.Utf8,
    "doc_hash": pl.Utf8,
    "status": pl.Utf8,
    "reason": pl.Utf8,
    "error": pl.Utf8,
}


@dataclass
class StoredDocument:
    """What the store holds for one document of a source."""

    hashes: set[str] = field(default_factory=set)
    expected_counts: set[int] = field(default_factory=set)
    records: int = 0
    #: Some record still waits for a Clef answer (needs_rescreen / needs_reenrich).
    needs_asking: bool = False

    @property
    def complete(self) -> bool:
        return (
            len(self.hashes) == 1
            and len(self.expected_counts) == 1
            and next(iter(self.expected_counts)) == self.records
        )


def changed_settings(manifest: dict[str, Any] | None, source: str, digest: dict[str, str]) -> str:
    """The settings (`SETTING_NAMES`) that changed since the source's last sync, for a person:
    "none", the names joined, or "not recorded" (a first ingest, or a source last synced before
    the manifest kept them). Changed settings re-process every document of the source."""
    stored = (((manifest or {}).get("sources") or {}).get(source) or {}).get("settings")
    if not isinstance(stored, dict):
        return "not recorded"
    names = [
        SETTING_NAMES.get(k, k)
        for k in sorted(set(stored) | set(digest))
        if stored.get(k) != digest.get(k)
    ]
    return ", ".join(names) or "none"


def document_hash(raw_hash: str, fingerprint: str) -> str:
    return sha256_hex(f"{raw_hash}:{fingerprint}")[:32]


#: Stored records folded into per-document facts at a time (bounded memory for the inventory).
_SCAN_FOLD = 50_000

_STORED_SCHEMA = {
    "doc_id": pl.Utf8,
    "hash_min": pl.Utf8,
    "hash_max": pl.Utf8,
    "count_min": pl.Int64,
    "count_max": pl.Int64,
    "records": pl.Int64,
    "needs_asking": pl.Boolean,
}


def _fold(frame: pl.DataFrame) -> pl.DataFrame:
    """Per document: the smallest and largest hash and expected count, records, needs asking."""
    return frame.group_by("doc_id").agg(
        pl.col("hash_min").min(),
        pl.col("hash_max").max(),
        pl.col("count_min").min(),
        pl.col("count_max").max(),
        pl.col("records").sum(),
        pl.col("needs_asking").any(),
    )


def stored_document_facts(store: VectorStore, collection: str, source: str) -> pl.DataFrame:
    """Per document of `source`, what its stored records carry, as one row each (columns of
    `_STORED_SCHEMA`): the records are folded a slice at a time, so a source of millions of
    records never sits in memory as Python objects."""
    if not store.has_collection(collection):
        return pl.DataFrame(schema=_STORED_SCHEMA)
    # Each slice folded on its own, and the slices folded together once at the end: a
    # document's records are written together, so the folded slices add up to about one row
    # a document. Folding the running result into every slice instead re-grouped the whole
    # source once a slice, time quadratic in the source (docs/BENCHMARKS.md, "The
    # inventory, held three times during the sync").
    parts: list[pl.DataFrame] = []
    rows: list[tuple] = []

    def fold() -> None:
        parts.append(_fold(pl.DataFrame(rows, schema=_STORED_SCHEMA, orient="row")))

    for rec in store.scan(
        collection,
        where={"source": source},
        fields=["doc_id", "doc_hash", "doc_chunk_count", "needs_rescreen", "needs_reenrich"],
    ):
        h = rec.get("doc_hash") or ""
        c = int(rec.get("doc_chunk_count") or -1)
        asking = bool(rec.get("needs_rescreen") or rec.get("needs_reenrich"))
        rows.append((rec["doc_id"], h, h, c, c, 1, asking))
        if len(rows) >= _SCAN_FOLD:
            fold()
            rows = []
    fold()
    facts = _fold(pl.concat(parts, rechunk=False)) if len(parts) > 1 else parts[0]
    return _with_empty_documents(facts, store, collection, source)


def _with_empty_documents(
    facts: pl.DataFrame, store: VectorStore, collection: str, source: str
) -> pl.DataFrame:
    """`facts` with a row for each document the manifest records as storing no record (none
    stored, none expected), so that the inventory can call it unchanged."""
    entry = ((store.get_manifest(collection) or {}).get("sources") or {}).get(source) or {}
    recorded = dict(entry.get(EMPTY_DOCUMENTS) or {})
    if not recorded:
        return facts
    stored = set(facts["doc_id"].to_list())
    rows = [
        (str(k), str(v), str(v), 0, 0, 0, False) for k, v in recorded.items() if k not in stored
    ]
    if not rows:
        return facts
    return pl.concat([facts, pl.DataFrame(rows, schema=_STORED_SCHEMA, orient="row")])


def stored_documents(store: VectorStore, collection: str, source: str) -> dict[str, StoredDocument]:
    """Per document of `source`, the hashes and chunk counts its stored records carry."""
    if not store.has_collection(collection):
        return {}
    docs: dict[str, StoredDocument] = {}
    for rec in store.scan(
        collection,
        where={"source": source},
        fields=["doc_id", "doc_hash", "doc_chunk_count", "needs_rescreen", "needs_reenrich"],
    ):
        doc = docs.setdefault(rec["doc_id"], StoredDocument())
        doc.needs_asking |= bool(rec.get("needs_rescreen") or rec.get("needs_reenrich"))
        doc.hashes.add(rec.get("doc_hash") or "")
        doc.expected_counts.add(int(rec.get("doc_chunk_count") or -1))
        doc.records += 1
    return docs


@dataclass(frozen=True)
class EntryState:
    """One entry of a source listing, reduced to what the inventory needs."""

    doc_id: str
    source_uri: str
    doc_hash: str | None  # None when the entry could not even be read
    error: str | None = None
    reason: str | None = None


def plan_inventory(
    source: str,
    entries: Iterable[EntryState],
    stored: dict[str, StoredDocument],
    *,
    force: bool = False,
) -> pl.DataFrame:
    """Compare a source listing with the store and give every document a status."""
    rows: list[dict[str, str | None]] = []
    seen: set[str] = set()
    for entry in entries:
        if entry.doc_id in seen:
            rows.append(
                _row(source, entry, FAILED, "duplicate", f"duplicate document id {entry.doc_id!r}")
            )
            continue
        seen.add(entry.doc_id)
        if entry.error is not None or entry.doc_hash is None:
            # A broken document keeps whatever the store already holds for it.
            rows.append(_row(source, entry, FAILED, entry.reason or "error", entry.error))
            continue
        before = stored.get(entry.doc_id)
        if before is None:
            status = NEW
        elif not before.complete:
            status = REPAIR
        elif entry.doc_hash not in before.hashes or force:
            status = CHANGED
        else:
            status = RESCREEN if before.needs_asking else UNCHANGED
        rows.append(_row(source, entry, status, None, None))
    unlisted = any(r["reason"] == UNLISTED for r in rows)
    for doc_id in sorted(set(stored) - seen):
        rows.append(
            {
                "source": source,
                "doc_id": doc_id,
                "source_uri": None,
                "doc_hash": None,
                "status": FAILED if unlisted else REMOVED,
                "reason": UNLISTED if unlisted else None,
                "error": _KEPT_UNLISTED if unlisted else None,
            }
        )
    return pl.DataFrame(rows, schema=INVENTORY_SCHEMA)


LISTING_SCHEMA = {
    "doc_id": pl.Utf8,
    "source_uri": pl.Utf8,
    "doc_hash": pl.Utf8,
    "reason": pl.Utf8,
    "error": pl.Utf8,
}

#: Listing entries turned into a frame at a time.
_LISTING_SLICE = 20_000


def listing_frame(entries: Iterable[EntryState]) -> pl.DataFrame:
    """A source listing as a frame (built a slice at a time: no list of objects per document)."""
    frames: list[pl.DataFrame] = []
    rows: list[tuple] = []
    for e in entries:
        rows.append((e.doc_id, e.source_uri, e.doc_hash, e.reason, e.error))
        if len(rows) >= _LISTING_SLICE:
            frames.append(pl.DataFrame(rows, schema=LISTING_SCHEMA, orient="row"))
            rows = []
    frames.append(pl.DataFrame(rows, schema=LISTING_SCHEMA, orient="row"))
    return pl.concat(frames)


def plan_inventory_frame(
    source: str, listing: pl.DataFrame, stored: pl.DataFrame, *, force: bool = False
) -> pl.DataFrame:
    """`plan_inventory` on frames: the listing (`listing_frame`) against the stored facts
    (`stored_document_facts`), column-wise, for sources of millions of documents."""
    complete = (
        (pl.col("hash_min") == pl.col("hash_max"))
        & (pl.col("count_min") == pl.col("count_max"))
        & (pl.col("count_min") == pl.col("records"))
    )
    # Only what the statuses need, joined in listing order (no copy of the facts' hashes twice).
    facts = stored.select(
        "doc_id",
        pl.col("hash_min").alias("_stored_hash"),
        complete.alias("_complete"),
        pl.col("needs_asking").alias("_asking"),
    )
    plan = listing.with_columns(pl.col("doc_id").is_first_distinct().alias("_first")).join(
        facts, on="doc_id", how="left", maintain_order="left"
    )
    status = (
        pl.when(~pl.col("_first"))
        .then(pl.lit(FAILED))
        .when(pl.col("error").is_not_null() | pl.col("doc_hash").is_null())
        .then(pl.lit(FAILED))
        .when(pl.col("_complete").is_null())
        .then(pl.lit(NEW))
        .when(~pl.col("_complete"))
        .then(pl.lit(REPAIR))
        .when((pl.col("doc_hash") != pl.col("_stored_hash")) | pl.lit(force))
        .then(pl.lit(CHANGED))
        .when(pl.col("_asking"))
        .then(pl.lit(RESCREEN))
        .otherwise(pl.lit(UNCHANGED))
    )
    duplicate = ~pl.col("_first")
    failed = status == FAILED
    listed = plan.select(
        pl.lit(source).alias("source"),
        "doc_id",
        "source_uri",
        "doc_hash",
        status.alias("status"),
        pl.when(duplicate)
        .then(pl.lit("duplicate"))
        .when(failed)
        .then(pl.col("reason").fill_null("error"))
        .otherwise(None)
        .alias("reason"),
        pl.when(duplicate)
        .then(pl.format("duplicate document id '{}'", pl.col("doc_id")))
        .when(failed)
        .then(pl.col("error"))
        .otherwise(None)
        .alias("error"),
    )
    # A listing that failed (a remote source) names no document: those it did not name are
    # kept, as failed, never removed because an error left the listing empty.
    unlisted = bool(listing.select((pl.col("reason") == UNLISTED).any()).item())
    gone = (
        stored.select("doc_id")
        .join(listing.select("doc_id"), on="doc_id", how="anti")
        .sort("doc_id")
        .with_columns(
            pl.lit(source).alias("source"),
            pl.lit(None, dtype=pl.Utf8).alias("source_uri"),
            pl.lit(None, dtype=pl.Utf8).alias("doc_hash"),
            pl.lit(FAILED if unlisted else REMOVED).alias("status"),
            pl.lit(UNLISTED if unlisted else None, dtype=pl.Utf8).alias("reason"),
            pl.lit(_KEPT_UNLISTED if unlisted else None, dtype=pl.Utf8).alias("error"),
        )
        .select(list(INVENTORY_SCHEMA))
    )
    return pl.concat([listed.cast(INVENTORY_SCHEMA), gone.cast(INVENTORY_SCHEMA)])


def _row(
    source: str, entry: EntryState, status: str, reason: str | None, error: str | None
) -> dict[str, str | None]:
    return {
        "source": source,
        "doc_id": entry.doc_id,
        "source_uri": entry.source_uri,
        "doc_hash": entry.doc_hash,
        "status": status,
        "reason": reason,
        "error": error,
    }


def status_counts(inventory: pl.DataFrame) -> dict[str, int]:
    counts = {s: 0 for s in (NEW, CHANGED, REPAIR, RESCREEN, UNCHANGED, REMOVED, FAILED)}
    for status, n in inventory.group_by("status").len().iter_rows():
        counts[status] = int(n)
    return counts


def force_documents(inventory: pl.DataFrame, patterns: list[str]) -> pl.DataFrame:
    """Mark unchanged documents whose id matches one of the glob patterns as changed, so the
    run re-processes them (a targeted `force`)."""
    if not patterns:
        return inventory
    from fnmatch import fnmatchcase

    def wanted(doc_id: str) -> bool:
        return any(fnmatchcase(doc_id, p) for p in patterns)

    hit = (pl.col("status") == UNCHANGED) & pl.col("doc_id").map_elements(
        wanted, return_dtype=pl.Boolean
    )
    return inventory.with_columns(
        pl.when(hit).then(pl.lit(CHANGED)).otherwise(pl.col("status")).alias("status")
    )
