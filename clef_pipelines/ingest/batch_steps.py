"""Each ingestion step over a run's batches: read one batch, run the stage, write that batch.

The assets call one of these each and turn the returned summary into metadata and asset-check
results; nothing here knows about Dagster. Going batch by batch keeps a run's memory bounded by
`batching.batch_documents` whatever the size of the source, and each summary adds the batches'
reports up (`merge_reports`) so the run reports one set of figures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field

import polars as pl

from clef_pipelines.clef.client import SyncClefClient
from clef_pipelines.config import Settings
from clef_pipelines.embedding.base import Embedder
from clef_pipelines.embedding.executor import open_batch_runner
from clef_pipelines.ingest import stages
from clef_pipelines.ingest.batches import BATCH, BatchWriter, FrameBatches, merge_reports
from clef_pipelines.ingest.documents import (
    REMOVED,
    TO_PROCESS,
    pipeline_parts,
    settings_digest,
)
from clef_pipelines.ingest.locks import collection_lock
from clef_pipelines.ingest.metadata import FieldTypes
from clef_pipelines.ingest.progress import report as progress_report
from clef_pipelines.ingest.sync import (
    EmbedStats,
    SyncReport,
    confirm_new_documents,
    embed_chunks,
    finish_sync,
    sync_batch,
)
from clef_pipelines.records import CHUNK_SCHEMA
from clef_pipelines.steering import checks
from clef_pipelines.steering.clef_chunking import ClefChunkingReport
from clef_pipelines.steering.enrich import EnrichReport
from clef_pipelines.steering.manifest import clef_enabled, steering_manifest
from clef_pipelines.steering.quarantine import QuarantineSummary
from clef_pipelines.steering.release import Releases
from clef_pipelines.steering.screen import ScreenReport
from clef_pipelines.stores.base import VectorStore

#: Where a step says something a user should read in the run's log (Dagster's `context.log`).
LogFn = Callable[[str], None]


@dataclass
class ScreenSummary:
    report: ScreenReport
    actions: Counter[str]  # screen_action of every block
    judged: Counter[str]  # screen_action of the blocks a judge looked at (the rate check's input)
    #: What was quarantined, per kind of document, with examples; released blocks counted.
    quarantine: QuarantineSummary = field(default_factory=QuarantineSummary)


def screen_batches(
    settings: Settings,
    clef: SyncClefClient | None,
    blocks: FrameBatches,
    out: BatchWriter,
    source: str | None = None,
) -> ScreenSummary:
    """The paragraph screen over every batch of parsed blocks; blocks released from the
    quarantine (`steering.release`, the collection of `source`) are kept."""
    keys = blocks.keys()
    steering = stages.open_steering(settings, clef if keys else None)
    report: ScreenReport | None = None
    actions: Counter[str] = Counter()
    judged: Counter[str] = Counter()
    quarantine = QuarantineSummary()
    releases = stages.source_releases(settings, source) if source and keys else Releases()
    total, before = blocks.rows(), 0
    progress_report("screen", 0, total)
    try:
        for key in keys:
            batch = blocks.read(key)

            # Blocks through the screen so far: the guard's scored share of this batch.
            def judged_so_far(done: int, of: int, at: int = before, n: int = batch.height) -> None:
                progress_report("screen", at + (n * done // of if of else 0), total)

            screened, part = stages.screen_paragraphs(
                batch, steering, settings.chunking, on_judged=judged_so_far
            )
            before += batch.height
            progress_report("screen", before, total)
            screened, released = stages.release_blocks(screened, releases, part)
            report = merge_reports(report, part)
            actions.update(screened["screen_action"].to_list())
            judged.update(checks.judged_actions(screened))
            quarantine.add(screened, released=released)
            out.write_batch(key, screened)
        if report is None:  # nothing to screen: the report of an empty run (modes, zeros)
            _, report = stages.screen_paragraphs(pl.DataFrame(schema=stages.BLOCK_SCHEMA), steering)
    finally:
        steering.close()
    return ScreenSummary(report=report, actions=actions, judged=judged, quarantine=quarantine)


@dataclass
class ChunkSummary:
    documents: int = 0
    records: int = 0
    quarantined: int = 0
    tokens: pl.Series = field(default_factory=lambda: pl.Series([], dtype=pl.Int64))
    failures: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(schema=stages.FAILURE_SCHEMA)
    )
    sizes: checks.Check = (True, {})  # the max_tokens check over every batch
    clef: ClefChunkingReport | None = None  # only with chunking.strategy: clef


def chunk_batches(
    settings: Settings,
    source: str,
    clef: SyncClefClient | None,
    screened: FrameBatches,
    types: FieldTypes,
    out: BatchWriter,
) -> ChunkSummary:
    """Chunk the kept paragraphs of every batch (Clef-placed boundaries when configured)."""
    keys = screened.keys()
    summary = ChunkSummary()
    failures: list[pl.DataFrame] = []
    tokens: list[pl.Series] = []
    sizes: list[checks.Check] = []
    with ExitStack() as stack:
        steering = None
        if settings.chunking.strategy == "clef" and keys:
            steering = stages.open_steering(settings, clef)
            stack.callback(steering.close)
        total, before = screened.rows(), 0
        progress_report("chunk", 0, total)
        for key in keys:
            paragraphs = screened.read(key)
            chunker = None
            if steering is not None and paragraphs.height:
                chunker = stages.clef_chunker(settings, paragraphs, steering)
            frame, failed = stages.chunk_documents(
                settings,
                source,
                paragraphs,
                chunker,
                types=types,
                progress=lambda done, at=before: progress_report("chunk", at + done, total),
            )
            before += paragraphs.height
            progress_report("chunk", before, total)
            if chunker is not None:
                summary.clef = merge_reports(summary.clef, chunker.report)
            failures.append(failed)
            sizes.append(checks.chunk_sizes(frame, settings.chunking.max_tokens))
            if frame.height:
                summary.documents += frame["doc_id"].n_unique()
                summary.records += frame.height
                summary.quarantined += int(frame["quarantined"].sum() or 0)
                tokens.append(frame["tokens"])
            out.write_batch(key, frame)
    if tokens:
        summary.tokens = pl.concat(tokens)
    if failures:
        summary.failures = pl.concat(failures)
    summary.sizes = checks.combine_chunk_sizes(sizes, settings.chunking.max_tokens)
    return summary


@dataclass
class EnrichSummary:
    report: EnrichReport
    chunks_in: int
    chunks_out: int


def enrich_batches(
    settings: Settings, clef: SyncClefClient | None, chunks: FrameBatches, out: BatchWriter
) -> EnrichSummary:
    """Chunk enrichment over every batch (chunks pass unchanged when Clef is off)."""
    keys = chunks.keys()
    steering = stages.open_steering(settings, clef if keys else None)
    report: EnrichReport | None = None
    chunks_in = chunks_out = 0
    try:
        for key in keys:
            frame = chunks.read(key)
            enriched, part = stages.enrich_chunks(frame, steering)
            report = merge_reports(report, part)
            chunks_in += frame.height
            chunks_out += enriched.height
            out.write_batch(key, enriched)
        if report is None:
            _, report = stages.enrich_chunks(pl.DataFrame(schema=CHUNK_SCHEMA), steering)
    finally:
        steering.close()
    return EnrichSummary(report=report, chunks_in=chunks_in, chunks_out=chunks_out)


@dataclass
class EmbedSummary:
    stats: EmbedStats
    embedded: checks.Check  # every chunk has a finite vector, over every batch


def embed_batches(
    settings: Settings,
    collection: str,
    chunks: FrameBatches,
    embedder: Embedder,
    store: VectorStore,
    out: BatchWriter,
    log: LogFn,
) -> EmbedSummary:
    """Embed every batch; ids the store already holds reuse their stored vector. The embedding
    executor (Ray actors, when configured) opens once, on the first batch that needs it."""
    stats: EmbedStats | None = None
    embedded_before = 0
    parts: list[checks.Check] = []
    every = settings.embedder.batch_size * 20

    # Chunks through the embedding, of every chunk of the run: a chunk whose vector the
    # store already holds counts when its batch is done.
    rows_total, rows_before = chunks.rows(), 0
    progress_report("embed", 0, rows_total)

    def progress(done: int, total: int) -> None:
        progress_report("embed", min(rows_before + done, rows_total), rows_total)
        if total and (done == total or done % every == 0):
            log(f"embedded {embedded_before + done} chunks")

    with ExitStack() as stack:
        runner = None

        def shared_runner():  # noqa: ANN202 (a context manager over the one runner)
            nonlocal runner
            if runner is None:
                runner = stack.enter_context(open_batch_runner(settings.embedder, embedder))
            return nullcontext(runner)

        keys = chunks.keys()  # (iterating FrameBatches yields frames too)
        for key in keys:
            batch = chunks.read(key)
            frame, part = embed_chunks(
                batch,
                embedder,
                store,
                collection,
                batch_size=settings.embedder.batch_size,
                progress=progress,
                open_runner=shared_runner,
            )
            stats = merge_reports(stats, part)
            embedded_before = stats.embedded
            rows_before += batch.height
            progress_report("embed", rows_before, rows_total)
            parts.append(checks.all_embedded(frame, embedder.dimension))
            out.write_batch(key, frame)
    if stats is None:
        _, stats = embed_chunks(pl.DataFrame(schema=CHUNK_SCHEMA), embedder, store, collection)
    if stats.over_window:
        log(
            f"{stats.over_window} chunk texts are longer than {embedder.name} reads "
            f"({embedder.max_input_tokens} word pieces): their tails are not in their vectors; "
            "lower chunking.max_tokens"
        )
    return EmbedSummary(stats=stats, embedded=checks.combine_embedded(parts, embedder.dimension))


@dataclass
class SyncSummary:
    report: SyncReport
    batches: int


def sync_batches(
    settings: Settings,
    source: str,
    store: VectorStore,
    embedder: Embedder,
    inventory: pl.DataFrame,
    embedded: FrameBatches,
    *,
    report: SyncReport | None = None,
    failed: frozenset[str] | None = None,
) -> SyncSummary:
    """Write every batch's chunks into the store and delete what the batch no longer holds,
    under the collection's write lock; then the source's manifest entry and store upkeep.

    `inventory`: the source's inventory (`SYNC_INVENTORY_COLUMNS` suffice); only its new,
    changed, repaired and removed documents are synced. Taken whole and filtered a batch at a
    time, not as a filtered copy: on a first load every document is new, and the copy was the
    size of the inventory. `report`: filled in as the batches are written (see above).
    `failed`: documents that failed after the inventory (`ingest.failed`), None when not
    known."""
    collection = settings.collection_of(settings.source(source))
    # The caller's report, when given, holds what was written even if a batch fails.
    report = report if report is not None else SyncReport()
    touched = pl.col("status").is_in([*TO_PROCESS, REMOVED])
    touched_batches = inventory.lazy().filter(touched).select(pl.col(BATCH).unique()).collect()
    keys = sorted(set(embedded.keys()) | set(touched_batches[BATCH].to_list()))
    wrote = False
    # Runs launched from the UI or a schedule take the lock here (a CLI run already holds it;
    # the lock is reentrant in one process).
    with collection_lock(settings.data_path, collection, timeout_s=settings.ingest_lock_timeout_s):
        # Before the first write: new documents' chunks are appended, not upserted.
        inventory = confirm_new_documents(store, collection, source, inventory)
        progress_report("sync", 0, len(keys))
        for n, key in enumerate(keys, start=1):
            # Batch by batch: each batch's documents are complete in the store before the next
            # starts, so a run killed half-way leaves whole batches done and the rest to repair.
            wrote |= sync_batch(
                store,
                collection,
                source,
                inventory.filter((pl.col(BATCH) == key) & touched),
                embedded.read(key),
                embedder,
                report=report,
                failed=failed,
                batch_rows=settings.sync_batch_rows,
                text_language=settings.store.text_language,
            )
            progress_report("sync", n, len(keys))
        if wrote:
            finish_sync(
                store,
                collection,
                source,
                embedder,
                report,
                chunker=settings.chunking.strategy,
                steering=steering_manifest(settings.steering, clef_enabled=clef_enabled(settings)),
                settings=settings_digest(pipeline_parts(settings, embedder.name)),
            )
    return SyncSummary(report=report, batches=len(keys))
