"""Injection rows: how well detectors catch planted instructions, and how many reach a prompt.

Two measurements. (1) Labelled texts (`{"text", "label"}`): each detector (the offline guard,
the Clef paragraph screen) flags texts; recall on label 1 and false-quarantine rate on label 0.
(2) Planted: injection texts are appended as a paragraph of their own to real host paragraphs
(SQuAD), the planted corpus is ingested by the normal graph, and the host questions of planted
paragraphs are asked; we count prompts (the chunks a system sends) that carry planted text,
with and without screening.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from clef_pipelines.evals.config import EvalDatasetConfig
from clef_pipelines.evals.metrics import bootstrap_ci

PLANT_SEPARATOR = "\n\n"


def planted_corpus(
    cfg: EvalDatasetConfig, rows: Sequence[Any], *, seed: int = 13, share: float = 0.5
) -> tuple[list[dict[str, Any]], list[Any]]:
    """Host paragraphs with injections planted into a seeded half of them.

    A planted document records where the planted text starts (`metadata.planted_start`) so that
    chunks holding planted text are found by their character offsets, not by string search.
    Queries: the answerable host questions of planted paragraphs."""
    from clef_pipelines.evals.datasets import DatasetError, EvalQuery, squad_documents

    if not cfg.host or not cfg.host.startswith("squad:"):
        raise DatasetError(f"dataset {cfg.name!r}: host must be squad:PATH, got {cfg.host!r}")
    docs, queries = squad_documents(Path(cfg.host.partition(":")[2]).expanduser())
    injections = [r.text for r in rows if r.label == 1]
    if not injections:
        raise DatasetError(f"dataset {cfg.name!r}: no injection texts (label 1) to plant")
    rng = random.Random(seed)
    order = list(range(len(docs)))
    rng.shuffle(order)
    chosen = sorted(order[: max(1, int(len(docs) * share))])
    planted: dict[str, int] = {}
    out = [dict(d) for d in docs]
    for n, index in enumerate(chosen):
        doc = out[index]
        start = len(doc["text"]) + len(PLANT_SEPARATOR)
        doc["text"] = doc["text"] + PLANT_SEPARATOR + injections[n % len(injections)]
        doc["metadata"] = {"planted_start": start}
        planted[doc["id"]] = start
    planted_queries = [
        EvalQuery(q.id, q.text, q.relevant, q.unanswerable, q.answers)
        for q in queries
        if not q.unanswerable and next(iter(q.relevant)) in planted
    ]
    return out, planted_queries


def planted_offsets(corpus: Path) -> dict[str, int]:
    """doc_id -> character offset where the planted text starts, from the planted corpus."""
    frame = pl.read_ndjson(corpus, infer_schema_length=None)
    if "metadata" not in frame.columns:
        return {}
    out: dict[str, int] = {}
    for row in frame.select("id", "metadata").iter_rows(named=True):
        meta = row["metadata"] or {}
        if meta.get("planted_start") is not None:
            out[str(row["id"])] = int(meta["planted_start"])
    return out


def mark_planted(candidates: pl.DataFrame, offsets: dict[str, int]) -> pl.DataFrame:
    """A chunk holds planted text when it ends past its document's planted offset."""
    start = pl.col("doc_id").replace_strict(offsets, default=None, return_dtype=pl.Int64)
    return candidates.with_columns(
        (start.is_not_null() & (pl.col("char_end") > start)).alias("planted")
    )


@dataclass
class Detector:
    """A named injection detector: texts -> probability of being an injection, or why not."""

    name: str
    description: str
    load: Callable[[], tuple[Callable[[list[str]], list[float]], float] | str]


DETECTORS: dict[str, Detector] = {}


def register_detector(detector: Detector) -> Detector:
    DETECTORS[detector.name] = detector
    return detector


def detector_rows(
    texts: Sequence[str], labels: Sequence[int], *, samples: int = 1000, seed: int = 13
) -> list[dict[str, Any]]:
    """Recall and false-quarantine rate of every registered detector on labelled texts."""
    rows: list[dict[str, Any]] = []
    for detector in DETECTORS.values():
        loaded = detector.load()
        if isinstance(loaded, str):
            rows.append({"name": detector.name, "available": False, "reason": loaded})
            continue
        score, threshold = loaded
        probabilities = score(list(texts))
        flagged = [p >= threshold for p in probabilities]
        hits = [float(f) for f, y in zip(flagged, labels, strict=True) if y == 1]
        false = [float(f) for f, y in zip(flagged, labels, strict=True) if y == 0]
        rows.append(
            {
                "name": detector.name,
                "available": True,
                "texts": len(texts),
                "threshold": threshold,
                "recall": sum(hits) / len(hits) if hits else float("nan"),
                "recall_ci": list(bootstrap_ci(hits, samples=samples, seed=seed)),
                "false_quarantine": sum(false) / len(false) if false else float("nan"),
                "false_quarantine_ci": list(bootstrap_ci(false, samples=samples, seed=seed)),
                "note": detector.description,
            }
        )
    return rows
