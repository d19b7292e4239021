"""Ranking and decision metrics, plain functions over ranked document ids.

Conventions follow trec_eval (and so BEIR, pytrec_eval and ir-measures): a document is relevant
when its grade is above 0; nDCG uses linear gain (the grade) and a log2(rank + 1) discount; the
ideal ranking is every judged grade sorted high to low. Chunk hits become a document ranking
first: a document scores its best chunk, and each document appears once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np


def doc_ranking(hits: Iterable[tuple[str, float]]) -> list[tuple[str, float]]:
    """Chunk hits `(doc_id, score)` in the order the system returned them -> documents ranked by
    their best chunk. A document seen again (another chunk, or the same chunk twice) keeps its
    best score; equal scores keep the order of each document's first hit, so ties are broken the
    same way on every run and in favour of what the system put first."""
    best: dict[str, float] = {}
    first_seen: dict[str, int] = {}
    for position, (doc_id, score) in enumerate(hits):
        if doc_id not in first_seen:
            first_seen[doc_id] = position
            best[doc_id] = score
        elif score > best[doc_id]:
            best[doc_id] = score
    return sorted(best.items(), key=lambda item: (-item[1], first_seen[item[0]]))


def _relevant_ids(relevant: Mapping[str, int]) -> set[str]:
    return {d for d, grade in relevant.items() if grade > 0}


def recall_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    wanted = _relevant_ids(relevant)
    if not wanted:
        return 0.0
    return len(wanted.intersection(ranked[:k])) / len(wanted)


def ndcg_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    dcg = sum(
        relevant.get(d, 0) / math.log2(i + 2)
        for i, d in enumerate(ranked[:k])
        if relevant.get(d, 0) > 0
    )
    ideal_grades = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal_grades))
    return dcg / idcg if idcg > 0 else 0.0


def mrr_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    for i, d in enumerate(ranked[:k]):
        if relevant.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def evidence_first(ranked: Sequence[str], relevant: Mapping[str, int]) -> float:
    """1 when the first document is relevant: the passage a reader sees first is evidence."""
    return 1.0 if ranked and relevant.get(ranked[0], 0) > 0 else 0.0


def ranking_metrics(
    ranked: Sequence[str], relevant: Mapping[str, int], recall_ks: Sequence[int]
) -> dict[str, float]:
    out = {
        "ndcg@10": ndcg_at(ranked, relevant, 10),
        "mrr@10": mrr_at(ranked, relevant, 10),
        "evidence_first": evidence_first(ranked, relevant),
    }
    for k in recall_ks:
        out[f"recall@{k}"] = recall_at(ranked, relevant, k)
    return out


def bootstrap_ci(
    values: Sequence[float], *, samples: int = 1000, seed: int = 13, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean, resampling queries with replacement."""
    data = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if data.size == 0:
        return (math.nan, math.nan)
    if data.size == 1:
        return (float(data[0]), float(data[0]))
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(samples, data.size))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return (float(low), float(high))
