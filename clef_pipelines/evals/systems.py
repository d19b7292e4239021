"""Systems compared on the same candidates, through one registry.

A system reads the candidates frame (one row per query and recalled chunk, every recorded score
as a column) and returns its ranking of those chunks (a score per chunk, higher first; null
drops the chunk), which chunks it sends to a prompt, and whether it abstains per query. A system
that needs a column nobody recorded (no Clef backend, no guard) is reported as not available,
with the reason, instead of being scored on made-up numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from clef_pipelines.evals.config import EvalConfig
from clef_pipelines.retrieval.config import RetrievalConfig

#: Who fills a candidate column; the reason a system that needs the column cannot run.
COLUMN_PROVIDERS: dict[str, str] = {
    "vector_score": "vector recall",
    "text_score": "a collection with full-text search (ingest it again with this version)",
    "hybrid_score": "a collection with full-text search (ingest it again with this version)",
    "clef_is_relevant": "a Clef backend (clef.backend)",
    "clef_evidence": "a Clef backend (clef.backend)",
    "clef_gate": "a Clef backend (clef.backend)",
    "guard_score": "the offline injection guard (clef_pipelines.guard.model)",
}

USAGE_COLUMNS = ("clef_requests", "clef_input_tokens", "clef_cost_usd", "clef_latency_ms")


@dataclass
class SystemContext:
    config: EvalConfig
    queries: pl.DataFrame  # query_id, text, relevant, unanswerable
    dev_query_ids: set[str] = field(default_factory=set)  # for systems that tune a threshold
    retrieval: RetrievalConfig | None = None  # the query path's thresholds (Clef systems)


@dataclass
class SystemRun:
    """`ranking`: query_id, chunk_id, doc_id, score (null = dropped), sent, tokens.
    `abstained`: query_id -> True when the system refuses to answer.
    `usage`: per query Clef usage the system relied on (USAGE_COLUMNS), may be empty.
    `note`: what a reader should know (a tuned threshold, a budget)."""

    ranking: pl.DataFrame
    abstained: dict[str, bool] = field(default_factory=dict)
    usage: pl.DataFrame | None = None
    note: str = ""


@dataclass(frozen=True)
class System:
    name: str
    description: str
    requires: tuple[str, ...]
    run: Callable[[pl.DataFrame, SystemContext], SystemRun]

    def missing(self, candidates: pl.DataFrame) -> str | None:
        """Why this system cannot run on these candidates, or None."""
        for column in self.requires:
            if column not in candidates.columns or (
                candidates.height and candidates[column].null_count() == candidates.height
            ):
                return f"needs {COLUMN_PROVIDERS.get(column, column)}"
        return None


SYSTEMS: dict[str, System] = {}


def register_system(system: System) -> System:
    """Add a system to the registry (a later registration under the same name replaces it)."""
    SYSTEMS[system.name] = system
    return system


def selected_systems(names: list[str]) -> list[System]:
    if not names or "all" in names:
        return list(SYSTEMS.values())
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise ValueError(
            f"unknown system(s) {', '.join(unknown)} (registered: {', '.join(SYSTEMS)})"
        )
    return [SYSTEMS[n] for n in names]


def sent_top(frame: pl.DataFrame, score: str, k: int) -> pl.DataFrame:
    """Rank each query's chunks by `score` (ties by vector rank) and send the first k."""
    return (
        frame.sort(["query_id", score, "rank"], descending=[False, True, False], nulls_last=True)
        .with_columns(
            (pl.int_range(pl.len()).over("query_id") < k).alias("sent"),
            pl.col(score).alias("score"),
        )
        .with_columns(pl.col("sent") & pl.col("score").is_not_null())
        .select("query_id", "chunk_id", "doc_id", "score", "sent", "tokens", "rank")
    )


def _vector(candidates: pl.DataFrame, ctx: SystemContext) -> SystemRun:
    ranking = sent_top(candidates, "vector_score", ctx.config.context_k)
    return SystemRun(ranking, note=f"top {ctx.config.context_k} chunks sent")


register_system(
    System(
        name="vector",
        description="Vector top-k: chunks in similarity order; the first context_k go to the prompt.",
        requires=("vector_score",),
        run=_vector,
    )
)


def _text(candidates: pl.DataFrame, ctx: SystemContext) -> SystemRun:
    ranking = sent_top(candidates, "text_score", ctx.config.context_k)
    return SystemRun(ranking, note=f"full-text top {ctx.config.context_k} chunks sent")


def _hybrid(candidates: pl.DataFrame, ctx: SystemContext) -> SystemRun:
    ranking = sent_top(candidates, "hybrid_score", ctx.config.context_k)
    method = ctx.retrieval.fusion.method if ctx.retrieval is not None else "default"
    return SystemRun(ranking, note=f"fused ({method}) top {ctx.config.context_k} chunks sent")


register_system(
    System(
        name="text",
        description="Full-text top-k (the store's BM25 / ts_rank): chunks in text relevance order.",
        requires=("text_score",),
        run=_text,
    )
)
register_system(
    System(
        name="hybrid",
        description="Vector and full-text lists fused by reciprocal rank (retrieval.fusion).",
        requires=("hybrid_score",),
        run=_hybrid,
    )
)
