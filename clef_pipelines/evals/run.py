"""The evaluation steps as plain functions (the Dagster assets and the CLI call these)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from clef_pipelines.config import Settings
from clef_pipelines.embedding import Embedder

# Imported for their registrations: the Clef scorer and the Clef systems.
from clef_pipelines.evals import clef_scores as _clef_scores  # noqa: F401
from clef_pipelines.evals import clef_systems as _clef_systems  # noqa: F401
from clef_pipelines.evals import injections as _injections  # noqa: F401
from clef_pipelines.evals.candidates import (
    CANDIDATE_SCHEMA,
    RecallStats,
    ScorerContext,
    apply_scorers,
    queries_frame,
    queries_from_frame,
    recall_candidates,
    searchable,
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
    label = f"backend {backend}, model {settings.clef.model}"
    double = _test_double(settings, backend)
    if double:
        label += f"; {double}: these Clef rows are NOT model quality"
    if settings.evals.clef_note:
        label += f"; {settings.evals.clef_note}"
    return label


def _test_double(settings: Settings, backend: str) -> str | None:
    """A tiny random release, or a loopback endpoint that says it is a fake or serves one."""
    import json
    import os
    from urllib.parse import urlparse

    def tiny_release(release_dir: Path) -> str | None:
        try:
            raw = json.loads((release_dir / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        hidden = (raw.get("text_config") or {}).get("hidden_size") or raw.get("hidden_size") or 0
        return f"a tiny test release (hidden size {hidden})" if 0 < int(hidden) < 1024 else None

    if backend in ("local", "ray") and settings.clef.release_dir:
        return tiny_release(settings.resolve(settings.clef.release_dir))
    if backend == "self-hosted":
        base = settings.clef.base_url or os.environ.get("CLEF_BASE_URL") or ""
        host = urlparse(base).hostname or ""
        if host not in ("127.0.0.1", "localhost", "::1"):
            return None
        import httpx

        try:
            info = httpx.get(base.rstrip("/") + "/health", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return None
        if info.get("fake"):
            return "the fake System One server"
        served = (info.get("engine") or {}).get("release_dir")
        if served:
            tiny = tiny_release(Path(served))
            return f"{tiny}, served on loopback" if tiny else None
    return None


def collect_candidates(
    settings: Settings,
    name: str,
    queries: pl.DataFrame,
    *,
    store: VectorStore,
    embedder: Embedder,
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
        fusion=settings.retrieval.fusion,
        # Planted injections: recall what the ingest screen quarantined too, marked, so the
        # report can compare prompts with and without it (systems score only the rest).
        include_quarantined=bool(cfg.kind == "injections" and cfg.host),
    )
    context = ScorerContext(queries, settings, cfg.kind)
    return apply_scorers(frame, context, stats), stats


def score(settings: Settings, candidates: pl.DataFrame, queries: pl.DataFrame) -> ScoreResult:
    return score_systems(
        searchable(candidates),
        queries,
        selected_systems(settings.evals.systems),
        settings.evals,
        retrieval=settings.retrieval,
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
    candidates: pl.DataFrame | None = None,
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
        sections["injections"] = injection_section(settings, cfg, candidates)
    if candidates is not None and "clef_error" in candidates.columns:
        failed = candidates.filter(pl.col("clef_error").is_not_null())
        if failed.height:
            sections["clef_failures"] = {
                "queries": failed["query_id"].n_unique(),
                "first_error": failed["clef_error"][0],
            }
    if candidates is not None and "clef_gate" in candidates.columns:
        from clef_pipelines.evals.clef_systems import dev_split, gate_sweep, tuned_threshold

        if candidates["clef_gate"].null_count() < candidates.height:
            dev = dev_split(queries["query_id"].to_list())
            sweep = gate_sweep(candidates, queries, dev)
            sections["gate_sweep"] = {
                "dev_queries": len(dev),
                "chosen_answer_min": tuned_threshold(sweep),
                "rows": sweep,
            }
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


def injection_section(
    settings: Settings, cfg: EvalDatasetConfig, candidates: pl.DataFrame | None
) -> dict[str, Any]:
    from clef_pipelines.evals.datasets import load_injection_texts
    from clef_pipelines.evals.injections import planted_offsets, planted_rows

    rows = load_injection_texts(Path(cfg.path).expanduser())
    if cfg.limit:
        rows = rows[: cfg.limit]
    planted: list[dict[str, Any]] = []
    corpus = corpus_path(cfg, settings.data_path)
    if cfg.host and corpus is not None and candidates is not None and candidates.height:
        planted = planted_rows(
            candidates, planted_offsets(corpus), settings.evals.context_k, settings.retrieval
        )
    return {
        "planted": planted,
        "texts": len(rows),
        "injections": sum(r.label for r in rows),
        "detectors": detector_rows(
            [r.text for r in rows],
            [r.label for r in rows],
            samples=settings.evals.bootstrap_samples,
            seed=settings.evals.seed,
            settings=settings,
        ),
    }
