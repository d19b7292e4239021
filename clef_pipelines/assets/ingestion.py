"""The ingestion graph: one dynamic partition per source, Parquet between the steps.

source_documents -> parsed_blocks -> screened_paragraphs -> chunks -> enrichments
-> embeddings -> store_sync -> vector_indexes. Each asset calls the plain-Python core and
reports what it did.

A source is processed in stable batches (`ingest.batches`: a hash of the document id picks the
batch): the inventory gives every document its batch, and each later step streams the run's
work through one batch at a time, writing one Parquet file per batch, so a run's peak memory is
set by `batching.batch_documents`, not by the size of the source. A refresh reads and writes
only the batches that hold changed or removed documents.

Every asset key carries the prefix `clef` so the location can sit beside others in one
workspace. Every asset materialises on every run, however it was launched (the job, an asset
backfill from the UI, the sensor, the schedule, the CLI): a run where nothing changed hands an
empty change from step to step and each step says so (`changed: false`), so the partition is
up to date in the catalog and an asset backfill of unchanged sources ends green.

What each asset holds: `source_documents` is the source's whole inventory, `store_sync` and
`vector_indexes` the source's whole state in the store; the Parquet intermediates in between
(`parsed_blocks` to `embeddings`) hold the last run's change (the new and changed documents;
empty when nothing changed), and their metadata says so beside the whole-state counts
(`state/documents`, `store/chunks`, ...).
"""

import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
from pydantic import Field

from clef_pipelines.assets.check_state import standing
from clef_pipelines.assets.failures import redacted_failures, store_retries
from clef_pipelines.assets.metadata import failures_table, quarantine_metadata, totals_metadata
from clef_pipelines.config import Settings
from clef_pipelines.ingest import batch_steps, process_memory, progress, stages
from clef_pipelines.ingest.batches import (
    BATCH,
    BatchWriter,
    FrameBatches,
    FrameFile,
    batch_column,
    batch_count,
)
from clef_pipelines.ingest.clean_runs import forget_clean_run
from clef_pipelines.ingest.documents import (
    FAILED,
    REMOVED,
    TO_PROCESS,
    changed_settings,
    force_documents,
    listing_frame,
    parts_fingerprint,
    pipeline_fingerprint,
    pipeline_parts,
    plan_inventory_frame,
    settings_digest,
    status_counts,
    stored_document_facts,
)
from clef_pipelines.ingest.failed import clear_failed, read_failed, write_failed
from clef_pipelines.ingest.locks import collection_lock
from clef_pipelines.ingest.metadata import METADATA_RULE, FieldTypes, stored_field_types
from clef_pipelines.ingest.sync import SYNC_INVENTORY_COLUMNS, SyncReport, check_manifest
from clef_pipelines.ingest.totals import source_totals
from clef_pipelines.jobs.source_runs import wait_for_source
from clef_pipelines.records import PIPELINE_VERSION
from clef_pipelines.resources.clef import ClefResource
from clef_pipelines.resources.embedder import EmbedderResource
from clef_pipelines.resources.settings import PipelineSettings
from clef_pipelines.resources.store import VectorStoreResource
from clef_pipelines.steering import checks
from clef_pipelines.steering.quarantine import review_commands
from clef_pipelines.stores.base import VectorStore
from clef_pipelines.stores.retry import retrying

GROUP = "ingestion"
#: Prefix of every asset key of this code location (`clef/chunks`, ...).
ASSET_PREFIX = "clef"
source_partitions = dg.DynamicPartitionsDefinition(name="sources")

#: Who answers for these assets (shown in the catalog, filterable there).
OWNERS = ["team:clef-pipelines"]
_BASE = {
    "partitions_def": source_partitions,
    "group_name": GROUP,
    "key_prefix": [ASSET_PREFIX],
    "owners": OWNERS,
    # The records' pipeline version: a new one changes every document's chunks (it is part of
    # each document's hash), and the catalog marks the assets' code as changed.
    "code_version": PIPELINE_VERSION,
}
_COMMON = {**_BASE, "io_manager_key": "parquet_io"}


def _metadata_value(value: object) -> int | float | str:
    if value is None:
        return "none (exact search)"
    return value if isinstance(value, int | float | str) else str(value)


