"""The Clef systems, each a decision of the query path replayed on the recorded scores.

They read the probabilities `evals.clef_scores` recorded once per query and apply the same
code the query path uses (`steering.select`, `steering.compact`), with the thresholds of
`retrieval` in the config, so the report measures what a user of that config gets.
"""

from __future__ import annotations

import hashlib
from typing import Any

import polars as pl

from clef_pipelines.evals.candidates import recall_view
from clef_pipelines.evals.clef_scores import candidates_of
from clef_pipelines.evals.systems import System, SystemContext, SystemRun, register_system
from clef_pipelines.retrieval.config import RecallMode, RetrievalConfig, SelectConfig
from clef_pipelines.steering.candidates import Candidate
from clef_pipelines.steering.compact import drop_before_asking, fill_budget
from clef_pipelines.steering.select import evidence_order, select

CLASSIFY = ("clef_evidence", "clef_is_relevant")
GATE = ("clef_gate",)
SWEEP = tuple(round(0.05 * i, 2) for i in range(0, 20))


def _retrieval(ctx: SystemContext) -> RetrievalConfig:
    return ctx.retrieval or RetrievalConfig()


def _rows(order: list[Candidate], sent: set[str], qid: str) -> list[dict[str, Any]]:
    """Ranking rows: the given order gets descending scores; candidates not in it are null."""
    n = len(order)
    return [
        {
            "query_id": qid,
            "chunk_id": c.id,
            "doc_id": c.doc_id,
            "score": float(n - i),
            "sent": c.id in sent,
            "tokens": c.tokens,
            "rank": c.rank,
        }
        for i, c in enumerate(order)
    ]


_RANKING_SCHEMA = {
    "query_id": pl.Utf8,
    "chunk_id": pl.Utf8,
    "doc_id": pl.Utf8,
    "score": pl.Float64,
    "sent": pl.Boolean,
    "tokens": pl.Int64,
    "rank": pl.Int64,
}


def _usage(candidates: pl.DataFrame, *, gate: bool) -> pl.DataFrame:
    """Per query Clef usage: classification, plus the gate request when the system asks it."""
    per_query = candidates.group_by("query_id", maintain_order=True).agg(
        pl.col(
            "clef_classify_requests",
            "clef_classify_tokens",
            "clef_classify_ms",
            "clef_gate_tokens",
            "clef_gate_ms",
            "clef_price",
        ).first()
    )
    requests = pl.col("clef_classify_requests").fill_null(0)
    tokens = pl.col("clef_classify_tokens").fill_null(0)
    ms = pl.col("clef_classify_ms").fill_null(0.0)
    if gate:
        asked = pl.col("clef_gate_tokens").fill_null(0) > 0
        requests = requests + asked.cast(pl.Int64)
        tokens = tokens + pl.col("clef_gate_tokens").fill_null(0)
        ms = ms + pl.col("clef_gate_ms").fill_null(0.0)
    return per_query.select(
        "query_id",
        requests.cast(pl.Float64).alias("clef_requests"),
        tokens.cast(pl.Float64).alias("clef_input_tokens"),
        (tokens * pl.col("clef_price").fill_null(0.0)).alias("clef_cost_usd"),
        ms.alias("clef_latency_ms"),
    )


def _by_query(
    candidates: pl.DataFrame, mode: RecallMode
) -> list[tuple[str, list[Candidate], pl.DataFrame]]:
    """Per query, the candidates the query path recalls in `mode` (retrieval.mode)."""
    return [
        (key[0], candidates_of(part, scored=True), part)
        for key, part in recall_view(candidates, mode)
        .partition_by("query_id", as_dict=True, maintain_order=True)
        .items()
    ]


def _scored(part: pl.DataFrame) -> bool:
    return part["clef_evidence"].null_count() < part.height


def selection_run(
    candidates: pl.DataFrame,
    cfg: SelectConfig,
    budget: int | None = None,
    dedupe: bool = False,
    mode: RecallMode = "vector",
) -> tuple[list[dict[str, Any]], dict[str, list[Candidate]]]:
    """The select stage (and compaction at `budget`) per query; a query Clef could not score
    falls back to vector order, as the query path does."""
    rows: list[dict[str, Any]] = []
    shown: dict[str, list[Candidate]] = {}
    for qid, cands, part in _by_query(candidates, mode):
        if not _scored(part):
            order = sorted(cands, key=lambda c: c.rank)
            kept = order[: cfg.max_passages]
            rows += _rows(order, {c.id for c in kept}, qid)
            shown[qid] = kept
            continue
        if budget is not None or dedupe:
            drop_before_asking(cands, dedupe=dedupe, token_budget=budget)
        chosen = select(cands, cfg)
        kept, conflicts, _over = fill_budget(chosen.kept, chosen.conflicts, budget)
        sent = [*kept, *conflicts]
        order = [*chosen.kept, *chosen.conflicts]  # dropped passages leave the ranking
        rows += _rows(order, {c.id for c in sent}, qid)
        shown[qid] = sent
    return rows, shown


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=_RANKING_SCHEMA)


def _rerank(candidates: pl.DataFrame, ctx: SystemContext) -> SystemRun:
    rows: list[dict[str, Any]] = []
    k = ctx.config.context_k
    for qid, cands, _part in _by_query(candidates, _retrieval(ctx).mode):
        order = sorted(cands, key=evidence_order)
        rows += _rows(order, {c.id for c in order[:k]}, qid)
    return SystemRun(
        _frame(rows),
        usage=_usage(candidates, gate=False),
        note=f"every candidate re-ranked by P(evidence), then vector score; top {k} sent",
    )


