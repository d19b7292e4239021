"""Injection rows: how well detectors catch planted instructions, and how many reach a prompt.

Two measurements. (1) Labelled texts (`{"text", "label"}`): each detector (the offline guard,
the Clef paragraph screen) flags texts; recall on label 1 and false-quarantine rate on label 0.
(2) Planted: injection texts are appended as a paragraph of their own to real host paragraphs
(SQuAD), the planted corpus is ingested by the normal graph, and the host questions of planted
paragraphs are asked; we count prompts (the chunks a system sends) that carry planted text,
with and without screening.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from clef_pipelines.evals.candidates import ScorerContext, register_scorer, searchable
from clef_pipelines.evals.clef_systems import selection_run
from clef_pipelines.evals.metrics import bootstrap_ci
from clef_pipelines.retrieval.config import RetrievalConfig


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
    load: Callable[[Any], tuple[Callable[[list[str]], list[float]], float] | str]


DETECTORS: dict[str, Detector] = {}


def register_detector(detector: Detector) -> Detector:
    DETECTORS[detector.name] = detector
    return detector


def detector_rows(
    texts: Sequence[str],
    labels: Sequence[int],
    *,
    samples: int = 1000,
    seed: int = 13,
    settings: Any = None,
) -> list[dict[str, Any]]:
    """Recall and false-quarantine rate of every registered detector on labelled texts."""
    rows: list[dict[str, Any]] = []
    for detector in DETECTORS.values():
        loaded = detector.load(settings)
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


def _offline_guard(settings: Any = None) -> tuple[Callable[[list[str]], list[float]], float] | str:
    """The guard ingestion uses: with settings, `steering.guard`'s weights and threshold."""
    try:
        from clef_pipelines.guard.model import InjectionGuard  # type: ignore[import-not-found]
    except ImportError:
        return "needs the offline injection guard (clef_pipelines.guard.model), not in this build"
    from clef_pipelines.guard.config import GuardConfig
    from clef_pipelines.guard.loading import configured_guard

    guard: InjectionGuard
    if settings is None:
        guard, threshold = configured_guard(GuardConfig())
    else:
        guard, threshold = configured_guard(settings.steering.guard, settings.base_dir)
    return (lambda texts: [float(p) for p in guard.score(texts)]), threshold


@register_scorer("guard")
def guard_scorer(frame: pl.DataFrame, context: ScorerContext) -> pl.DataFrame | str:
    """Guard scores of candidate chunks, for the planted-injection rows only."""
    if context.dataset_kind != "injections":
        return "only for injection datasets"
    scores = guard_scores(frame["text"].to_list())
    if isinstance(scores, str):
        return scores
    return frame.with_columns(pl.Series("guard_score", scores, dtype=pl.Float64))


register_detector(
    Detector(
        "offline-guard",
        "offline classifier, no Clef call",
        _offline_guard,
    )
)


def guard_scores(texts: list[str]) -> list[float] | str:
    """The offline guard's probability for each text, or why it cannot run. Each distinct text
    is scored once: candidate frames repeat a chunk for every query that recalls it (on the
    planted SQuAD rows about twenty times), and the guard's MiniLM pass is the harness's
    largest cost."""
    loaded = DETECTORS["offline-guard"].load(None)
    if isinstance(loaded, str):
        return loaded
    distinct = list(dict.fromkeys(texts))
    by_text = dict(zip(distinct, loaded[0](distinct), strict=True))
    return [by_text[t] for t in texts]