def configured_source(settings: Settings, partition: str):  # noqa: ANN201 (SourceConfig)
    """The configured source of a run's partition; a partition that names none (added by hand
    with "Add a partition" in the UI, or left from a source removed from the config) fails the
    run before any work, in one line that names the configured sources."""
    names = [s.name for s in settings.sources]
    if partition in names:
        return settings.source(partition)
    raise dg.Failure(
        description=(
            f"partition {partition!r} is not a configured source (configured: "
            f"{', '.join(names) or 'none'}): partitions follow the config's `sources:`; add "
            "the source there (name and path) and reload the code location, or delete the "
            "partition (the sensor removes it on its next tick)"
        ),
        allow_retries=False,
    )


def _staging(settings, partition: str) -> Path:  # noqa: ANN001
    return settings.data_path / "intermediates" / ".staging" / partition


def _failed_at(settings, partition: str) -> Path | str:  # noqa: ANN001
    """Where a run's failed-document records live: beside the local staging, or with the
    intermediates on the object store (the steps may run on machines sharing no disk)."""
    if settings.data_url is not None:
        return f"{settings.intermediates_location}/.staging/{partition}"
    return _staging(settings, partition)


def _writer(context: dg.AssetExecutionContext, settings, name: str) -> BatchWriter:  # noqa: ANN001
    """Where a batched step writes this run's output before the IO manager moves it in."""
    return BatchWriter(_staging(settings, context.partition_key) / context.run_id / name)


def _batch_metadata(batches: FrameBatches, inventory_batches: int | None = None) -> dict:
    done = {"batches_written": len(batches.keys())}
    if inventory_batches is not None:
        done["batches"] = inventory_batches
    return done


#: What a delta intermediate holds, in its metadata (`holds`) and description.
DELTA = (
    "This run's change only: the new and changed documents of the source (empty when nothing "
    "changed). The source's whole state is `store_sync` (and `state/...`, `store/...` here)."
)


def _state_beside(context: dg.AssetExecutionContext, rows: int) -> dict[str, Any]:
    """Beside a delta intermediate's row count: that it holds this run's change, and the
    source's whole-state counts as this run's inventory found them (documents listed; what
    the store held for the source as the run started)."""
    facts: dict[str, Any] = {"holds": "this run's change", "changed": rows > 0}
    result = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=asset_key("source_documents"), asset_partitions=[context.partition_key]
        ),
        limit=1,
    )
    for record in result.records:
        mat = record.asset_materialization
        if mat is None:
            continue
        meta = mat.metadata
        if "documents" in meta:
            facts["state/documents"] = meta["documents"]
        for name in ("store/documents", "store/chunks", "store/records", "store/quarantined"):
            if name in meta:
                facts[name] = meta[name]
    return facts


def asset_key(name: str) -> dg.AssetKey:
    """The full key of one of the ingestion assets, e.g. `asset_key("chunks")`."""
    return dg.AssetKey([ASSET_PREFIX, name])


class IngestionRunConfig(dg.Config):
    """Run config of an ingestion run (the launchpad shows these fields with their defaults)."""

    force: bool = Field(
        default=False, description="Re-process every document of the source, changed or not."
    )
    force_documents: list[str] = Field(
        default_factory=list,
        description=(
            "Glob patterns of document ids to re-process even when unchanged: paths relative "
            "to a folder source (e.g. 'guides/*.md') or JSONL ids."
        ),
    )


