"""Clef scores of every candidate, asked once per query with the query path's own stages.

Each query's candidates are classified (is_relevant, contains_answer_evidence,
contradicts_query_premise, instructs_ai; packed as the query path packs them), and the gate is
asked about the passages the default `rank` selection keeps. Every probability and the usage
it cost land in columns of the candidates frame; the Clef systems read them from there.
A query whose Clef call fails (after the client's retries) keeps null scores and its error.
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

import polars as pl

from clef_pipelines.clef.errors import ClefError
from clef_pipelines.evals.candidates import ScorerContext, recall_view, register_scorer
from clef_pipelines.steering.candidates import Candidate

#: Candidate column -> the classify question it holds.
SCORE_COLUMNS = {
    "clef_is_relevant": "is_relevant",
    "clef_evidence": "contains_answer_evidence",
    "clef_contradicts": "contradicts_query_premise",
    "clef_instructs_ai": "instructs_ai",
}
QUERY_COLUMNS = {
    "clef_gate": pl.Float64,
    "clef_classify_requests": pl.Int64,
    "clef_classify_tokens": pl.Int64,
    "clef_classify_ms": pl.Float64,
    "clef_gate_tokens": pl.Int64,
    "clef_gate_ms": pl.Float64,
    "clef_price": pl.Float64,
    "clef_error": pl.Utf8,
}


def candidates_of(part: pl.DataFrame, scored: bool = False) -> list[Candidate]:
    """Steering candidates from one query's rows (in vector order), with their Clef scores."""
    out: list[Candidate] = []
    for row in part.sort("rank").iter_rows(named=True):
        c = Candidate(
            id=row["chunk_id"],
            text=row["text"],
            vector_score=row["vector_score"],
            rank=row["rank"],
            record={"doc_id": row["doc_id"]},
            tokens=row["tokens"],
        )
        if scored:
            c.scores = {q: row[col] for col, q in SCORE_COLUMNS.items() if row.get(col) is not None}
        out.append(c)
    return out


async def _score_query(
    client: Any, query: str, cands: list[Candidate], select_cfg: Any, layout: str, per_request: Any
) -> dict[str, Any]:
    from clef_pipelines.steering.classify import classify
    from clef_pipelines.steering.gate import ask_gate
    from clef_pipelines.steering.select import select

    out: dict[str, Any] = {"clef_error": None}
    try:
        outcome = await classify(
            client,
            query,
            cands,
            ask_instructs_ai=True,
            layout=layout,
            passages_per_request=per_request,
        )
    except ClefError as exc:
        return {"clef_error": f"classify: {type(exc).__name__}: {exc}"}
    out.update(
        clef_classify_requests=outcome.requests,
        clef_classify_tokens=outcome.input_tokens,
        clef_classify_ms=outcome.ms,
    )
    if outcome.failed:
        out["clef_error"] = f"classify: {next(iter(outcome.failed.values()))}"
        return out
    chosen = select([copy.copy(c) for c in cands], select_cfg)
    shown = [*chosen.kept, *chosen.conflicts]
    started = time.perf_counter()
    if shown:
        try:
            p, tokens = await ask_gate(client, query, [c.text for c in shown])
        except ClefError as exc:
            out["clef_error"] = f"gate: {type(exc).__name__}: {exc}"
            return out
        out.update(clef_gate=p, clef_gate_tokens=tokens)
    else:
        out.update(clef_gate=0.0, clef_gate_tokens=0)  # nothing kept: the path abstains unasked
    out["clef_gate_ms"] = (time.perf_counter() - started) * 1e3
    return out


async def score_all(frame: pl.DataFrame, queries: pl.DataFrame, settings: Any) -> pl.DataFrame:
    from clef_pipelines.clef.client import ClefClient

    # One client per event loop: made here, closed here.
    async with ClefClient(settings.clef, data_dir=settings.data_path) as client:
        return await _score_all(frame, queries, client, settings.retrieval)


async def _score_all(
    frame: pl.DataFrame, queries: pl.DataFrame, client: Any, retrieval: Any
) -> pl.DataFrame:
    from clef_pipelines.retrieval.steer import clef_price

    texts = dict(zip(queries["query_id"], queries["text"], strict=True))
    # Clef is asked about the passages the query path recalls in retrieval.mode.
    parts = recall_view(frame, retrieval.mode).partition_by(
        "query_id", as_dict=True, maintain_order=True
    )
    limit = asyncio.Semaphore(max(1, client.config.max_concurrency))
    ccfg = retrieval.classify
    per_request = ccfg.passages_per_request if ccfg.packed else 1

    async def one(qid: str, part: pl.DataFrame) -> tuple[str, list[Candidate], dict[str, Any]]:
        cands = candidates_of(part)
        async with limit:
            result = await _score_query(
                client, texts[qid], cands, retrieval.select, ccfg.layout, per_request
            )
        return qid, cands, result

    done = await asyncio.gather(*(one(key[0], part) for key, part in parts.items()))
    price = clef_price(client)
    per_chunk: dict[str, list[Any]] = {"query_id": [], "chunk_id": []}
    per_chunk.update({col: [] for col in SCORE_COLUMNS})
    per_query: dict[str, list[Any]] = {"query_id": [], **{c: [] for c in QUERY_COLUMNS}}
    for qid, cands, result in done:
        for c in cands:
            per_chunk["query_id"].append(qid)
            per_chunk["chunk_id"].append(c.id)
            for col, q in SCORE_COLUMNS.items():
                per_chunk[col].append(None if result.get("clef_error") else c.scores.get(q))
        per_query["query_id"].append(qid)
        for col in QUERY_COLUMNS:
            per_query[col].append(price if col == "clef_price" else result.get(col))
    chunk_frame = pl.DataFrame(
        per_chunk,
        schema={
            "query_id": pl.Utf8,
            "chunk_id": pl.Utf8,
            **dict.fromkeys(SCORE_COLUMNS, pl.Float64),
        },
    )
    query_frame = pl.DataFrame(per_query, schema={"query_id": pl.Utf8, **QUERY_COLUMNS})
    return frame.join(chunk_frame, on=["query_id", "chunk_id"], how="left").join(
        query_frame, on="query_id", how="left"
    )


@register_scorer("clef")
def clef_scorer(frame: pl.DataFrame, context: ScorerContext) -> pl.DataFrame | str:
    from clef_pipelines.clef.client import resolve_backend

    if context.settings is None or resolve_backend(context.settings.clef)[0] == "off":
        return "needs a Clef backend (clef.backend)"
    if frame.height == 0:
        return "no candidates"
    scored = asyncio.run(score_all(frame, context.queries, context.settings))
    failed = scored.filter(pl.col("clef_error").is_not_null())["query_id"].n_unique()
    if failed:
        first = scored.filter(pl.col("clef_error").is_not_null())["clef_error"][0]
        context.warnings.append(f"Clef failed for {failed} queries (after retries): {first}")
    return scored
