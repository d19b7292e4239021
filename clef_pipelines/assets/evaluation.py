"""Evaluation assets: one dynamic partition per labelled dataset (group `evaluation`).

eval_dataset -> eval_candidates -> eval_scores -> eval_report. The dataset's collection is
built by the ingestion graph under a source of the same name (`store_sync` for that partition),
so the evaluation measures exactly what ingestion produces.
"""

import time

import dagster as dg
import polars as pl

from clef_pipelines.assets.failures import redacted_failures
from clef_pipelines.assets.ingestion import ASSET_PREFIX, OWNERS, asset_key
from clef_pipelines.evals import run as evals
from clef_pipelines.resources.embedder import EmbedderResource
from clef_pipelines.resources.settings import PipelineSettings
from clef_pipelines.resources.store import VectorStoreResource

GROUP = "evaluation"
dataset_partitions = dg.DynamicPartitionsDefinition(name="eval_datasets")

_COMMON = {
    "owners": OWNERS,
    "partitions_def": dataset_partitions,
    "group_name": GROUP,
    "io_manager_key": "parquet_io",
    "key_prefix": [ASSET_PREFIX],
}


@dg.asset(
    **_COMMON,
    kinds={"python", "parquet"},
    description=(
        "The dataset's queries with their graded relevant documents and whether each is "
        "unanswerable, read from `evals.datasets` (beir:, squad:, jsonl:, injections:PATH)."
    ),
)
@redacted_failures
def eval_dataset(
    context: dg.AssetExecutionContext, pipeline_settings: PipelineSettings
) -> dg.Output[pl.DataFrame]:
    settings = pipeline_settings.settings
    dataset, queries = evals.load(settings, context.partition_key)
    return dg.Output(
        queries,
        metadata={
            "kind": dataset.kind,
            "split": dataset.split,
            "queries": queries.height,
            "unanswerable": int(queries["unanswerable"].sum() or 0),
            "documents": dataset.documents,
            "injection_texts": len(dataset.injections),
            "corpus": dg.MetadataValue.path(str(dataset.corpus_path or "")),
        },
    )


@dg.asset(
    **_COMMON,
    kinds={"python", "parquet"},
    deps=[dg.AssetDep(asset_key("store_sync"), partition_mapping=dg.IdentityPartitionMapping())],
    description=(
        "The top_k chunks of every query, recalled once from the dataset's collection, with the "
        "vector score and every recorded Clef score, gate probability and guard score."
    ),
)
@redacted_failures
def eval_candidates(
    context: dg.AssetExecutionContext,
    pipeline_settings: PipelineSettings,
    vector_store: VectorStoreResource,
    embedder: EmbedderResource,
    eval_dataset: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    started = time.perf_counter()
    settings = pipeline_settings.settings
    emb = embedder.get()
    frame, stats = evals.collect_candidates(
        settings, context.partition_key, eval_dataset, store=vector_store.get(), embedder=emb
    )
    return dg.Output(
        frame,
        metadata={
            "queries": stats.queries,
            "candidates": frame.height,
            "top_k": settings.evals.top_k,
            "embedder": emb.name,
            "query_embed_seconds": round(stats.embed_seconds, 3),
            "search_seconds": round(stats.search_seconds, 3),
            "scorers": dg.MetadataValue.json(stats.scorers),
            "warnings": dg.MetadataValue.json(stats.warnings),
            "seconds": round(time.perf_counter() - started, 3),
        },
    )


@dg.asset(
    **_COMMON,
    kinds={"python", "parquet"},
    description=(
        "Per query and system: nDCG@10, recall@k, MRR@10, evidence ranked first, abstention, "
        "context tokens and the Clef usage it relied on. Systems that need a missing score are "
        "listed with the reason."
    ),
)
@redacted_failures
def eval_scores(
    pipeline_settings: PipelineSettings, eval_dataset: pl.DataFrame, eval_candidates: pl.DataFrame
) -> dg.Output[pl.DataFrame]:
    result = evals.score(pipeline_settings.settings, eval_candidates, eval_dataset)
    return dg.Output(
        result.scores,
        metadata={
            "systems_scored": dg.MetadataValue.json(
                [s.name for s in result.statuses if s.available]
            ),
            "systems_unavailable": dg.MetadataValue.json(
                {s.name: s.reason for s in result.statuses if not s.available}
            ),
        },
    )


@dg.asset(
    key_prefix=[ASSET_PREFIX],
    partitions_def=dataset_partitions,
    group_name=GROUP,
    owners=OWNERS,
    kinds={"python", "markdown"},
    description=(
        "The benchmark report: a Markdown table with bootstrap 95% intervals, JSON and a PNG "
        "chart (in <data_dir>/evals/<dataset>/); headline numbers as numeric metadata."
    ),
)
@redacted_failures
def eval_report(
    context: dg.AssetExecutionContext,
    pipeline_settings: PipelineSettings,
    embedder: EmbedderResource,
    eval_dataset: pl.DataFrame,
    eval_candidates: pl.DataFrame,
    eval_scores: pl.DataFrame,
) -> dg.MaterializeResult:
    settings = pipeline_settings.settings
    report = evals.build_report(
        settings,
        context.partition_key,
        eval_dataset,
        eval_scores,
        candidates=eval_candidates,
        embedder_name=embedder.get().name,
    )
    from clef_pipelines.evals.report import markdown_report

    metadata: dict[str, dg.RawMetadataValue] = {
        # The chart is embedded so the UI shows it beside the table.
        "report": dg.MetadataValue.md(
            markdown_report(report.document, report.summary, report.chart)
        ),
        "report_json": dg.MetadataValue.path(str(report.paths["json"])),
        "report_markdown": dg.MetadataValue.path(str(report.paths["markdown"])),
        "clef": report.document["clef_label"],
        "queries": report.document["queries"],
    }
    if "chart" in report.paths:
        metadata["chart"] = dg.MetadataValue.path(str(report.paths["chart"]))
    for system, metrics in report.summary.items():
        for metric in (
            "ndcg@10",
            f"recall@{settings.evals.top_k}",
            "mrr@10",
            "abstain_unanswerable",
        ):
            if metric in metrics:
                metadata[f"{system}/{metric}"] = dg.MetadataValue.float(
                    round(metrics[metric]["mean"], 6)
                )
    for row in (report.document.get("injections") or {}).get("detectors", []):
        if row.get("available"):
            metadata[f"{row['name']}/recall"] = dg.MetadataValue.float(round(row["recall"], 6))
            metadata[f"{row['name']}/false_quarantine"] = dg.MetadataValue.float(
                round(row["false_quarantine"], 6)
            )
    return dg.MaterializeResult(metadata=metadata)


evaluation_assets = [eval_dataset, eval_candidates, eval_scores, eval_report]