@dg.asset(
    **_COMMON,
    kinds={"python", "parquet"},
    description=(
        "The inventory of a source: one row per document with its content hash and status "
        "against the store (new, changed, repair, unchanged, removed, failed with a reason)."
    ),
)
@redacted_failures
def source_documents(
    context: dg.AssetExecutionContext,
    config: IngestionRunConfig,
    pipeline_settings: PipelineSettings,
    vector_store: VectorStoreResource,
    embedder: EmbedderResource,
) -> dg.Output[FrameFile]:
    started = time.perf_counter()
    settings = pipeline_settings.settings
    source = configured_source(settings, context.partition_key)
    # One run per source at a time, however the run was launched and whatever the instance's
    # run queue limits (`jobs.source_runs`): an older run of the source finishes first.
    wait_for_source(
        context.instance,
        source.name,
        timeout_s=settings.ingest_lock_timeout_s,
        on_wait=context.log.info,
        run_id=context.run_id,
    )
    # Until this run ends clean, the source is not "unchanged since its last clean run":
    # a run that fails or is killed from here on leaves `ingest` a run to do (and repair).
    forget_clean_run(settings, source.name)
    # What a run killed in the middle of a step left half-written (one run per source at a
    # time: the wait above, the run queue and the collection lock see to that).
    shutil.rmtree(_staging(settings, context.partition_key), ignore_errors=True)
    clear_failed(_failed_at(settings, context.partition_key), settings.object_store)
    collection = settings.collection_of(source)
    store = vector_store.get()
    emb = embedder.get()
    manifest = store.get_manifest(collection) if store.has_collection(collection) else None
    # Fail before any work when the collection was built with another embedder.
    check_manifest(manifest, collection, emb)
    parts = pipeline_parts(settings, emb.name)
    fingerprint = parts_fingerprint(parts)
    # Column-wise, so the listing of a source of millions of documents stays small.
    inventory = plan_inventory_frame(
        source.name,
        listing_frame(stages.iter_entries(settings, source, fingerprint)),
        stored_document_facts(store, collection, source.name),
        force=config.force,
    )
    inventory = force_documents(inventory, config.force_documents)
    listed = inventory.filter(pl.col("status") != REMOVED).height
    batches = batch_count(listed, settings.batching.batch_documents)
    inventory = inventory.with_columns(batch_column(inventory["doc_id"], batches))
    changed_batches = inventory.filter(pl.col("status").is_in([*TO_PROCESS, REMOVED]))[
        BATCH
    ].n_unique()
    counts = status_counts(inventory)
    failed = inventory.filter(pl.col("status") == FAILED)
    # Nothing to write: the sync's upkeep will not run, so index upkeep an earlier run left
    # unfinished (killed, or out of disk, during it) is found and finished here.
    upkeep = (
        _finish_index_upkeep(settings, store, collection)
        if not changed_batches and manifest is not None
        else {}
    )
    # Handed on as its file, not as the frame: a run in one process would hold the frame
    # until the run ends (see `FrameFile`).
    staged = FrameFile.write(
        inventory,
        _staging(settings, context.partition_key) / context.run_id / "source_documents.parquet",
    )
    del inventory
    return dg.Output(
        staged,
        metadata={
            "collection": collection,
            "documents": listed,
            # Stable batches (a hash of the document id): how many, and how many this run
            # reads and writes (those holding a new, changed or removed document).
            "batches": batches,
            "batches_to_process": changed_batches,
            # Whether this run changes anything (False: every later step passes an empty
            # change on and says so).
            "changed": changed_batches > 0,
            **{f"documents_{k}": v for k, v in counts.items()},
            "failed_documents": failures_table(failed),
            # What the store holds for the source as the run starts (the state, beside the
            # statuses above, which say what this run will change).
            **totals_metadata(source_totals(store, collection, source.name)),
            # Which settings changed since the last sync (each re-processes every document;
            # chunks whose text is unchanged keep their vectors).
            "settings_changed": changed_settings(manifest, source.name, settings_digest(parts)),
            # The sensor compares these with the files and the settings to tell whether a run
            # is needed.
            "source_fingerprint": stages.source_fingerprint(settings, source),
            "pipeline_fingerprint": fingerprint,
            **({"index_upkeep": dg.MetadataValue.json(upkeep)} if upkeep else {}),
            "seconds": round(time.perf_counter() - started, 3),
        },
    )


def _partial_sync(
    store: VectorStore, collection: str, source: str, report: SyncReport
) -> dict[str, Any]:
    """A failed sync's figures: what it wrote, and the store's records counted afresh (left
    out when the store cannot be read either)."""
    facts: dict[str, Any] = {
        "upserted": report.upserted,
        "deleted_stale": report.deleted_stale,
        "deleted_removed": report.deleted_removed,
        "documents_synced": report.documents_synced,
    }
    try:
        facts.update(totals_metadata(source_totals(store, collection, source)))
        facts["collection_records"] = store.count(collection)
    except Exception:  # the failure itself is reported; the counts are a courtesy
        pass
    return facts


def _finish_index_upkeep(settings: Settings, store: VectorStore, collection: str) -> dict[str, Any]:
    """`VectorStore.complete_indexes` under the collection's write lock (reentrant: a CLI
    run holds it already), retried on a store conflict (`stores.retry`)."""
    with collection_lock(settings.data_path, collection, timeout_s=settings.ingest_lock_timeout_s):
        return retrying(lambda: store.complete_indexes(collection))


