"""The ingestion asset checks: one per partition (source), each runnable on its own.

Each check is its own definition (`@dg.asset_check`) with the source partitions of the asset it
judges, so its result is recorded for the source it judged: a failure on one source is not
overwritten by another source passing, and the UI can run a check alone ("Execute" on the check,
or a selection of checks), reading what the asset holds. Two block the index step: a chunk with no
vector (`every_chunk_embedded` stops the sync) and a query that returns a quarantined record
(`queries_never_return_quarantined` stops `vector_indexes`).

A check over a step's change (the screen's rates, chunk sizes, enrichment drops, vectors) has
nothing new to judge when the run changed nothing: it restates its last result for the source
(`standing: true`, and the run that judged), so a failure stays failed until the source passes,
and a no-change refresh neither clears it nor fails anew. The checks over the store
(`store_sync`'s) judge the source's whole state on every run.
"""

# No `from __future__ import annotations`: Dagster reads the context and resource types from
# the evaluated annotations.

import warnings
from collections.abc import Callable
from typing import Any

import dagster as dg
import polars as pl

from clef_pipelines.assets.check_state import standing
from clef_pipelines.assets.failures import redacted_failures
from clef_pipelines.assets.ingestion import asset_key, source_partitions
from clef_pipelines.ingest.batches import FrameBatches
from clef_pipelines.ingest.sync import SYNC_INVENTORY_COLUMNS
from clef_pipelines.resources.embedder import EmbedderResource
from clef_pipelines.resources.settings import PipelineSettings
from clef_pipelines.resources.store import VectorStoreResource
from clef_pipelines.steering import checks


def _result(name: str, result: tuple[bool, dict]) -> dg.AssetCheckResult:
    passed, facts = result
    return dg.AssetCheckResult(check_name=name, passed=passed, metadata=facts)


def _check(
    asset: str, name: str, description: str, **kw: Any
) -> Callable[[Callable[..., Any]], dg.AssetChecksDefinition]:
    decorate = dg.asset_check(
        asset=asset_key(asset),
        name=name,
        description=description,
        partitions_def=source_partitions,
        **kw,
    )

    def apply(fn: Callable[..., Any]) -> dg.AssetChecksDefinition:
        # Partitioned checks are a preview in Dagster 1.13: not warned on every import.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.PreviewWarning)
            # A failed check's error is redacted like an asset's (`assets.failures`).
            return decorate(redacted_failures(fn))

    return apply


@_check(
    "screened_paragraphs",
    "screen_rates_within_bounds",
    "Quarantine and drop rates of the source's screened blocks within steering.checks bounds; "
    "a failure names the documents with the most quarantined (or dropped) blocks.",
)
def screen_rates_within_bounds(
    context: dg.AssetCheckExecutionContext,
    pipeline_settings: PipelineSettings,
    screened_paragraphs: FrameBatches,
) -> dg.AssetCheckResult:
    name = "screen_rates_within_bounds"
    if not screened_paragraphs.rows():
        return standing(context, dg.AssetCheckKey(asset_key("screened_paragraphs"), name))
    bounds = pipeline_settings.settings.steering.checks
    frames = (frame for _, frame in screened_paragraphs)
    return _result(name, checks.screen_rates_over(frames, bounds))


@_check(
    "chunks",
    "chunks_within_max_tokens",
    "No retrievable chunk over chunking.max_tokens; a failure names the documents and sizes.",
)
def chunks_within_max_tokens(
    context: dg.AssetCheckExecutionContext,
    pipeline_settings: PipelineSettings,
    chunks: FrameBatches,
) -> dg.AssetCheckResult:
    name = "chunks_within_max_tokens"
    if not chunks.rows():
        return standing(context, dg.AssetCheckKey(asset_key("chunks"), name))
    limit = pipeline_settings.settings.chunking.max_tokens
    return _result(name, checks.chunk_sizes_over((f for _, f in chunks), limit))


@_check(
    "enrichments",
    "enrichment_drop_rate_within_bounds",
    "Share of chunks the enrichment dropped within steering.checks.max_drop_rate; a failure "
    "names the documents that lost the most chunks.",
    additional_ins={"chunks": dg.AssetIn(key=asset_key("chunks"))},
)
def enrichment_drop_rate_within_bounds(
    context: dg.AssetCheckExecutionContext,
    pipeline_settings: PipelineSettings,
    enrichments: FrameBatches,
    chunks: FrameBatches,
) -> dg.AssetCheckResult:
    name = "enrichment_drop_rate_within_bounds"
    if not chunks.rows():
        return standing(context, dg.AssetCheckKey(asset_key("enrichments"), name))
    pairs = ((frame, enrichments.read(key)) for key, frame in chunks)
    bounds = pipeline_settings.settings.steering.checks
    return _result(name, checks.enrichment_drops_over(pairs, bounds))


@_check(
    "embeddings",
    "every_chunk_embedded",
    "Every chunk has a finite vector of the embedder's dimension; a failure names the "
    "documents. Blocking: the sync does not run after a failure.",
    blocking=True,
)
def every_chunk_embedded(
    context: dg.AssetCheckExecutionContext,
    embedder: EmbedderResource,
    embeddings: FrameBatches,
) -> dg.AssetCheckResult:
    name = "every_chunk_embedded"
    if not embeddings.rows():
        return standing(context, dg.AssetCheckKey(asset_key("embeddings"), name))
    dimension = embedder.get().dimension
    return _result(name, checks.embedded_over((f for _, f in embeddings), dimension))


@_check(
    "store_sync",
    "no_removed_documents_stored",
    "The store holds no record of a document the source no longer has; a failure names them.",
    additional_ins={
        "source_documents": dg.AssetIn(
            key=asset_key("source_documents"),
            metadata={"columns": list(SYNC_INVENTORY_COLUMNS)},
        )
    },
)
def no_removed_documents_stored(
    context: dg.AssetCheckExecutionContext,
    pipeline_settings: PipelineSettings,
    vector_store: VectorStoreResource,
    source_documents: pl.DataFrame,
) -> dg.AssetCheckResult:
    settings = pipeline_settings.settings
    collection = settings.collection_of(settings.source(context.partition_key))
    found = checks.no_removed_documents(
        vector_store.get(), collection, context.partition_key, source_documents
    )
    return _result("no_removed_documents_stored", found)


@_check(
    "store_sync",
    "queries_never_return_quarantined",
    "Querying with each quarantined record's own vector never returns a quarantined record; "
    "a failure names the records. Blocking: the index step does not run after a failure.",
    blocking=True,
)
def queries_never_return_quarantined(
    context: dg.AssetCheckExecutionContext,
    pipeline_settings: PipelineSettings,
    vector_store: VectorStoreResource,
) -> dg.AssetCheckResult:
    settings = pipeline_settings.settings
    collection = settings.collection_of(settings.source(context.partition_key))
    found = checks.quarantine_hidden(vector_store.get(), collection, context.partition_key)
    return _result("queries_never_return_quarantined", found)


ingestion_checks = [
    screen_rates_within_bounds,
    chunks_within_max_tokens,
    enrichment_drop_rate_within_bounds,
    every_chunk_embedded,
    no_removed_documents_stored,
    queries_never_return_quarantined,
]
