"""The ingestion graph: one dynamic partition per source, Parquet between the steps.

source_documents -> parsed_blocks -> screened_paragraphs -> chunks -> enrichments
-> embeddings -> store_sync. Each asset calls the plain-Python core and reports what it did.

Every asset key carries the prefix `clef` so the location can sit beside others in one
workspace. The steps after the inventory have optional outputs: when a source has nothing to
parse or delete, `parsed_blocks` emits nothing and Dagster skips everything downstream, so a
no-change run neither overwrites intermediates with empty frames nor materialises zeros; the
latest materialisations keep describing the data as it is.
"""

import time
from collections.abc import Iterator

import dagster as dg
import polars as pl
from pydantic import Field

from clef_pipelines.assets.metadata import failures_table, totals_metadata
from clef_pipelines.embedding.executor import open_batch_runner
from clef_pipelines.ingest import stages
from clef_pipelines.ingest.documents import (
    FAILED,
    REMOVED,
    TO_PROCESS,
    force_documents,
    pipeline_fingerprint,
    plan_inventory,
    status_counts,
    stored_documents,
)
from clef_pipelines.ingest.locks import collection_lock
from clef_pipelines.ingest.metadata import METADATA_RULE, stored_field_types
from clef_pipelines.ingest.progress import report as progress_report
from clef_pipelines.ingest.sync import check_manifest, embed_chunks, sync_source
from clef_pipelines.ingest.totals import source_totals
from clef_pipelines.resources.clef import ClefResource
from clef_pipelines.resources.embedder import EmbedderResource
from clef_pipelines.resources.settings import PipelineSettings
from clef_pipelines.resources.store import VectorStoreResource
from clef_pipelines.steering import checks
from clef_pipelines.steering.manifest import clef_enabled, steering_manifest

GROUP = "ingestion"
#: Prefix of every asset key of this code location (`clef/chunks`, ...).
ASSET_PREFIX = "clef"
source_partitions = dg.DynamicPartitionsDefinition(name="sources")

_BASE = {"partitions_def": source_partitions, "group_name": GROUP, "key_prefix": [ASSET_PREFIX]}
_COMMON = {**_BASE, "io_manager_key": "parquet_io"}
# The steps after the inventory emit nothing when the source has nothing to change.
_OPTIONAL = {**_COMMON, "output_required": False}


def _metadata_value(value: object) -> int | float | str:
    if value is None:
        return "none (exact search)"
    return value if isinstance(value, int | float | str) else str(value)


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
def source_documents(
    context: dg.AssetExecutionContext,
    config: IngestionRunConfig,
    pipeline_settings: PipelineSettings,
    vector_store: VectorStoreResource,
    embedder: EmbedderResource,
) -> dg.Output[pl.DataFrame]:
    started = time.perf_counter()
    settings = pipeline_settings.settings
    source = settings.source(context.partition_key)
    collection = settings.collection_of(source)
    store = vector_store.get()
    emb = embedder.get()
    if store.has_collection(collection):
        # Fail before any work when the collection was built with another embedder.
        check_manifest(store.get_manifest(collection), collection, emb)
    fingerprint = pipeline_fingerprint(settings, emb.name)
    entries = stages.list_entries(settings, source, fingerprint)
    inventory = plan_inventory(
        source.name, entries, stored_documents(store, collection, source.name), force=config.force
    )
    inventory = force_documents(inventory, config.force_documents)
    counts = status_counts(inventory)
    return dg.Output(
        inventory,
        metadata={
            "collection": collection,
            "documents": inventory.filter(pl.col("status") != "removed").height,
            **{f"documents_{k}": v for k, v in counts.items()},
            "failed_documents": failures_table(inventory.filter(pl.col("status") == FAILED)),
            # What the store holds for the source as the run starts (the state, beside the
            # statuses above, which say what this run will change).
            **totals_metadata(source_totals(store, collection, source.name)),
            # The sensor compares this with the files to tell whether a run is needed.
            "source_fingerprint": stages.source_fingerprint(settings, source),
            "seconds": round(time.perf_counter() - started, 3),
        },
    )