def planted_rows(
    candidates: pl.DataFrame, offsets: dict[str, int], context_k: int, retrieval: Any = None
) -> list[dict[str, Any]]:
    """How many prompts carry planted text: vector top context_k unscreened; the same over what
    the ingest screen left searchable (when quarantined records were recalled and marked); after
    the offline guard drops flagged chunks at query time; after Clef's rank selection
    (instructs_ai drop)."""
    frame = mark_planted(candidates, offsets)
    queries = frame["query_id"].n_unique()
    rows: list[dict[str, Any]] = []

    def summarise(name: str, sent: pl.DataFrame, note: str) -> dict[str, Any]:
        per_query = sent.group_by("query_id").agg(
            pl.col("planted").any().alias("reached"),
            pl.col("planted").sum().alias("planted_chunks"),
            (pl.col("doc_id").is_in(list(offsets)) & ~pl.col("planted")).any().alias("evidence"),
        )
        reached = int(per_query["reached"].sum() or 0)
        evidence = int(per_query["evidence"].sum() or 0)
        return {
            "name": name,
            "available": True,
            "queries": queries,
            "prompts_reached": reached,
            "prompts_reached_rate": reached / queries if queries else 0.0,
            "planted_chunks_sent": int(per_query["planted_chunks"].sum() or 0),
            "evidence_sent_rate": evidence / queries if queries else 0.0,
            "note": note,
        }

    def top(frame_: pl.DataFrame) -> pl.DataFrame:
        return (
            frame_.sort(["query_id", "rank"])
            .group_by("query_id", maintain_order=True)
            .head(context_k)
        )

    kept_by_screen = searchable(frame)
    screened = kept_by_screen.height < frame.height
    unscreened_note = f"top {context_k} chunks"
    if screened:
        # Quarantined records were recalled too: ranking them as if searchable stands in for an
        # ingest without the screen, but there the planted text would share its host's chunk
        # and reach more prompts; the true baseline is an ingest with the screen off.
        unscreened_note += (
            ", quarantined records counted as searchable (a lower bound: ingest with the"
            " screen off for the true baseline)"
        )
    rows.append(summarise("vector, no screening", top(frame), unscreened_note))
    if "quarantined" in frame.columns:
        rows.append(
            summarise(
                "vector + ingest screen (as configured)",
                top(kept_by_screen),
                f"top {context_k} of what `query` returns"
                + ("" if screened else "; the screen quarantined nothing here"),
            )
        )
    guard = DETECTORS["offline-guard"].load(None)
    if "guard_score" in frame.columns and frame["guard_score"].null_count() < frame.height:
        cut = guard[1] if not isinstance(guard, str) else 0.5
        kept = frame.filter(pl.col("guard_score") < cut)
        rows.append(
            summarise(
                "vector + offline guard on recalled chunks",
                top(kept),
                f"chunks with guard >= {cut} dropped at query time, no ingest screen",
            )
        )
    else:
        rows.append(
            {
                "name": "vector + offline guard on recalled chunks",
                "available": False,
                "reason": guard if isinstance(guard, str) else "guard scores not recorded",
            }
        )
    if (
        "clef_instructs_ai" in frame.columns
        and frame["clef_instructs_ai"].null_count() < frame.height
    ):
        cfg = (retrieval or RetrievalConfig()).select.model_copy(update={"strategy": "rank"})
        # Over what `query` returns: quarantined records never reach the Clef stages.
        ranking, _shown = selection_run(kept_by_screen, cfg)
        sent_ids = {(r["query_id"], r["chunk_id"]) for r in ranking if r["sent"]}
        sent = kept_by_screen.filter(
            pl.struct("query_id", "chunk_id").map_elements(
                lambda s: (s["query_id"], s["chunk_id"]) in sent_ids, return_dtype=pl.Boolean
            )
        )
        rows.append(
            summarise(
                "clef-rank (drops instructs_ai)",
                sent,
                f"drop_instructs_ai {cfg.drop_instructs_ai}, max_passages {cfg.max_passages}"
                + (", after the ingest screen" if screened else ""),
            )
        )
    else:
        rows.append(
            {
                "name": "clef-rank (drops instructs_ai)",
                "available": False,
                "reason": "needs a Clef backend (clef.backend)",
            }
        )
    return rows


def _clef_screen(settings: Any) -> tuple[Callable[[list[str]], list[float]], float] | str:
    """The ingest screen's Clef judge alone (guard off), asked about each text as a paragraph."""
    from clef_pipelines.clef.client import SyncClefClient, resolve_backend

    if settings is None or resolve_backend(settings.clef)[0] == "off":
        return "needs a Clef backend (clef.backend)"
    from clef_pipelines.ingest.stages import open_steering
    from clef_pipelines.steering.screen import screen_blocks

    steering_cfg = settings.steering.model_copy(
        update={"guard": settings.steering.guard.model_copy(update={"mode": "off"})}
    )
    only_clef = settings.model_copy(update={"steering": steering_cfg})

    def score(texts: list[str]) -> list[float]:
        blocks = pl.DataFrame({"kind": ["paragraph"] * len(texts), "text": texts})
        client = SyncClefClient(settings.clef, data_dir=settings.data_path)
        try:
            screened, report = screen_blocks(blocks, open_steering(only_clef, client))
        finally:
            client.close()
        if report.failures:
            raise RuntimeError(f"the Clef screen failed after retries: {report.failures[0]}")
        return [float(p or 0.0) for p in screened["p_instructs_ai"].to_list()]

    return score, settings.steering.screen.quarantine_instructs_ai_at


register_detector(Detector("clef-screen", "Clef paragraph screen", _clef_screen))