@dg.asset(
    **_COMMON,
    kinds={"python", "parquet"},
    description=(
        "Structural blocks (heading, paragraph, list item, table, code, quote) of the new and "
        "changed documents of a source, with heading paths and character offsets. "
    )
    + DELTA,
)
@redacted_failures
def parsed_blocks(
    context: dg.AssetExecutionContext,
    pipeline_settings: PipelineSettings,
    embedder: EmbedderResource,
    source_documents: pl.DataFrame,
) -> Iterator[dg.Output[FrameBatches]]:
    started = time.perf_counter()
    settings = pipeline_settings.settings
    out = _writer(context, settings, "parsed_blocks")
    if not source_documents.filter(pl.col("status").is_in([*TO_PROCESS, REMOVED])).height:
        # Nothing to parse, store or delete: an empty change goes on, so every later step
        # materialises too, says nothing changed, and the partition is up to date.
        context.log.info("nothing changed in this source: every step passes an empty change on")
        yield dg.Output(
            out.finish(),
            metadata={
                **_state_beside(context, 0),
                "documents_parsed": 0,
                "documents_skipped_unchanged": source_documents.height,
                "seconds": round(time.perf_counter() - started, 3),
            },
        )
        return
    source = settings.source(context.partition_key)
    fingerprint = pipeline_fingerprint(settings, embedder.get().name)
    stats, failures = stages.parse_source_batches(
        settings, source, source_documents, fingerprint, out
    )
    to_process = source_documents.filter(pl.col("status").is_in(TO_PROCESS)).height
    write_failed(
        _failed_at(settings, context.partition_key),
        "parsed_blocks",
        failures,
        settings.object_store,
    )
    blocks = out.finish()
    yield dg.Output(
        blocks,
        metadata={
            **_state_beside(context, blocks.rows()),
            "documents_parsed": stats.documents,
            "documents_skipped_unchanged": source_documents.filter(
                pl.col("status") == "unchanged"
            ).height,
            "documents_to_process": to_process,
            "documents_failed": failures.height,
            "failed_documents": failures_table(failures),
            "blocks": stats.blocks,
            "blocks_by_kind": dg.MetadataValue.json(stats.blocks_by_kind),
            **_batch_metadata(blocks),
            "seconds": round(time.perf_counter() - started, 3),
        },
    )


def _check(
    name: str,
    result: tuple[bool, dict],
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR,
) -> dg.AssetCheckResult:
    passed, facts = result
    return dg.AssetCheckResult(check_name=name, passed=passed, metadata=facts, severity=severity)


def _spec(name: str, asset: str, description: str) -> dg.AssetCheckSpec:
    # Recorded per source (partition), like the standalone checks (`assets.checks`);
    # partitioned checks are a preview in Dagster 1.13: not warned on every import.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.AssetCheckSpec(
            name, asset=asset_key(asset), description=description, partitions_def=source_partitions
        )