@dg.asset(
    **_OPTIONAL,
    kinds={"python", "parquet"},
    description=(
        "Structural blocks (heading, paragraph, list item, table, code, quote) of the new and "
        "changed documents of a source, with heading paths and character offsets."
    ),
)
def parsed_blocks(
    context: dg.AssetExecutionContext,
    pipeline_settings: PipelineSettings,
    embedder: EmbedderResource,
    source_documents: pl.DataFrame,
) -> Iterator[dg.Output[pl.DataFrame]]:
    started = time.perf_counter()
    if not source_documents.filter(pl.col("status").is_in([*TO_PROCESS, REMOVED])).height:
        # Nothing to parse, store or delete: yield nothing, so every later step is skipped and
        # the assets keep their last materialisation (which still describes the data).
        context.log.info("nothing changed in this source: later steps are skipped")
        return
    settings = pipeline_settings.settings
    source = settings.source(context.partition_key)
    fingerprint = pipeline_fingerprint(settings, embedder.get().name)
    blocks, failures = stages.parse_source(settings, source, source_documents, fingerprint)
    to_process = source_documents.filter(pl.col("status").is_in(TO_PROCESS)).height
    yield dg.Output(
        blocks,
        metadata={
            "documents_parsed": blocks["doc_id"].n_unique() if blocks.height else 0,
            "documents_skipped_unchanged": source_documents.filter(
                pl.col("status") == "unchanged"
            ).height,
            "documents_to_process": to_process,
            "documents_failed": failures.height,
            "failed_documents": failures_table(failures),
            "blocks": blocks.height,
            "blocks_by_kind": dg.MetadataValue.json(stages.counts_by(blocks, "kind")),
            "seconds": round(time.perf_counter() - started, 3),
        },
    )


def _check(name: str, result: tuple[bool, dict]) -> dg.AssetCheckResult:
    passed, facts = result
    return dg.AssetCheckResult(check_name=name, passed=passed, metadata=facts)


def _spec(name: str, asset: str, description: str) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(name, asset=asset_key(asset), description=description)


@dg.asset(
    **_OPTIONAL,
    kinds={"python", "parquet"},
    description=(
        "Parsed blocks with the paragraph-screen decision of each: keep, drop (boilerplate, "
        "P >= steering.screen.drop_boilerplate_at) or quarantine (instructions aimed at an AI: "
        "the offline guard, and Clef when a backend is configured). Both judges' probabilities "
        "(p_boilerplate, p_instructs_ai, p_guard), decision, screen_action and decided_by."
    ),
    check_specs=[
        _spec(
            "screen_rates_within_bounds",
            "screened_paragraphs",
            "Quarantine and drop rates of the partition within steering.checks bounds.",
        )
    ],
)
def screened_paragraphs(
    pipeline_settings: PipelineSettings,
    clef: ClefResource,
    parsed_blocks: pl.DataFrame,
):  # MaterializeResult with the frame as value
    settings = pipeline_settings.settings
    steering = stages.open_steering(settings, clef.client if parsed_blocks.height else None)
    try:
        screened, report = stages.screen_paragraphs(parsed_blocks, steering)
    finally:
        steering.close()
    return dg.MaterializeResult(
        value=screened,
        metadata={
            "blocks": screened.height,
            "screened": report.screened,
            "actions": dg.MetadataValue.json(stages.counts_by(screened, "screen_action")),
            "decisions": dg.MetadataValue.json(report.decisions),
            "screen": report.clef,
            "guard": report.guard,
            "judges": report.judges,
            "needs_rescreen": report.needs_rescreen,
            "failed_requests": dg.MetadataValue.json(report.failures),
            "clef_requests": report.requests,
            "clef_input_tokens": report.input_tokens,
            "cached_answers": report.cached_answers,
            "seconds": report.seconds,
        },
        check_results=[
            _check(
                "screen_rates_within_bounds",
                checks.screen_rates(screened, settings.steering.checks),
            )
        ],
    )


