"""Embedding and store sync: only new content is embedded, and only one source is touched.

Order matters for crash safety: a document's new chunks are upserted before its stale chunks
are deleted, so a sync killed at any point leaves every document either complete or visibly
incomplete (mixed hashes or missing chunks), which the next inventory marks for repair.
Chunks of new documents are appended without an id lookup (`VectorStore.insert`), after
`confirm_new_documents` has checked, under the collection's lock, that the store holds none
of their records; a partly written new document is REPAIR on the next run and upserted.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import polars as pl

from clef_pipelines import __version__
from clef_pipelines.embedding.base import Embedder
from clef_pipelines.embedding.executor import BatchRunner, local_batches
from clef_pipelines.ingest.batches import BATCH
from clef_pipelines.ingest.documents import (
    CHANGED,
    EMPTY_DOCUMENTS,
    NEW,
    REMOVED,
    REPAIR,
    RESCREEN,
    TO_PROCESS,
)
from clef_pipelines.records import (
    FILTER_FIELDS,
    PIPELINE_VERSION,
    RECORD_FIELDS,
    field_type_of,
    is_payload_column,
)
from clef_pipelines.stores.base import CollectionSpec, FieldType, VectorStore

# Defined beside the stores so the query path need not import this module (and polars).
from clef_pipelines.stores.manifest import ManifestMismatch, check_manifest  # noqa: F401
from clef_pipelines.stores.retry import retrying

#: Test-only fault injection: SIGKILL this process after N upsert batches (the "killed run").
KILL_AFTER_UPSERTS_ENV = "CLEF_PIPELINES_FAULT_KILL_AFTER_UPSERTS"
#: Test-only fault injection: fail with ENOSPC (a full disk) after N upsert batches.
FAIL_AFTER_UPSERTS_ENV = "CLEF_PIPELINES_FAULT_FAIL_AFTER_UPSERTS"

#: The inventory columns the sync reads (`confirm_new_documents`, `sync_batch`, the batch
#: split, and the removed-documents check): the sync step loads these alone, since a first
#: load's inventory holds every document of the source.
SYNC_INVENTORY_COLUMNS = ("doc_id", "status", "doc_hash", BATCH)

ProgressFn = Callable[[int, int], None]


def payload_columns(frame: pl.DataFrame) -> list[str]:
    """The columns that become stored payload: the declared record fields and the dynamic
    families (user metadata, enrichment answers, tags)."""
    return [c for c in frame.columns if is_payload_column(c)]


#: What full-text search reads: the embedded text is title + section path + chunk text.
TEXT_FIELDS: tuple[str, ...] = ("embed_text",)


def collection_spec(
    name: str, embedder: Embedder, frame: pl.DataFrame, *, text_language: str = "english"
) -> CollectionSpec:
    fields: dict[str, FieldType] = dict(RECORD_FIELDS)
    for col in payload_columns(frame):
        if col not in fields:
            fields[col] = field_type_of(frame.schema[col])
    return CollectionSpec(
        name=name,
        dimension=embedder.dimension,
        metric=embedder.metric,
        fields=fields,
        filter_fields=FILTER_FIELDS,
        text_fields=TEXT_FIELDS,
        text_language=text_language,
    )


@dataclass
class EmbedStats:
    chunks: int = 0
    reused: int = 0
    embedded: int = 0
    embedder_calls: int = 0
    embedder_seconds: float = 0.0
    #: Embedded texts longer than the model reads: their tails are not in their vectors.
    over_window: int = 0
    #: What the Ray executor survived (`ExecutorCounters`): all 0 in-process.
    actors_lost: int = 0
    nodes_lost: int = 0
    batches_retried: int = 0
    actors_replaced: int = 0


def embed_chunks(
    chunks: pl.DataFrame,
    embedder: Embedder,
    store: VectorStore,
    collection: str,
    *,
    batch_size: int = 64,
    progress: ProgressFn | None = None,
    open_runner: Callable[[], AbstractContextManager[BatchRunner]] | None = None,
) -> tuple[pl.DataFrame, EmbedStats]:
    """Add a `vector` column; vectors of ids the store already holds are reused, not recomputed.

    ``open_runner`` says where the batches run (`embedding.executor`); it is opened only when
    something needs embedding, and closed (its Ray actors killed) however the pass ends.

    An id is a hash of the embedded text, and the manifest pins the embedder, so a stored
    vector with the same id is exactly what the embedder would return.
    """
    stats = EmbedStats(chunks=chunks.height)
    dim = embedder.dimension if chunks.height else 0
    ids = chunks["id"].to_list() if chunks.height else []
    # One float32 matrix filled in place: per-row arrays or Python float lists would cost
    # several times the vectors' own size at hundreds of thousands of chunks.
    matrix = np.zeros((len(ids), dim), dtype=np.float32)
    rows_of: dict[str, list[int]] = {}
    for i, id_ in enumerate(ids):
        rows_of.setdefault(id_, []).append(i)
    reused: set[str] = set()
    if ids and store.has_collection(collection):
        for start in range(0, len(ids), 1000):
            for rec in store.get(collection, ids[start : start + 1000], with_vectors=True):
                matrix[rows_of[rec["id"]]] = np.asarray(rec["vector"], dtype=np.float32)
                reused.add(rec["id"])
    stats.reused = len(reused)
    stats.over_window = count_over_window(chunks, embedder, skip=reused)
    texts = chunks["embed_text"].to_list() if chunks.height else []
    # Batches of similar length waste less compute on padding.
    todo = sorted(
        (i for i, id_ in enumerate(ids) if id_ not in reused), key=lambda i: len(texts[i])
    )
    batches = [todo[start : start + batch_size] for start in range(0, len(todo), batch_size)]
    started = time.perf_counter()
    if batches:
        with open_runner() if open_runner else nullcontext(local_batches(embedder)) as run:
            # The runner may be shared by several passes: count this pass's part only.
            before = run.counters.copy()
            results = run([texts[i] for i in batch] for batch in batches)
            for batch, out in zip(batches, results, strict=True):
                matrix[batch] = out
                stats.embedded += len(batch)
                stats.embedder_calls += 1
                if progress:
                    progress(stats.embedded, len(todo))
            survived = run.counters.minus(before)
            stats.actors_lost = survived.actors_lost
            stats.nodes_lost = survived.nodes_lost
            stats.batches_retried = survived.batches_retried
            stats.actors_replaced = survived.actors_replaced
    stats.embedder_seconds = time.perf_counter() - started
    column = (
        pl.Series("vector", matrix).cast(pl.List(pl.Float32))
        if len(ids)
        else pl.Series("vector", [], dtype=pl.List(pl.Float32))
    )
    return chunks.with_columns(column), stats


def count_over_window(chunks: pl.DataFrame, embedder: Embedder, *, skip: set[str]) -> int:
    """How many texts to embed exceed the embedder's input window (counted with the MiniLM
    word-piece counter; only chunks whose text alone comes near the window are counted)."""
    limit = embedder.max_input_tokens
    if limit is None or chunks.height == 0:
        return 0
    from clef_pipelines.chunking import count_tokens_batch

    near = chunks.filter((pl.col("tokens") > limit - 64) & ~pl.col("id").is_in(list(skip)))
    if near.height == 0:
        return 0
    return sum(1 for n in count_tokens_batch(near["embed_text"].to_list()) if n > limit)


@dataclass
class SyncReport:
    upserted: int = 0
    deleted_stale: int = 0
    deleted_removed: int = 0
    documents_synced: int = 0
    documents_removed: int = 0
    upsert_batches: int = 0
    maintenance: dict[str, Any] = field(default_factory=dict)
    #: Documents processed without failure that store no record (every paragraph dropped,
    #: no text: doc id -> its hash), and None for those that no longer are such (they have
    #: chunks now, or left the source). Kept in the source's manifest entry
    #: (`EMPTY_DOCUMENTS`), so that the next inventory sees them as unchanged.
    empty_documents: dict[str, str | None] = field(default_factory=dict)

    @property
    def writes(self) -> int:
        return self.upserted + self.deleted_stale + self.deleted_removed

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _record_batches(frame: pl.DataFrame, batch_rows: int) -> Iterator[list[dict[str, Any]]]:
    """Store records, a slice of the frame at a time (only one slice as Python objects)."""
    cols = payload_columns(frame)
    for start in range(0, frame.height, batch_rows):
        part = frame.slice(start, batch_rows)
        width = part["vector"].list.len().max() if part.height else 0
        vectors = part["vector"].cast(pl.Array(pl.Float32, int(width or 0))).to_numpy()
        records = part.select(["id", *[c for c in cols if c != "id"]]).to_dicts()
        for rec, vec in zip(records, vectors, strict=True):
            rec["vector"] = vec
        yield records


#: Restated (changed, repaired, rescreened) documents per scan of their stored ids.
_RESTATED_DOCS_PER_SCAN = 500

#: Document ids per `count` when checking that new documents have no stored records.
_CONFIRM_CHUNK = 1000


#: Stale record ids per delete once a group's new chunks are written.
_STALE_IDS_PER_DELETE = 1000


def _stored_ids(
    store: VectorStore, collection: str, source: str, doc_ids: list[str]
) -> dict[str, int]:
    """The ids the store holds for these documents of `source`, each with how often.

    An id stored twice (an insert repeated by an older sync) is deleted here, before any
    write: an upsert by id then has one row to replace, and a later delete of it as stale
    would not leave its twin behind. Only such duplicates can go missing for a moment."""
    counts: dict[str, int] = {}
    for start in range(0, len(doc_ids), _RESTATED_DOCS_PER_SCAN):
        where = {
            "source": source,
            "doc_id": {"in": doc_ids[start : start + _RESTATED_DOCS_PER_SCAN]},
        }
        for r in store.scan(collection, where=where, fields=[]):
            counts[r["id"]] = counts.get(r["id"], 0) + 1
    twice = [i for i, n in counts.items() if n > 1]
    for start in range(0, len(twice), _STALE_IDS_PER_DELETE):
        store.delete(
            collection, ids=twice[start : start + _STALE_IDS_PER_DELETE], where={"source": source}
        )
    for i in twice:
        del counts[i]
    return counts


WriteFn = Callable[[str, list[dict[str, Any]]], int]


def _write_parts(
    store: VectorStore, inventory: pl.DataFrame, embedded: pl.DataFrame, stored: set[str]
) -> list[tuple[WriteFn, pl.DataFrame]]:
    """How the batch's chunks are written: appended (`VectorStore.insert`) when their ids are
    not stored, upserted when they are (an unchanged text of a restated document, whose
    payload, e.g. its position or document hash, may differ), and upserted when the
    inventory did not mark their document (looked up by id, as before)."""
    # (A batch with removals only may come as a frame without columns.)
    if not embedded.height:
        return []
    replaced = inventory.filter(pl.col("status").is_in([NEW, CHANGED, REPAIR, RESCREEN]))
    appended = embedded["doc_id"].is_in(replaced["doc_id"].implode())
    if stored:
        appended = appended & ~embedded["id"].is_in(pl.Series(list(stored), dtype=pl.String))
    if appended.all():  # no copy of the frame
        return [(store.insert, embedded)]
    return [(store.insert, embedded.filter(appended)), (store.upsert, embedded.filter(~appended))]


def confirm_new_documents(
    store: VectorStore, collection: str, source: str, inventory: pl.DataFrame
) -> pl.DataFrame:
    """The inventory with every NEW document that has records in the store marked REPAIR.

    Why: the sync appends the chunks of NEW documents without looking their ids up
    (`VectorStore.insert`), which is only right when the store holds no record of them. The
    inventory says so as of when it was taken; an inventory older than the store (the sync
    step re-run alone on an earlier run's intermediates, or another run's sync of the source
    between this run's inventory and its sync) would append records twice. Called once per sync,
    under the collection's lock and before anything is written: when the store holds no
    record of the source (a first load) that is one count, else one count per
    `_CONFIRM_CHUNK` new documents on the indexed ``doc_id``."""
    # A polars column, listed as Python strings a chunk at a time: on a first load every
    # document is new, and a list of all their ids (some 70 bytes each) grew with the source.
    new = inventory.filter(pl.col("status") == NEW)["doc_id"]
    if new.is_empty() or not store.has_collection(collection):
        return inventory
    if store.count(collection, where={"source": source}) == 0:
        return inventory
    stored: set[str] = set()
    for start in range(0, new.len(), _CONFIRM_CHUNK):
        where = {"source": source, "doc_id": {"in": new.slice(start, _CONFIRM_CHUNK).to_list()}}
        if store.count(collection, where=where):
            stored.update(
                r["doc_id"] for r in store.scan(collection, where=where, fields=["doc_id"])
            )
    if not stored:
        return inventory
    return inventory.with_columns(
        pl.when((pl.col("status") == NEW) & pl.col("doc_id").is_in(list(stored)))
        .then(pl.lit(REPAIR))
        .otherwise(pl.col("status"))
        .alias("status")
    )


def sync_source(
    store: VectorStore,
    collection: str,
    source: str,
    inventory: pl.DataFrame,
    embedded: pl.DataFrame,
    embedder: Embedder,
    *,
    chunker: str,
    steering: dict[str, Any] | None = None,
    batch_rows: int = 512,
    progress: ProgressFn | None = None,
    text_language: str = "english",
) -> SyncReport:
    """Make the store hold exactly the current chunks of `source`, touching no other source."""
    report = SyncReport()
    wrote = sync_batch(
        store,
        collection,
        source,
        confirm_new_documents(store, collection, source, inventory),
        embedded,
        embedder,
        report=report,
        failed=frozenset(),
        batch_rows=batch_rows,
        progress=progress,
        text_language=text_language,
    )
    if wrote:
        finish_sync(store, collection, source, embedder, report, chunker=chunker, steering=steering)
    return report


def sync_batch(
    store: VectorStore,
    collection: str,
    source: str,
    inventory: pl.DataFrame,
    embedded: pl.DataFrame,
    embedder: Embedder,
    *,
    report: SyncReport,
    failed: frozenset[str] | None = frozenset(),
    batch_rows: int = 512,
    progress: ProgressFn | None = None,
    text_language: str = "english",
) -> bool:
    """Sync one batch of a source (its inventory rows and embedded chunks) into `report`;
    returns whether the store was touched. Call `finish_sync` once after the last batch.

    The chunks of NEW documents are appended (`VectorStore.insert`); changed, repaired and
    rescreened documents get their current chunks written first (appended, or upserted where
    the id is stored), then their stale rows deleted by id. The caller
    passes an inventory that `confirm_new_documents` checked against the store under the
    collection's lock, before the sync's first write.

    `failed`: documents that failed after the inventory (`ingest.failed`): they keep what the
    store holds. Any other processed document without chunks now stores none and is recorded
    in `report.empty_documents`. None: failures are not known, so documents without chunks
    are left as they are."""
    to_remove = inventory.filter(pl.col("status") == REMOVED)["doc_id"].to_list()
    with_chunks = set(embedded["doc_id"].unique().to_list()) if embedded.height else set()
    emptied = _note_empty_documents(inventory, with_chunks, to_remove, failed, report)
    if embedded.height == 0 and not to_remove and not emptied:
        return False  # nothing changed: write nothing, not even the manifest

    if not store.has_collection(collection) and embedded.height == 0:
        return False  # only removals, and there is nothing stored to remove them from
    check_manifest(store.get_manifest(collection), collection, embedder)
    store.ensure_collection(
        collection_spec(collection, embedder, embedded, text_language=text_language)
    )

    # Changed, repaired and rescreened documents are replaced in place, never emptied: their
    # current chunks are written first (an id the store holds already, i.e. an unchanged text
    # of the document, is upserted; the rest appended), and only then are their stale rows
    # (stored ids not among the current ones) deleted by id. So a query during a refresh sees
    # every such document, with its old chunks, its new ones or both, never with none. Ids are
    # content-derived (`records.record_id`), so old and new sets may share ids: only ids not in
    # the new set are deleted. A run killed between the writes and the deletes leaves
    # documents whose rows carry two hashes, which the next inventory marks REPAIR; that run
    # finds the stale rows the same way and removes them. A document that now yields no
    # chunks at all keeps none.
    restated = sorted(
        doc_id
        for doc_id in set(
            inventory.filter(pl.col("status").is_in([CHANGED, REPAIR, RESCREEN]))["doc_id"]
        )
        # A document without chunks is restated (its rows deleted) only when it is known
        # not to have failed: a broken document keeps what the store holds for it.
        if doc_id in with_chunks or (failed is not None and doc_id not in failed)
    )
    stored = _stored_ids(store, collection, source, restated)

    kill_after = int(os.environ.get(KILL_AFTER_UPSERTS_ENV, "0") or 0)
    fail_after = int(os.environ.get(FAIL_AFTER_UPSERTS_ENV, "0") or 0)
    done_before = report.upserted
    total = embedded.height
    for write, part in _write_parts(store, inventory, embedded, set(stored)):
        for batch in _record_batches(part, batch_rows):
            report.upserted += write(collection, batch)
            report.upsert_batches += 1
            if progress:
                progress(report.upserted - done_before, total)
            if kill_after and report.upsert_batches >= kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            if fail_after and report.upsert_batches >= fail_after:
                raise OSError(errno.ENOSPC, "No space left on device (fault injected)")
    report.documents_synced += embedded["doc_id"].n_unique() if embedded.height else 0

    if stored:
        current = set(embedded["id"]) if embedded.height else set()
        stale = [i for i in stored if i not in current]
        for start in range(0, len(stale), _STALE_IDS_PER_DELETE):
            report.deleted_stale += store.delete(
                collection,
                ids=stale[start : start + _STALE_IDS_PER_DELETE],
                where={"source": source},
            )

    for start in range(0, len(to_remove), 500):
        part = to_remove[start : start + 500]
        report.deleted_removed += store.delete(
            collection, where={"source": source, "doc_id": {"in": part}}
        )
    report.documents_removed += len(to_remove)
    return True


def _note_empty_documents(
    inventory: pl.DataFrame,
    with_chunks: set[str],
    removed: list[str],
    failed: frozenset[str] | None,
    report: SyncReport,
) -> bool:
    """Note in `report.empty_documents` which processed documents store no record now (not
    failed, no chunk) and which no longer are such; whether any document is newly empty."""
    if failed is None or "doc_hash" not in inventory.columns:
        return False
    processed = inventory.filter(pl.col("status").is_in(TO_PROCESS)).select("doc_id", "doc_hash")
    empty = False
    for doc_id, doc_hash in processed.iter_rows():
        if doc_id in failed:
            continue
        if doc_id in with_chunks or not doc_hash:
            report.empty_documents[doc_id] = None
        else:
            report.empty_documents[doc_id] = doc_hash
            empty = True
    for doc_id in removed:
        report.empty_documents[doc_id] = None
    return empty


def _empty_documents(previous: dict[str, Any], report: SyncReport) -> dict[str, str]:
    """The source's documents that store no record, after this run."""
    empties = {str(k): str(v) for k, v in dict(previous.get(EMPTY_DOCUMENTS) or {}).items()}
    for doc_id, doc_hash in report.empty_documents.items():
        if doc_hash is None:
            empties.pop(doc_id, None)
        else:
            empties[doc_id] = doc_hash
    return dict(sorted(empties.items()))


def finish_sync(
    store: VectorStore,
    collection: str,
    source: str,
    embedder: Embedder,
    report: SyncReport,
    *,
    chunker: str,
    steering: dict[str, Any] | None = None,
    settings: dict[str, str] | None = None,
) -> None:
    """After a source's batches: its entry in the collection manifest, then store upkeep.

    ``settings`` is `documents.settings_digest` of the run: the next inventory compares it
    with its own to name the settings that changed (`documents.changed_settings`)."""
    if not store.has_collection(collection):
        return
    manifest = store.get_manifest(collection) or {}
    sources = dict(manifest.get("sources") or {})
    empties = _empty_documents(dict(sources.get(source) or {}), report)
    sources[source] = {
        "chunker": chunker,
        # How the source was screened and enriched (see steering.manifest.screened_at_ingest).
        "steering": steering or {},
        **({"settings": settings} if settings else {}),
        **({EMPTY_DOCUMENTS: empties} if empties else {}),
        "synced_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    manifest.update(
        {
            "collection": collection,
            "embedder": embedder.name,
            "dimension": embedder.dimension,
            "metric": embedder.metric,
            "pipeline_version": PIPELINE_VERSION,
            "clef_pipelines_version": __version__,
            "store": store.kind,
            "sources": sources,
            # The collection as a whole: screened only when every source was (the query path
            # reads this; see steering.manifest.screened_at_ingest).
            "steering": {
                "screened": all(
                    bool((v.get("steering") or {}).get("screened")) for v in sources.values()
                )
            },
            "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    )
    store.put_manifest(collection, manifest)
    started = time.perf_counter()
    # Idempotent: run again when a writer outside the collection's lock preempted its commit.
    report.maintenance = retrying(lambda: store.maintain(collection)) or {}
    report.maintenance.setdefault("seconds", round(time.perf_counter() - started, 3))
