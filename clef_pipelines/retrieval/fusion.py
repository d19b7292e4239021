"""Vector, full-text and hybrid search over any store, and the fusion of ranked lists.

Hybrid search asks the store twice (nearest vectors, best full-text matches), each for
``fusion.candidates`` hits under the same filter (both at once where the store's reads overlap,
``VectorStore.concurrent_reads``), and fuses the two lists:

- ``zscore`` (default): each list's scores standardised by the list's own spread, then
  ``sum_i w_i * (s_i - min_i) / sd_i``; a record missing from a list gets that list's lowest
  value there (its score in it is at most that). The spread, not the list's best or worst hit,
  sets the scale, so one outlier does not squash the rest; no calibration between a cosine
  similarity and a BM25 / ts_rank value is needed. On SciFact train (MiniLM, LanceDB) it lifts
  nDCG@10 over RRF on both halves of a tune / check split (docs/BENCHMARKS.md).
- ``weighted``: the same with the min-max range as the spread (scores in [0, 1]).
- ``rrf``: reciprocal rank fusion, ``sum_i w_i / (k + rank_i)``: ranks only, scores ignored.

Score fusion reads each list's linear relevance: the similarity of a vector hit (``score``)
and the engine's raw value of a text hit (``raw_score``: BM25, ts_rank, sparse dot product),
not its [0, 1) squashed ``score``, which compresses the best matches together.

Fused hits carry the fused value as ``score`` and ``raw_score``; the record is the store's
(read for the fused top_k only, where the store can defer it: ``VectorStore.query_refs``).
A collection made before full-text search existed (no text fields) answers hybrid queries
by vector alone, with a warning, until it is ingested again; a text query on it is an error.

Plain functions: the recall step and the eval harness call `search` with a mode.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Literal

from clef_pipelines.retrieval.config import FusionConfig, RecallMode
from clef_pipelines.stores.base import Filter, Hit, NoTextSearch, VectorStore

log = logging.getLogger(__name__)


def rrf_fuse(
    ranked: Sequence[Sequence[Hit]],
    *,
    k: int = 60,
    weights: Sequence[float] | None = None,
    limit: int | None = None,
) -> list[Hit]:
    """Reciprocal rank fusion of best-first lists; ties broken by id (deterministic); the
    ``limit`` best (default all)."""
    weights = list(weights) if weights is not None else [1.0] * len(ranked)
    fused: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for hits, w in zip(ranked, weights, strict=True):
        for rank, hit in enumerate(hits, start=1):
            fused[hit.id] = fused.get(hit.id, 0.0) + w / (k + rank)
            first.setdefault(hit.id, hit)
    return _ordered(fused, first, limit)


#: How a score fusion reads a hit's relevance (higher is better).
ScoreOf = Callable[[Hit], float]


def weighted_fuse(
    ranked: Sequence[Sequence[Hit]],
    weights: Sequence[float],
    *,
    spread: Literal["range", "sd"] = "range",
    score_of: Sequence[ScoreOf] | None = None,
    depth: int | None = None,
    limit: int | None = None,
) -> list[Hit]:
    """Weighted sum over best-first lists of ``(s - floor) / spread`` per list.

    The spread is the list's score range (min-max normalisation) or its standard deviation
    (z-score). The floor is what a record missing from the list gets (0 after the shift): the
    list's lowest score when the list is ``depth`` long (a missing record scores at most that),
    or, when it is shorter than ``depth`` and so holds every match, the engine's no-match
    value 0, which then also counts as one value of the spread (a list of one hit is not
    degenerate: its hit gets 2 under sd, 1 under range). A list whose spread is 0 gives each
    of its hits 1. ``score_of`` reads each list's relevance (default ``Hit.score``; scores are
    >= 0, higher is better). The ``limit`` best come back (default all)."""
    readers = list(score_of) if score_of is not None else [_score] * len(ranked)
    fused: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for hits, w, read in zip(ranked, weights, readers, strict=True):
        if not hits:
            continue
        values = [read(h) for h in hits]
        exhaustive = depth is not None and len(values) < depth
        lo = 0.0 if exhaustive else min(values)
        spread_of = [*values, lo] if exhaustive else values
        width = max(values) - lo if spread == "range" else _pstdev(spread_of)
        for hit, value in zip(hits, values, strict=True):
            norm = (value - lo) / width if width > 0 else 1.0
            fused[hit.id] = fused.get(hit.id, 0.0) + w * norm
            first.setdefault(hit.id, hit)
    return _ordered(fused, first, limit)


def _pstdev(values: Sequence[float]) -> float:
    """Population standard deviation (statistics.pstdev is exact, and 10x slower)."""
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))


def _score(hit: Hit) -> float:
    return hit.score


def _raw_score(hit: Hit) -> float:
    return hit.raw_score


def _ordered(fused: dict[str, float], first: dict[str, Hit], limit: int | None) -> list[Hit]:
    # Only the kept hits are copied with their fused score (a copy costs more than the sort).
    order = sorted(fused, key=lambda i: (-fused[i], i))[:limit]
    return [replace(first[i], score=fused[i], raw_score=fused[i]) for i in order]


def fuse(
    vector_hits: Sequence[Hit],
    text_hits: Sequence[Hit],
    fusion: FusionConfig,
    *,
    depth: int | None = None,
    limit: int | None = None,
) -> list[Hit]:
    """The two lists fused as ``fusion`` says, best first (the ``limit`` best, default all);
    ``depth``: how many hits each list was asked for (default ``fusion.candidates``; a
    shorter list holds every match)."""
    weights = (fusion.vector_weight, fusion.text_weight)
    if fusion.method == "rrf":
        return rrf_fuse((vector_hits, text_hits), k=fusion.rrf_k, weights=weights, limit=limit)
    return weighted_fuse(
        (vector_hits, text_hits),
        weights,
        spread="sd" if fusion.method == "zscore" else "range",
        # A vector hit's similarity is linear in the distance; a text hit's `score` squashes
        # BM25 into [0, 1), so its raw value is read.
        score_of=(_score, _raw_score),
        depth=depth or fusion.candidates,
        limit=limit,
    )


def search(
    store: VectorStore,
    collection: str,
    *,
    mode: RecallMode,
    text: str | None = None,
    vector: Sequence[float] | Any | None = None,
    where: Filter | None = None,
    top_k: int = 10,
    fusion: FusionConfig | None = None,
    include_quarantined: bool = False,
    embed: Callable[[], Sequence[float]] | None = None,
) -> list[Hit]:
    """The top_k hits of one query in the given mode. ``vector`` is needed for vector and
    hybrid, ``text`` for text and hybrid. ``embed`` (instead of ``vector``) computes the
    query vector when it is needed: hybrid search on a store whose reads overlap starts the
    full-text leg first, which needs no vector, so it runs while the query is embedded."""
    fusion = fusion or FusionConfig()
    if mode in ("vector", "hybrid") and vector is None and embed is None:
        raise ValueError(f"mode {mode!r} needs the query vector")
    if mode in ("text", "hybrid") and text is None:
        raise ValueError(f"mode {mode!r} needs the query text")
    common: dict[str, Any] = {"where": where, "include_quarantined": include_quarantined}
    if mode == "vector" and vector is None and embed is not None:
        vector = embed()
    if mode == "vector":
        return store.query(collection, list(vector), top_k=top_k, **common)  # type: ignore[arg-type]
    if mode == "text":
        return store.text_query(collection, text or "", top_k=top_k, **common)
    if mode != "hybrid":
        raise ValueError(f"unknown recall mode {mode!r} (vector, text or hybrid)")
    depth = max(top_k, fusion.candidates)
    text_future = None
    # Both lists are fetched as refs (records as light as the store can make them) and only
    # the fused top_k read in full: with 100-deep lists and top_k 30, most hits are dropped.
    if store.concurrent_reads:
        # The full-text list is fetched while the query is embedded and the vector list
        # fetched: hybrid costs about the slower of the two, not their sum.
        text_future = _pool().submit(
            store.text_query_refs, collection, text or "", top_k=depth, **common
        )
    try:
        if vector is None and embed is not None:
            vector = embed()
        vector_hits = store.query_refs(collection, list(vector), top_k=depth, **common)  # type: ignore[arg-type]
    except BaseException:
        if text_future is not None:
            text_future.cancel()
            with contextlib.suppress(Exception):
                text_future.result()  # never leave the text leg running on its own
        raise
    try:
        text_hits = (
            text_future.result()
            if text_future is not None
            else store.text_query_refs(collection, text or "", top_k=depth, **common)
        )
    except NoTextSearch as exc:
        log.warning("hybrid recall by vector alone: %s", exc)
        return store.fill_records(collection, vector_hits[:top_k])
    fused = fuse(vector_hits, text_hits, fusion, depth=depth, limit=top_k)
    return store.fill_records(collection, fused)


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """One small pool per process for the full-text half of hybrid searches."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="clef-hybrid")
        return _POOL