@dg.asset(
    **_COMMON,
    kinds={"python", "parquet"},
    description=(
        "Parsed blocks with the paragraph-screen decision of each: keep, drop (boilerplate, "
        "P >= steering.screen.drop_boilerplate_at) or quarantine (instructions aimed at an AI: "
        "the offline guard, and Clef when a backend is configured). Both judges' probabilities "
        "(p_boilerplate, p_instructs_ai, p_guard), decision, screen_action and decided_by. "
    )
    + DELTA,
    # The screen's other checks are standalone (`assets.checks`); this one needs the screen's
    # report (what the guard left to Clef, by reason), which only the step has.
    check_specs=[
        _spec(
            "guard_coverage",
            "screened_paragraphs",
            "Every screenable block had a judge: warns when the offline guard left blocks to "
            "Clef (documents in another language, blocks with no prose) while Clef is off. "
            "Such blocks are kept, not quarantined.",
        ),
    ],
)
@redacted_failures
def screened_paragraphs(
    context: dg.AssetExecutionContext,
    pipeline_settings: PipelineSettings,
    clef: ClefResource,
    parsed_blocks: FrameBatches,
):  # MaterializeResult with the batches as value
    settings = pipeline_settings.settings
    out = _writer(context, settings, "screened_paragraphs")
    done = batch_steps.screen_batches(
        settings, clef.client, parsed_blocks, out, source=context.partition_key
    )
    report = done.report
    screened_batches = out.finish()
    quarantine = done.quarantine.as_dict()
    collection = settings.collection_of(settings.source(context.partition_key))
    return dg.MaterializeResult(
        value=screened_batches,
        metadata={
            **_state_beside(context, screened_batches.rows()),
            "blocks": sum(done.actions.values()),
            "screened": report.screened,
            "actions": dg.MetadataValue.json(dict(sorted(done.actions.items()))),
            "decisions": dg.MetadataValue.json(report.decisions),
            "screen": report.clef,
            "guard": report.guard,
            # Which weights judged (part of each document's hash: a new guard re-screens).
            "guard_version": report.guard_version or "",
            # Paragraphs the guard left to Clef: by language (guard.languages), and no-prose.
            "guard_not_judged": dg.MetadataValue.json(report.guard_not_judged),
            # What the guard decided with each block's page as context: kept as fitting it,
            # quarantined as an off-topic request (steering.guard.context).
            "guard_context": dg.MetadataValue.json(report.guard_context),
            "judges": report.judges,
            "needs_rescreen": report.needs_rescreen,
            "failed_requests": dg.MetadataValue.json(report.failures),
            "clef_requests": report.requests,
            "clef_input_tokens": report.input_tokens,
            "cached_answers": report.cached_answers,
            # Chunks whose enrichment questions were asked with the screen (steering.preask).
            "preasked_chunks": report.preasked_chunks,
            "preask_failed": report.preask_failed,
            # What was quarantined, per kind of document, with the highest-scoring examples,
            # and blocks a release put back (steering.release).
            **quarantine_metadata(quarantine, review_commands(collection, context.partition_key)),
            **_batch_metadata(screened_batches),
            "seconds": report.seconds,
        },
        check_results=[
            _check(
                "guard_coverage",
                checks.guard_coverage(report.guard_not_judged, report.clef, report.screened),
                severity=dg.AssetCheckSeverity.WARN,
            )
            if parsed_blocks.rows()
            else standing(
                context, dg.AssetCheckKey(asset_key("screened_paragraphs"), "guard_coverage")
            ),
        ],
    )


@dg.asset(
    **_COMMON,
    kinds={"python", "parquet"},
    description=(
        "Chunks of the new and changed documents: `text` for the LLM, `embed_text` (title, "
        "section path, text) for the embedder, deterministic ids and full provenance. Each "
        "quarantined paragraph is a record of its own (`quarantined`). "
    )
    + DELTA,
)
@redacted_failures
def chunks(
    context: dg.AssetExecutionContext,
    pipeline_settings: PipelineSettings,
    clef: ClefResource,
    vector_store: VectorStoreResource,
    screened_paragraphs: FrameBatches,
):  # MaterializeResult with the batches as value
    started = time.perf_counter()
    settings = pipeline_settings.settings
    collection = settings.collection_of(settings.source(context.partition_key))
    types = FieldTypes(stored_field_types(vector_store.get(), collection))  # type: ignore[arg-type]
    out = _writer(context, settings, "chunks")
    done = batch_steps.chunk_batches(
        settings, context.partition_key, clef.client, screened_paragraphs, types, out
    )
    extra: dict = {}
    if (r := done.clef) is not None:
        extra = {
            "clef_chunking": dg.MetadataValue.json(
                {
                    "documents": r.documents,
                    "documents_structural_fallback": r.documents_fallback,
                    "fallback_reasons": r.fallback_reasons,
                    "pairs": r.pairs,
                    "requests": r.requests,
                    "cached_answers": r.cached_answers,
                }
            )
        }
        if r.documents_fallback:
            context.log.warning(
                f"{r.documents_fallback} document(s) chunked structural instead of clef: "
                + "; ".join(r.fallback_reasons)
            )
    tokens = done.tokens
    write_failed(
        _failed_at(settings, context.partition_key),
        "chunks",
        done.failures,
        settings.object_store,
    )
    chunk_batches = out.finish()
    return dg.MaterializeResult(
        value=chunk_batches,
        metadata={
            **_state_beside(context, chunk_batches.rows()),
            **extra,
            "quarantined_records": done.quarantined,
            "chunker": settings.chunking.strategy,
            "documents": done.documents,
            "chunks": done.records,
            "tokens": int(tokens.sum() or 0),
            "tokens_p50": int(tokens.median() or 0) if tokens.len() else 0,
            "tokens_max": int(tokens.max() or 0) if tokens.len() else 0,
            "documents_failed": done.failures.height,
            "failed_documents": failures_table(done.failures),
            "metadata_rule": METADATA_RULE,
            **_batch_metadata(chunk_batches),
            "seconds": round(time.perf_counter() - started, 3),
        },
    )


