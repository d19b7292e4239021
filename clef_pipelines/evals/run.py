"""The evaluation steps as plain functions (the Dagster assets and the CLI call these)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from clef_pipelines.config import Settings
from clef_pipelines.embedding import Embedder
from clef_pipelines.evals.candidates import (
    CANDIDATE_SCHEMA,
    RecallStats,
    ScorerContext,
    apply_scorers,
    queries_frame,
    queries_from_frame,
    recall_candidates,
)
from clef_pipelines.evals.config import EvalDatasetConfig
from clef_pipelines.evals.datasets import EvalDataset, corpus_path, dataset_dir, load_dataset
from clef_pipelines.evals.injections import detector_rows
from clef_pipelines.evals.report import (
    chart_png,
    markdown_report,
    report_document,
    write_report_files,
)
from clef_pipelines.evals.scoring import (
    ScoreResult,
    score_systems,
    statuses_from_scores,
    summarise,
)
from clef_pipelines.evals.sources import eval_collection
from clef_pipelines.evals.systems import selected_systems
from clef_pipelines.stores import VectorStore


def dataset_config(settings: Settings, name: str) -> EvalDatasetConfig:
    return settings.evals.dataset(name)


def load(settings: Settings, name: str) -> tuple[EvalDataset, pl.DataFrame]:
    dataset = load_dataset(dataset_config(settings, name), settings.data_path)
    return dataset, queries_frame(dataset.queries)


def clef_label(settings: Settings) -> str:
    """What the Clef numbers in a report are; never let a test double pass for the model."""
    from clef_pipelines.clef.client import resolve_backend

    backend, _why = resolve_backend(settings.clef)
    if backend == "off":
        return "off: the Clef rows need a backend (clef.backend)"
    return f"backend {backend}, model {settings.clef.model}"


def collect_candidates(
    settings: Settings,
    name: str,
    queries: pl.DataFrame,
    *,
    store: VectorStore,
    embedder: Embedder,
    dataset: EvalDataset | None = None,
    clef: Any | None = None,
) -> tuple[pl.DataFrame, RecallStats]:
    cfg = dataset_config(settings, name)
    evaluated = queries_from_frame(queries)
    if not evaluated:
        return pl.DataFrame(schema=CANDIDATE_SCHEMA), RecallStats()
    frame, stats = recall_candidates(
        evaluated,
        store=store,
        embedder=embedder,
        collection=eval_collection(settings, cfg),
        top_k=settings.evals.top_k,
        batch_size=settings.embedder.batch_size,
    )
    context = ScorerContext(dataset, queries, clef, clef_label(settings))
    return apply_scorers(frame, context, stats), stats


def score(settings: Settings, candidates: pl.DataFrame, queries: pl.DataFrame) -> ScoreResult:
    return score_systems(
        candidates, queries, selected_systems(settings.evals.systems), settings.evals
    )


@dataclass
class Report:
    document: dict[str, Any]
    markdown: str
    chart: bytes | None
    paths: dict[str, Path]
    summary: dict[str, dict[str, dict[str, Any]]]


def build_report(
    settings: Settings,
    name: str,
    queries: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    embedder_name: str,
    extra: dict[str, Any] | None = None,
) -> Report:
    cfg = dataset_config(settings, name)
    summary = summarise(scores, settings.evals)
    statuses = statuses_from_scores(scores)
    header = {
        "dataset": cfg.name,
        "kind": cfg.kind,
        "spec": cfg.spec,
        "split": cfg.split,
        "queries": queries.height,
        "documents": _documents(settings, cfg),
        "judged": queries.filter(
            ~pl.col("unanswerable") & (pl.col("relevant").list.len() > 0)
        ).height,
        "unanswerable": int(queries["unanswerable"].sum() or 0),
        "collection": eval_collection(settings, cfg),
        "embedder": embedder_name,
        "top_k": settings.evals.top_k,
        "context_k": settings.evals.context_k,
        "clef_backend": settings.clef.backend,
        "clef_label": clef_label(settings),
        **(extra or {}),
    }
    sections: dict[str, Any] = {}
    if cfg.kind == "injections":
        sections["injections"] = injection_section(settings, cfg)
    document = report_document(
        header=header, summary=summary, statuses=statuses, extra_sections=sections
    )
    png = chart_png(summary, settings.evals.top_k, f"{cfg.name} ({cfg.split})") if summary else None
    markdown = markdown_report(document, summary, None)
    paths = write_report_files(dataset_dir(settings.data_path, cfg.name), document, markdown, png)
    return Report(document, markdown, png, paths, summary)


def _documents(settings: Settings, cfg: EvalDatasetConfig) -> int:
    path = corpus_path(cfg, settings.data_path)
    if path is None or not path.is_file():
        return 0
    with path.open("rb") as fh:
        return sum(1 for line in fh if line.strip())


def injection_section(settings: Settings, cfg: EvalDatasetConfig) -> dict[str, Any]:
    from clef_pipelines.evals.datasets import load_injection_texts

    rows = load_injection_texts(Path(cfg.path).expanduser())
    if cfg.limit:
        rows = rows[: cfg.limit]
    return {
        "texts": len(rows),
        "injections": sum(r.label for r in rows),
        "detectors": detector_rows(
            [r.text for r in rows],
            [r.label for r in rows],
            samples=settings.evals.bootstrap_samples,
            seed=settings.evals.seed,
        ),
    }
