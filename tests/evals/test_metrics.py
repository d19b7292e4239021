"""Metric code against hand-computed cases and against ir-measures (pytrec_eval underneath)."""

from __future__ import annotations

import math
import random

import ir_measures
import pytest
from ir_measures import MRR, R, nDCG

from clef_pipelines.evals.metrics import (
    bootstrap_ci,
    doc_ranking,
    evidence_first,
    mrr_at,
    ndcg_at,
    recall_at,
)


def test_hand_computed_cases() -> None:
    ranked = ["d3", "d1", "d7", "d2"]
    relevant = {"d1": 1, "d2": 2, "d9": 0}
    # DCG = 1/log2(3) + 2/log2(5); ideal = 2/log2(2) + 1/log2(3)
    dcg = 1 / math.log2(3) + 2 / math.log2(5)
    idcg = 2 + 1 / math.log2(3)
    assert ndcg_at(ranked, relevant, 10) == pytest.approx(dcg / idcg)
    assert ndcg_at(ranked, relevant, 2) == pytest.approx((1 / math.log2(3)) / idcg)
    assert recall_at(ranked, relevant, 2) == 0.5  # d9 has grade 0: not relevant
    assert recall_at(ranked, relevant, 4) == 1.0
    assert mrr_at(ranked, relevant, 10) == 0.5
    assert mrr_at(ranked, relevant, 1) == 0.0
    assert evidence_first(ranked, relevant) == 0.0
    assert evidence_first(["d2"], relevant) == 1.0
    assert ndcg_at([], relevant, 10) == 0.0
    assert ndcg_at(ranked, {}, 10) == 0.0


def test_document_scores_its_best_chunk_and_appears_once() -> None:
    hits = [("a", 0.9), ("b", 0.8), ("a", 0.95), ("c", 0.8), ("b", 0.1), ("c", 0.8)]
    assert doc_ranking(hits) == [("a", 0.95), ("b", 0.8), ("c", 0.8)]


def test_ties_keep_the_order_of_first_hits() -> None:
    hits = [("z", 0.5), ("a", 0.5), ("m", 0.5)]
    assert [d for d, _ in doc_ranking(hits)] == ["z", "a", "m"]
    # The same input twice gives the same answer (no set or hash ordering leaks in).
    assert doc_ranking(list(reversed(hits))) == [("m", 0.5), ("a", 0.5), ("z", 0.5)]


def test_against_ir_measures_on_random_runs() -> None:
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(40)]
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    ours: dict[str, dict[str, float]] = {}
    for q in range(60):
        qid = f"q{q}"
        qrels[qid] = {d: rng.choice([0, 1, 1, 2]) for d in rng.sample(docs, rng.randint(1, 5))}
        if not any(g > 0 for g in qrels[qid].values()):
            qrels[qid][rng.choice(docs)] = 1
        # Chunk hits with duplicates and ties; our document ranking decides the order, and the
        # run handed to trec_eval carries strictly decreasing scores in that order.
        hits = [(rng.choice(docs), round(rng.random(), 1)) for _ in range(30)]
        ranked = [d for d, _ in doc_ranking(hits)]
        run[qid] = {d: float(len(ranked) - i) for i, d in enumerate(ranked)}
        ours[qid] = {
            "ndcg@10": ndcg_at(ranked, qrels[qid], 10),
            "recall@5": recall_at(ranked, qrels[qid], 5),
            "recall@20": recall_at(ranked, qrels[qid], 20),
            "mrr@10": mrr_at(ranked, qrels[qid], 10),
        }
    measures = {"ndcg@10": nDCG @ 10, "recall@5": R @ 5, "recall@20": R @ 20, "mrr@10": MRR @ 10}
    by_measure = {str(m): name for name, m in measures.items()}
    checked = 0
    for metric in ir_measures.iter_calc(list(measures.values()), qrels, run):
        name = by_measure[str(metric.measure)]
        assert ours[metric.query_id][name] == pytest.approx(metric.value, abs=1e-9), (
            name,
            metric.query_id,
        )
        checked += 1
    assert checked == 60 * 4


def test_bootstrap_interval() -> None:
    values = [1.0] * 30 + [0.0] * 70
    low, high = bootstrap_ci(values, samples=2000, seed=1)
    assert low < 0.3 < high
    assert low > 0.18 and high < 0.42
    assert bootstrap_ci(values, samples=2000, seed=1) == (low, high)
    assert bootstrap_ci([0.5]) == (0.5, 0.5)
    assert all(math.isnan(x) for x in bootstrap_ci([]))
