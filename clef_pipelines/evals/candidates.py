"""Candidates: the top-k chunks of every query, recalled once and recorded with every score.

Recall is by vector and, where the collection has full-text search, by text too, as the query
path recalls in each `retrieval.mode`: the rows are the union of the vector, the full-text and
the fused top-k lists. Each score column is set only on the rows of its own top-k (`vector_score`
null on rows only text or fusion found, and so on), so each system ranks exactly what that
recall mode returns; `rank` is the vector rank, and rows vector recall did not return follow
every vector rank. `hybrid_score` fuses the two lists as `retrieval.fusion` says, each list
`max(top_k, fusion.candidates)` deep, exactly as hybrid recall does.

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
from clef_pipelines.retrieval.config import FusionConfig, RecallMode
from clef_pipelines.retrieval.fusion import fuse
from clef_pipelines.stores import StoreError, VectorStore
from clef_pipelines.stores.base import QUARANTINE_FIELD, NoTextSearch

CANDIDATE_SCHEMA: dict[str, Any] = {
    "query_id": pl.Utf8,
    "rank": pl.Int64,  # 1-based vector rank; text-only rows follow, in text order
    "chunk_id": pl.Utf8,
    "doc_id": pl.Utf8,
    "vector_score": pl.Float64,
    "text_score": pl.Float64,  # full-text relevance (null: not a text hit)
    "hybrid_score": pl.Float64,  # fused vector + text rank
    "tokens": pl.Int64,
    "char_start": pl.Int64,
    "char_end": pl.Int64,
    "text": pl.Utf8,
    # The record was quarantined at ingest (only recalled for injection datasets, whose report
    # compares prompts with and without the ingest screen; systems score the rest).
    "quarantined": pl.Boolean,
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
    text_recall: str = "ok"  # or why the collection has none


def recall_candidates(
    queries: list[EvalQuery],
    *,
    store: VectorStore,
    embedder: Embedder,
    collection: str,
    top_k: int,
    batch_size: int = 64,
    fusion: FusionConfig | None = None,
    include_quarantined: bool = False,
) -> tuple[pl.DataFrame, RecallStats]:
    """Vector and full-text top-k chunks for every query. Quarantined records are left out, as
    in `query`, unless `include_quarantined` (then they are recalled and marked, so a report can
    show what the ingest screen kept out of prompts)."""
    if not store.has_collection(collection):
        known = ", ".join(store.list_collections()) or "none"
        raise StoreError(
            f"collection {collection!r} does not exist (collections: {known}); "
            "ingest the dataset's source first"
        )
    check_manifest(store.get_manifest(collection), collection, embedder)
    stats = RecallStats(queries=len(queries))
    fusion = fusion or FusionConfig()
    rows: dict[str, list[Any]] = {k: [] for k in CANDIDATE_SCHEMA}
    for start in range(0, len(queries), batch_size):
        batch = queries[start : start + batch_size]
        began = time.perf_counter()
        vectors = embedder.embed_queries([q.text for q in batch])
        stats.embed_seconds += time.perf_counter() - began
        for query, vector in zip(batch, vectors, strict=True):
            began = time.perf_counter()
            # Hybrid recall fuses lists `fusion.candidates` deep; vector and text keep top_k.
            depth = max(top_k, fusion.candidates) if stats.text_recall == "ok" else top_k
            deep = store.query(
                collection, vector.tolist(), top_k=depth, include_quarantined=include_quarantined
            )
            text_deep = []
            if stats.text_recall == "ok":
                try:
                    text_deep = store.text_query(
                        collection, query.text, top_k=depth, include_quarantined=include_quarantined
                    )
                except NoTextSearch as exc:
                    stats.text_recall = str(exc)
            stats.search_seconds += time.perf_counter() - began
            hits, text_hits = deep[:top_k], text_deep[:top_k]
            fused_hits = (
                fuse(deep, text_deep, fusion, depth=depth)[:top_k]
                if stats.text_recall == "ok"
                else []
            )
            vector_score = {h.id: float(h.score) for h in hits}
            text_score = {h.id: h.raw_score for h in text_hits}
            fused = {h.id: h.score for h in fused_hits}
            ordered = list({h.id: h for h in [*fused_hits, *text_hits, *hits]}.values())
            seen = set(vector_score)
            ordered = [*hits, *(h for h in ordered if h.id not in seen)]
            for rank, hit in enumerate(ordered, start=1):
                r = hit.record
                rows["query_id"].append(query.id)
                rows["rank"].append(rank)
                rows["chunk_id"].append(hit.id)
                rows["doc_id"].append(str(r.get("doc_id") or ""))
                rows["vector_score"].append(vector_score.get(hit.id))
                rows["text_score"].append(text_score.get(hit.id))
                rows["hybrid_score"].append(fused.get(hit.id))
                rows["tokens"].append(int(r.get("tokens") or 0))
                rows["char_start"].append(int(r.get("char_start") or 0))
                rows["char_end"].append(int(r.get("char_end") or 0))
                rows["text"].append(str(r.get("text") or ""))
                rows["quarantined"].append(bool(r.get(QUARANTINE_FIELD)))
    frame = pl.DataFrame(rows, schema=CANDIDATE_SCHEMA)
    stats.rows = frame.height
    return frame, stats


def searchable(frame: pl.DataFrame) -> pl.DataFrame:
    """The candidates `query` would return: records quarantined at ingest left out."""
    if "quarantined" not in frame.columns:
        return frame
    return frame.filter(~pl.col("quarantined").fill_null(False))


#: The candidate column each recall mode ranks by.
MODE_SCORE: dict[str, str] = {
    "vector": "vector_score",
    "text": "text_score",
    "hybrid": "hybrid_score",
}


def recall_view(frame: pl.DataFrame, mode: RecallMode) -> pl.DataFrame:
    """The candidates the query path recalls in `mode`: that list's rows in its order, with its
    score as `vector_score` and its rank as `rank`, as the query path's candidates carry them (a
    fused passage's score is its fused score). A mode whose list nobody recorded (no full-text
    search) falls back to vector, as recall does."""
    column = MODE_SCORE[mode]
    if column not in frame.columns or frame[column].null_count() == frame.height:
        column = "vector_score"
    if column == "vector_score":
        return frame.filter(pl.col("vector_score").is_not_null())
    return (
        frame.filter(pl.col(column).is_not_null())
        .sort(["query_id", column, "rank"], descending=[False, True, False], maintain_order=True)
        .with_columns(
            (pl.int_range(pl.len()).over("query_id") + 1).cast(pl.Int64).alias("rank"),
            pl.col(column).alias("vector_score"),
        )
    )


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
