"""Candidates: the top-k chunks of every query, recalled once and recorded with every score.

Every system is then scored on the same candidates, so a comparison between systems measures
the systems, not two different recalls. Scorers that add columns (Clef relevance, the gate, the
offline guard) plug in through `CANDIDATE_SCORERS`; a scorer that cannot run says why, and its
columns stay null.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from clef_pipelines.embedding import Embedder
from clef_pipelines.evals.datasets import EvalQuery
from clef_pipelines.ingest.sync import check_manifest
from clef_pipelines.stores import StoreError, VectorStore

CANDIDATE_SCHEMA: dict[str, Any] = {
    "query_id": pl.Utf8,
    "rank": pl.Int64,  # 1-based vector rank
    "chunk_id": pl.Utf8,
    "doc_id": pl.Utf8,
    "vector_score": pl.Float64,
    "tokens": pl.Int64,
    "char_start": pl.Int64,
    "char_end": pl.Int64,
    "text": pl.Utf8,
}

QUERY_SCHEMA: dict[str, Any] = {
    "query_id": pl.Utf8,
    "text": pl.Utf8,
    "relevant": pl.List(pl.Struct({"doc_id": pl.Utf8, "grade": pl.Int64})),
    "unanswerable": pl.Boolean,
}


def queries_frame(queries: list[EvalQuery]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "query_id": [q.id for q in queries],
            "text": [q.text for q in queries],
            "relevant": [
                [{"doc_id": d, "grade": g} for d, g in q.relevant.items()] for q in queries
            ],
            "unanswerable": [q.unanswerable for q in queries],
        },
        schema=QUERY_SCHEMA,
    )


def queries_from_frame(frame: pl.DataFrame) -> list[EvalQuery]:
    return [
        EvalQuery(
            row["query_id"],
            row["text"],
            {r["doc_id"]: r["grade"] for r in row["relevant"] or []},
            bool(row["unanswerable"]),
        )
        for row in frame.iter_rows(named=True)
    ]


@dataclass
class RecallStats:
    queries: int = 0
    rows: int = 0
    embed_seconds: float = 0.0
    search_seconds: float = 0.0
    scorers: dict[str, str] = field(default_factory=dict)  # scorer -> "ok" or why not
    warnings: list[str] = field(default_factory=list)


def recall_candidates(
    queries: list[EvalQuery],
    *,
    store: VectorStore,
    embedder: Embedder,
    collection: str,
    top_k: int,
    batch_size: int = 64,
) -> tuple[pl.DataFrame, RecallStats]:
    """Vector top-k chunks for every query (quarantined records are left out, as in `query`)."""
    if not store.has_collection(collection):
        known = ", ".join(store.list_collections()) or "none"
        raise StoreError(
            f"collection {collection!r} does not exist (collections: {known}); "
            "ingest the dataset's source first"
        )
    check_manifest(store.get_manifest(collection), collection, embedder)
    stats = RecallStats(queries=len(queries))
    rows: dict[str, list[Any]] = {k: [] for k in CANDIDATE_SCHEMA}
    for start in range(0, len(queries), batch_size):
        batch = queries[start : start + batch_size]
        began = time.perf_counter()
        vectors = embedder.embed([q.text for q in batch])
        stats.embed_seconds += time.perf_counter() - began
        for query, vector in zip(batch, vectors, strict=True):
            began = time.perf_counter()
            hits = store.query(collection, vector.tolist(), top_k=top_k)
            stats.search_seconds += time.perf_counter() - began
            for rank, hit in enumerate(hits, start=1):
                r = hit.record
                rows["query_id"].append(query.id)
                rows["rank"].append(rank)
                rows["chunk_id"].append(hit.id)
                rows["doc_id"].append(str(r.get("doc_id") or ""))
                rows["vector_score"].append(float(hit.score))
                rows["tokens"].append(int(r.get("tokens") or 0))
                rows["char_start"].append(int(r.get("char_start") or 0))
                rows["char_end"].append(int(r.get("char_end") or 0))
                rows["text"].append(str(r.get("text") or ""))
    frame = pl.DataFrame(rows, schema=CANDIDATE_SCHEMA)
    stats.rows = frame.height
    return frame, stats


@dataclass
class ScorerContext:
    """What a candidate scorer may use: the queries and the settings (Clef backend, retrieval
    thresholds); `warnings` collects what a reader of the report must know."""

    queries: pl.DataFrame
    settings: Any | None = None
    dataset_kind: str = ""
    warnings: list[str] = field(default_factory=list)


#: A scorer adds columns to the candidates frame, or returns the reason it cannot.
CandidateScorer = Callable[[pl.DataFrame, ScorerContext], "pl.DataFrame | str"]

CANDIDATE_SCORERS: dict[str, CandidateScorer] = {}


def register_scorer(name: str) -> Callable[[CandidateScorer], CandidateScorer]:
    def wrap(fn: CandidateScorer) -> CandidateScorer:
        CANDIDATE_SCORERS[name] = fn
        return fn

    return wrap


def apply_scorers(frame: pl.DataFrame, context: ScorerContext, stats: RecallStats) -> pl.DataFrame:
    """Run every registered scorer; a scorer that cannot run leaves its reason in `stats`."""
    for name, scorer in CANDIDATE_SCORERS.items():
        out = scorer(frame, context)
        if isinstance(out, str):
            stats.scorers[name] = out
        else:
            frame = out
            stats.scorers[name] = "ok"
    stats.warnings.extend(context.warnings)
    return frame