@dg.asset(
    **_COMMON,
    kinds={"python", "parquet"},
    description=(
        "Chunks with their Clef enrichment: quality probabilities (q_low_information, "
        "q_boilerplate, q_instructs_ai, q_self_contained; drop and quarantine by "
        "steering.enrich thresholds), taxonomy tags (tag_<field>, p_tag_<field>) and custom "
        "answers (x_<name>). Chunks pass unchanged when Clef is off; failed ones carry "
        "needs_reenrich. "
    )
    + DELTA,
)
@redacted_failures
def enrichments(
    context: dg.AssetExecutionContext,
    pipeline_settings: PipelineSettings,
    clef: ClefResource,
    chunks: FrameBatches,
):  # MaterializeResult with the batches as value
    settings = pipeline_settings.settings
    out = _writer(context, settings, "enrichments")
    done = batch_steps.enrich_batches(settings, clef.client, chunks, out)
    report = done.report
    enriched_batches = out.finish()
    return dg.MaterializeResult(
        value=enriched_batches,
        metadata={
            **_state_beside(context, enriched_batches.rows()),
            "chunks": done.chunks_out,
            "enrich": report.mode,
            "asked": report.asked,
            "decisions": dg.MetadataValue.json(report.decisions),
            "dropped": report.dropped,
            "quarantined": report.quarantined,
            "needs_reenrich": report.needs_reenrich,
            "failed_requests": dg.MetadataValue.json(report.failures),
            "tags": dg.MetadataValue.json(report.tags),
            "enrich_version": report.version or "",
            "clef_requests": report.requests,
            "clef_input_tokens": report.input_tokens,
            "cached_answers": report.cached_answers,
            **_batch_metadata(enriched_batches),
            "seconds": report.seconds,
        },
    )


@dg.asset(
    **_COMMON,
    kinds={"python", "parquet"},
    description=(
        "Chunk vectors. Only chunks whose id (a hash of the embedded text) is not already in "
        "the store are embedded; the rest reuse their stored vector. "
    )
    + DELTA,
)
@redacted_failures
def embeddings(
    context: dg.AssetExecutionContext,
    pipeline_settings: PipelineSettings,
    vector_store: VectorStoreResource,
    embedder: EmbedderResource,
    enrichments: FrameBatches,
):  # MaterializeResult with the batches as value
    started = time.perf_counter()
    settings = pipeline_settings.settings
    emb = embedder.get()
    out = _writer(context, settings, "embeddings")
    done = batch_steps.embed_batches(
        settings,
        settings.collection_of(settings.source(context.partition_key)),
        enrichments,
        emb,
        vector_store.get(),
        out,
        log=context.log.info,
    )
    stats = done.stats
    embedded_batches = out.finish()
    return dg.MaterializeResult(
        value=embedded_batches,
        metadata={
            **_state_beside(context, embedded_batches.rows()),
            "embedder": emb.name,
            "dimension": emb.dimension if stats.chunks else 0,
            "chunks": stats.chunks,
            "embedded": stats.embedded,
            "reused": stats.reused,
            "embedder_calls": stats.embedder_calls,
            "embedder_seconds": round(stats.embedder_seconds, 3),
            "over_embedder_window": stats.over_window,
            # Ray executor: actors and nodes lost mid-pass, and the batches sent again.
            "actors_lost": stats.actors_lost,
            "nodes_lost": stats.nodes_lost,
            "batches_retried": stats.batches_retried,
            "actors_replaced": stats.actors_replaced,
            **_batch_metadata(embedded_batches),
            "seconds": round(time.perf_counter() - started, 3),
        },
    )


