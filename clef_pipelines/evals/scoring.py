"""Per-query scores of each system, and their means with bootstrap 95% intervals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from clef_pipelines.evals.candidates import queries_from_frame
from clef_pipelines.evals.config import EvalConfig
from clef_pipelines.evals.metrics import bootstrap_ci, doc_ranking, ranking_metrics
from clef_pipelines.evals.systems import USAGE_COLUMNS, System, SystemContext

RANKING_METRICS = ("ndcg@10", "mrr@10", "evidence_first")


def recall_ks(top_k: int) -> list[int]:
    return sorted({k for k in (1, 5, 10, 20, 100) if k <= top_k} | {top_k})


@dataclass
class SystemStatus:
    name: str
    description: str
    available: bool
    reason: str = ""
    note: str = ""


@dataclass
class ScoreResult:
    scores: pl.DataFrame  # one row per system and query
    statuses: list[SystemStatus] = field(default_factory=list)


def _per_query_usage(run_usage: pl.DataFrame | None) -> dict[str, dict[str, float]]:
    if run_usage is None or run_usage.height == 0:
        return {}
    return {
        row["query_id"]: {c: float(row.get(c) or 0.0) for c in USAGE_COLUMNS}
        for row in run_usage.iter_rows(named=True)
    }


def score_systems(
    candidates: pl.DataFrame,
    queries: pl.DataFrame,
    systems: list[System],
    config: EvalConfig,
    *,
    dev_query_ids: set[str] | None = None,
    retrieval: Any | None = None,
) -> ScoreResult:
    evaluated = queries_from_frame(queries)
    ks = recall_ks(config.top_k)
    context = SystemContext(config, queries, dev_query_ids or set(), retrieval)
    rows: list[dict[str, Any]] = []
    statuses: list[SystemStatus] = []
    for system in systems:
        reason = system.missing(candidates)
        if reason:
            statuses.append(SystemStatus(system.name, system.description, False, reason))
            rows.append({"system": system.name, "available": False, "reason": reason})
            continue
        run = system.run(candidates, context)
        statuses.append(SystemStatus(system.name, system.description, True, note=run.note))
        usage = _per_query_usage(run.usage)
        by_query = {
            key[0]: part for key, part in run.ranking.partition_by("query_id", as_dict=True).items()
        }
        for query in evaluated:
            part = by_query.get(query.id)
            if part is None or part.height == 0:
                kept = sent = part = pl.DataFrame()
                ranked: list[str] = []
                tokens = 0
                chunks = 0
            else:
                kept = part.filter(pl.col("score").is_not_null()).sort(
                    ["score", "rank"], descending=[True, False]
                )
                ranked = [
                    d for d, _ in doc_ranking(zip(kept["doc_id"], kept["score"], strict=True))
                ]
                sent = part.filter(pl.col("sent"))
                tokens = int(sent["tokens"].sum() or 0)
                chunks = sent.height
            abstained = bool(run.abstained.get(query.id, False))
            row: dict[str, Any] = {
                "system": system.name,
                "available": True,
                "reason": "",
                "note": run.note,
                "query_id": query.id,
                "unanswerable": query.unanswerable,
                "judged": bool(query.relevant) and not query.unanswerable,
                "abstained": abstained,
                # An abstaining system sends nothing to the prompt.
                "context_tokens": 0 if abstained else tokens,
                "context_chunks": 0 if abstained else chunks,
            }
            row.update(ranking_metrics(ranked, query.relevant, ks))
            row.update(usage.get(query.id, dict.fromkeys(USAGE_COLUMNS, 0.0)))
            rows.append(row)
    return ScoreResult(pl.DataFrame(rows, infer_schema_length=None), statuses)


def statuses_from_scores(scores: pl.DataFrame) -> list[SystemStatus]:
    """The statuses recorded in a scores frame (unavailable systems have one row, no query)."""
    from clef_pipelines.evals.systems import SYSTEMS

    out: list[SystemStatus] = []
    if scores.height == 0:
        return out
    firsts = scores.unique("system", keep="first", maintain_order=True)
    for row in firsts.iter_rows(named=True):
        known = SYSTEMS.get(row["system"])
        out.append(
            SystemStatus(
                row["system"],
                known.description if known else "",
                bool(row["available"]),
                row.get("reason") or "",
                row.get("note") or "",
            )
        )
    return out


def metric_names(scores: pl.DataFrame) -> list[str]:
    ranking = [c for c in scores.columns if c in RANKING_METRICS or c.startswith("recall@")]
    ranking.sort(key=lambda c: (c.split("@")[0], int(c.split("@")[1]) if "@" in c else 0))
    return ranking + [
        "abstain_unanswerable",
        "abstain_answerable",
        "context_tokens",
        *USAGE_COLUMNS,
    ]


def summarise(scores: pl.DataFrame, config: EvalConfig) -> dict[str, dict[str, dict[str, Any]]]:
    """system -> metric -> {mean, low, high, n}. Ranking metrics are over judged queries
    (answerable, with relevant documents); abstention over unanswerable and answerable ones;
    context and Clef usage over every query."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    if scores.height == 0:
        return out
    scores = scores.filter(pl.col("available"))
    if scores.height == 0:
        return out
    names = metric_names(scores)
    for system in scores["system"].unique(maintain_order=True).to_list():
        part = scores.filter(pl.col("system") == system)
        metrics: dict[str, dict[str, Any]] = {}
        for name in names:
            if name == "abstain_unanswerable":
                values = part.filter(pl.col("unanswerable"))["abstained"].cast(pl.Float64)
            elif name == "abstain_answerable":
                values = part.filter(~pl.col("unanswerable"))["abstained"].cast(pl.Float64)
            elif name in ("context_tokens", *USAGE_COLUMNS):
                values = part[name].cast(pl.Float64)
            else:
                values = part.filter(pl.col("judged"))[name].cast(pl.Float64)
            data = values.to_list()
            if not data:
                continue
            mean = float(sum(data) / len(data))
            low, high = bootstrap_ci(data, samples=config.bootstrap_samples, seed=config.seed)
            metrics[name] = {"mean": mean, "low": low, "high": high, "n": len(data)}
        out[system] = metrics
    return out