@dg.asset(
    **_OPTIONAL,
    kinds={"python", "parquet"},
    description=(
        "Chunks of the new and changed documents: `text` for the LLM, `embed_text` (title, "
        "section path, text) for the embedder, deterministic ids and full provenance. Each "
        "quarantined paragraph is a record of its own (`quarantined`)."
    ),
    check_specs=[
        _spec("chunks_within_max_tokens", "chunks", "No retrievable chunk over max_tokens.")
    ],
)
def chunks(
    context: dg.AssetExecutionContext,
    pipeline_settings: PipelineSettings,
    clef: ClefResource,
    vector_store: VectorStoreResource,
    screened_paragraphs: pl.DataFrame,
):  # MaterializeResult with the frame as value
    started = time.perf_counter()
    settings = pipeline_settings.settings
    chunker = None
    extra: dict = {}
    if settings.chunking.strategy == "clef" and screened_paragraphs.height:
        steering = stages.open_steering(settings, clef.client)
        try:
            chunker = stages.clef_chunker(settings, screened_paragraphs, steering)
        finally:
            steering.close()
    collection = settings.collection_of(settings.source(context.partition_key))
    frame, failures = stages.chunk_documents(
        settings,
        context.partition_key,
        screened_paragraphs,
        chunker,
        field_types=stored_field_types(vector_store.get(), collection),
    )
    if chunker is not None:
        r = chunker.report
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
    tokens = frame["tokens"] if frame.height else pl.Series([], dtype=pl.Int64)
    return dg.MaterializeResult(
        value=frame,
        check_results=[
            _check(
                "chunks_within_max_tokens",
                checks.chunk_sizes(frame, settings.chunking.max_tokens),
            )
        ],
        metadata={
            **extra,
            "quarantined_records": int(frame["quarantined"].sum() or 0) if frame.height else 0,
            "chunker": settings.chunking.strategy,
            "documents": frame["doc_id"].n_unique() if frame.height else 0,
            "chunks": frame.height,
            "tokens": int(tokens.sum() or 0),
            "tokens_p50": int(tokens.median() or 0) if frame.height else 0,
            "tokens_max": int(tokens.max() or 0) if frame.height else 0,
            "documents_failed": failures.height,
            "failed_documents": failures_table(failures),
            "metadata_rule": METADATA_RULE,
            "seconds": round(time.perf_counter() - started, 3),
        },
    )


@dg.asset(
    **_OPTIONAL,
    kinds={"python", "parquet"},
    description=(
        "Chunks with their Clef enrichment: quality probabilities (q_low_information, "
        "q_boilerplate, q_instructs_ai, q_self_contained; drop and quarantine by "
        "steering.enrich thresholds), taxonomy tags (tag_<field>, p_tag_<field>) and custom "
        "answers (x_<name>). Chunks pass unchanged when Clef is off; failed ones carry "
        "needs_reenrich."
    ),
    check_specs=[
        _spec(
            "enrichment_drop_rate_within_bounds",
            "enrichments",
            "Share of chunks the enrichment dropped within steering.checks.max_drop_rate.",
        )
    ],
)
def enrichments(
    pipeline_settings: PipelineSettings, clef: ClefResource, chunks: pl.DataFrame
):  # MaterializeResult with the frame as value
    settings = pipeline_settings.settings
    steering = stages.open_steering(settings, clef.client if chunks.height else None)
    try:
        enriched, report = stages.enrich_chunks(chunks, steering)
    finally:
        steering.close()
    return dg.MaterializeResult(
        value=enriched,
        metadata={
            "chunks": enriched.height,
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
            "seconds": report.seconds,
        },
        check_results=[
            _check(
                "enrichment_drop_rate_within_bounds",
                checks.enrichment_drop_rate(chunks.height, enriched, settings.steering.checks),
            )
        ],
    )