@dg.asset(
    **_BASE,
    kinds={"python"},
    description=(
        "The source's records in the vector store: new and changed chunks upserted, stale and "
        "removed ones deleted, the collection manifest written. Other sources are untouched."
    ),
    # Only what the sync and its checks read: a first load's inventory is every document.
    ins={"source_documents": dg.AssetIn(metadata={"columns": list(SYNC_INVENTORY_COLUMNS)})},
)
@store_retries
@redacted_failures
def store_sync(
    context: dg.AssetExecutionContext,
    pipeline_settings: PipelineSettings,
    vector_store: VectorStoreResource,
    embedder: EmbedderResource,
    source_documents: pl.DataFrame,
    embeddings: FrameBatches,
) -> dg.MaterializeResult:
    started = time.perf_counter()
    settings = pipeline_settings.settings
    source = settings.source(context.partition_key)
    collection = settings.collection_of(source)
    store = vector_store.get()
    report = SyncReport()
    try:
        done = batch_steps.sync_batches(
            settings,
            source.name,
            store,
            embedder.get(),
            source_documents,
            embeddings,
            report=report,
            failed=read_failed(_failed_at(settings, context.partition_key), settings.object_store),
        )
    except Exception as exc:
        # What the run wrote before it failed goes with the failure, so `ingest` reports it
        # (not 0 records after thousands written; the next run repairs the rest).
        raise dg.Failure(
            description=f"the sync failed after writing {report.upserted} records",
            metadata=_partial_sync(store, collection, source.name, report),
        ) from exc
    total = store.count(collection) if store.has_collection(collection) else 0
    totals = source_totals(store, collection, source.name)
    return dg.MaterializeResult(
        metadata={
            # The state after this run: what the store holds for the source ...
            "dagster/row_count": dg.MetadataValue.int(totals.records),
            **totals_metadata(totals),
            # ... and what this run changed.
            "changed": bool(report.upserted or report.deleted_stale or report.deleted_removed),
            "store": store.kind,
            "collection": collection,
            "upserted": report.upserted,
            "deleted_stale": report.deleted_stale,
            "deleted_removed": report.deleted_removed,
            "documents_synced": report.documents_synced,
            "documents_removed": report.documents_removed,
            "writes": report.writes,
            "collection_records": total,
            "maintenance": dg.MetadataValue.json(report.maintenance),
            "batches_synced": done.batches,
            "seconds": round(time.perf_counter() - started, 3),
        },
    )


@dg.asset(
    **_BASE,
    kinds={"python"},
    deps=[store_sync],
    description=(
        "The ANN index of the source's collection, built or refreshed after the sync (LanceDB "
        "IVF/HNSW, pgvector HNSW, Qdrant's own HNSW), incrementally where the store can. Kept "
        "off the sync so a large load is not held up; until it runs queries search exactly."
    ),
)
@store_retries
@redacted_failures
def vector_indexes(
    context: dg.AssetExecutionContext,
    pipeline_settings: PipelineSettings,
    vector_store: VectorStoreResource,
) -> dg.MaterializeResult:
    started = time.perf_counter()
    settings = pipeline_settings.settings
    collection = settings.collection_of(settings.source(context.partition_key))
    store = vector_store.get()
    if not store.has_collection(collection):
        return dg.MaterializeResult(
            metadata={"collection": collection, "vector_index": "no collection yet"}
        )
    # An in-process store (LanceDB) builds the index here, and that build can set an ingest's
    # peak memory: hand the heap the earlier steps freed back to the OS first, and show the
    # process's resident memory before and after that and its peak before and after the build.
    peak_before, rss_before = process_memory.peak_rss_gb(), process_memory.rss_gb()
    process_memory.trim_heap()
    rss_trimmed = process_memory.rss_gb()
    # Under the collection's write lock: another source's sync or upkeep committing during the
    # build made LanceDB refuse one of the two ("Retryable commit conflict ... CreateIndex");
    # retried on a conflict with a writer that does not take the lock (`stores.retry`).
    with collection_lock(settings.data_path, collection, timeout_s=settings.ingest_lock_timeout_s):
        # The run log's heartbeat says the build is alive (`ingest.progress`): rows to index.
        rows = int(store.index_status(collection).get("rows") or 0)
        progress.report("index", 0, rows)
        done = retrying(lambda: store.build_indexes(collection))
        progress.report("index", rows, rows)
    return dg.MaterializeResult(
        metadata={
            "store": store.kind,
            "collection": collection,
            **{k: _metadata_value(v) for k, v in done.items()},
            "process_rss_gb_before": rss_before,
            "process_rss_gb_trimmed": rss_trimmed,
            "process_peak_gb_before": peak_before,
            "process_peak_gb_after": process_memory.peak_rss_gb(),
            "seconds": round(time.perf_counter() - started, 3),
        }
    )


ingestion_assets = [
    source_documents,
    parsed_blocks,
    screened_paragraphs,
    chunks,
    enrichments,
    embeddings,
    store_sync,
    vector_indexes,
]