def _rank(candidates: pl.DataFrame, ctx: SystemContext) -> SystemRun:
    cfg = _retrieval(ctx).select.model_copy(update={"strategy": "rank"})
    rows, _ = selection_run(candidates, cfg, mode=_retrieval(ctx).mode)
    return SystemRun(
        _frame(rows),
        usage=_usage(candidates, gate=False),
        note=f"select rank: max_passages {cfg.max_passages}, drop_instructs_ai "
        f"{cfg.drop_instructs_ai}, drop_irrelevant {cfg.drop_irrelevant}",
    )


def _threshold(candidates: pl.DataFrame, ctx: SystemContext) -> SystemRun:
    cfg = _retrieval(ctx).select.model_copy(update={"strategy": "threshold"})
    rows, _ = selection_run(candidates, cfg, mode=_retrieval(ctx).mode)
    return SystemRun(
        _frame(rows),
        usage=_usage(candidates, gate=False),
        note=f"select threshold: min_relevant {cfg.min_relevant}, min_evidence {cfg.min_evidence}",
    )


def _compact(candidates: pl.DataFrame, ctx: SystemContext) -> SystemRun:
    retrieval = _retrieval(ctx)
    budget = retrieval.compact.token_budget or ctx.config.compact_budget
    cfg = retrieval.select.model_copy(update={"strategy": "rank"})
    rows, _ = selection_run(
        candidates, cfg, budget=budget, dedupe=retrieval.compact.dedupe, mode=retrieval.mode
    )
    return SystemRun(
        _frame(rows),
        usage=_usage(candidates, gate=False),
        note=f"rank selection compacted to a budget of {budget} tokens",
    )


def _gated(candidates: pl.DataFrame, ctx: SystemContext, answer_min: float) -> SystemRun:
    cfg = _retrieval(ctx).select.model_copy(update={"strategy": "rank"})
    rows, _ = selection_run(candidates, cfg, mode=_retrieval(ctx).mode)
    gate = candidates.group_by("query_id").agg(pl.col("clef_gate").first())
    abstained = {qid: p is not None and p < answer_min for qid, p in gate.iter_rows()}
    return SystemRun(_frame(rows), abstained=abstained, usage=_usage(candidates, gate=True))


def _gate(candidates: pl.DataFrame, ctx: SystemContext) -> SystemRun:
    answer_min = _retrieval(ctx).gate.answer_min
    run = _gated(candidates, ctx, answer_min)
    run.note = f"rank selection; abstains when P(answerable) < answer_min {answer_min}"
    return run


def dev_split(query_ids: list[str], share: float = 0.5) -> set[str]:
    """A stable half of the queries (by a hash of the id) to tune thresholds on."""
    return {
        q
        for q in query_ids
        if int(hashlib.sha256(q.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < share
    }


def gate_sweep(
    candidates: pl.DataFrame, queries: pl.DataFrame, dev: set[str]
) -> list[dict[str, Any]]:
    """Abstention on unanswerable and answerable queries at each threshold, on the dev split and
    on the held-out rest."""
    gate = dict(candidates.group_by("query_id").agg(pl.col("clef_gate").first()).iter_rows())
    unans = dict(zip(queries["query_id"], queries["unanswerable"], strict=True))
    out: list[dict[str, Any]] = []
    for threshold in SWEEP:
        row: dict[str, Any] = {"answer_min": threshold}
        for part, keep in (("dev", True), ("held_out", False)):
            for kind, want in (("unanswerable", True), ("answerable", False)):
                ids = [
                    q
                    for q, u in unans.items()
                    if u == want and (q in dev) == keep and gate.get(q) is not None
                ]
                rate = sum(gate[q] < threshold for q in ids) / len(ids) if ids else None
                row[f"{part}_abstain_{kind}"] = rate
        out.append(row)
    return out


def tuned_threshold(sweep: list[dict[str, Any]]) -> float:
    """The dev threshold with the widest gap between abstaining on unanswerable and on
    answerable queries (with no unanswerable queries: the one that abstains least)."""

    def gap(row: dict[str, Any]) -> float:
        return (row["dev_abstain_unanswerable"] or 0.0) - (row["dev_abstain_answerable"] or 0.0)

    return max(sweep, key=lambda r: (round(gap(r), 9), -r["answer_min"]))["answer_min"]


def _gate_tuned(candidates: pl.DataFrame, ctx: SystemContext) -> SystemRun:
    dev = ctx.dev_query_ids or dev_split(ctx.queries["query_id"].to_list())
    threshold = tuned_threshold(gate_sweep(candidates, ctx.queries, dev))
    run = _gated(candidates, ctx, threshold)
    run.note = (
        f"answer_min {threshold} chosen on a dev half ({len(dev)} queries) by the widest gap "
        "between abstaining on unanswerable and answerable queries; the sweep is in the JSON"
    )
    return run


for _system in (
    System("clef-rerank", "Clef re-rank of the top-k by answer evidence.", CLASSIFY, _rerank),
    System("clef-rank", "Clef classification, select strategy rank.", CLASSIFY, _rank),
    System(
        "clef-threshold", "Clef classification, select strategy threshold.", CLASSIFY, _threshold
    ),
    System("clef-compact", "Clef rank selection compacted to a token budget.", CLASSIFY, _compact),
    System("clef-gate", "Clef rank selection with the answer gate.", (*CLASSIFY, *GATE), _gate),
    System(
        "clef-gate-tuned",
        "The answer gate at a threshold tuned on a dev split.",
        (*CLASSIFY, *GATE),
        _gate_tuned,
    ),
):
    register_system(_system)