@dg.asset(
    **_OPTIONAL,
    kinds={"python", "parquet"},
    description=(
        "Chunk vectors. Only chunks whose id (a hash of the embedded text) is not already in "
        "the store are embedded; the rest reuse their stored vector."
    ),
    check_specs=[_spec("every_chunk_embedded", "embeddings", "Every chunk has a finite vector.")],
)
def embeddings(
    context: dg.AssetExecutionContext,
    pipeline_settings: PipelineSettings,
    vector_store: VectorStoreResource,
    embedder: EmbedderResource,
    enrichments: pl.DataFrame,
):  # MaterializeResult with the frame as value
    started = time.perf_counter()
    settings = pipeline_settings.settings
    source = settings.source(context.partition_key)
    emb = embedder.get()

    def progress(done: int, total: int) -> None:
        progress_report("embed", done, total)
        if total and (done == total or done % (settings.embedder.batch_size * 20) == 0):
            context.log.info(f"embedded {done}/{total} chunks")

    frame, stats = embed_chunks(
        enrichments,
        emb,
        vector_store.get(),
        settings.collection_of(source),
        batch_size=settings.embedder.batch_size,
        progress=progress,
        open_runner=lambda: open_batch_runner(settings.embedder, emb),
    )
    if stats.over_window:
        context.log.warning(
            f"{stats.over_window} chunk texts are longer than {emb.name} reads "
            f"({emb.max_input_tokens} word pieces): their tails are not in their vectors; "
            "lower chunking.max_tokens"
        )
    return dg.MaterializeResult(
        value=frame,
        check_results=[_check("every_chunk_embedded", checks.all_embedded(frame, emb.dimension))],
        metadata={
            "embedder": emb.name,
            "dimension": emb.dimension if frame.height else 0,
            "chunks": stats.chunks,
            "embedded": stats.embedded,
            "reused": stats.reused,
            "embedder_calls": stats.embedder_calls,
            "embedder_seconds": round(stats.embedder_seconds, 3),
            "over_embedder_window": stats.over_window,
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
    check_specs=[
        _spec(
            "no_removed_documents_stored",
            "store_sync",
            "The store holds no record of a document the source no longer has.",
        ),
        _spec(
            "queries_never_return_quarantined",
            "store_sync",
            "Querying with each quarantined record's own vector never returns a quarantined "
            "record.",
        ),
    ],
)
def store_sync(
    context: dg.AssetExecutionContext,
    pipeline_settings: PipelineSettings,
    vector_store: VectorStoreResource,
    embedder: EmbedderResource,
    source_documents: pl.DataFrame,
    embeddings: pl.DataFrame,
) -> dg.MaterializeResult:
    started = time.perf_counter()
    settings = pipeline_settings.settings
    source = settings.source(context.partition_key)
    collection = settings.collection_of(source)
    store = vector_store.get()
    # Runs launched from the UI or a schedule take the collection's write lock here (a CLI run
    # already holds it; the lock is reentrant in one process).
    with collection_lock(settings.data_path, collection, timeout_s=settings.ingest_lock_timeout_s):
        report = sync_source(
            store,
            collection,
            source.name,
            source_documents,
            embeddings,
            embedder.get(),
            chunker=settings.chunking.strategy,
            steering=steering_manifest(settings.steering, clef_enabled=clef_enabled(settings)),
            batch_rows=settings.sync_batch_rows,
            progress=lambda done, total: progress_report("sync", done, total),
            text_language=settings.store.text_language,
        )
    total = store.count(collection) if store.has_collection(collection) else 0
    totals = source_totals(store, collection, source.name)
    return dg.MaterializeResult(
        metadata={
            # The state after this run: what the store holds for the source ...
            "dagster/row_count": dg.MetadataValue.int(totals.records),
            **totals_metadata(totals),
            # ... and what this run changed.
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
            "seconds": round(time.perf_counter() - started, 3),
        },
        check_results=[
            _check(
                "no_removed_documents_stored",
                checks.no_removed_documents(store, collection, source.name, source_documents),
            ),
            _check(
                "queries_never_return_quarantined",
                checks.quarantine_hidden(store, collection, source.name),
            ),
        ],
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
    done = store.build_indexes(collection)
    return dg.MaterializeResult(
        metadata={
            "store": store.kind,
            "collection": collection,
            **{k: _metadata_value(v) for k, v in done.items()},
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
