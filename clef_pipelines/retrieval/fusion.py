"""Vector, full-text and hybrid search over any store, and the fusion of ranked lists.

Hybrid search asks the store twice (nearest vectors, best full-text matches), each for
``fusion.candidates`` hits under the same filter (both at once where the store's reads overlap,
``VectorStore.concurrent_reads``), and fuses the two lists:

- ``rrf`` (default): reciprocal rank fusion, ``sum_i w_i / (k + rank_i)``. It needs no score
  calibration between a cosine similarity and a BM25 / ts_rank value, which differ per engine.
- ``weighted``: each list's scores min-max normalised to [0, 1], then ``sum_i w_i * s_i``
  (a record missing from a list gets 0 there).

Fused hits carry the fused value as ``score`` and ``raw_score``; the record is the store's
(read for the fused top_k only, where the store can defer it: ``VectorStore.query_refs``).
A collection made before full-text search existed (no text fields) answers hybrid queries
by vector alone, with a warning, until it is ingested again; a text query on it is an error.

Plain functions: the recall step and the eval harness call `search` with a mode.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from clef_pipelines.retrieval.config import FusionConfig, RecallMode
from clef_pipelines.stores.base import Filter, Hit, NoTextSearch, VectorStore

log = logging.getLogger(__name__)


def rrf_fuse(
    ranked: Sequence[Sequence[Hit]], *, k: int = 60, weights: Sequence[float] | None = None
) -> list[Hit]:
    """Reciprocal rank fusion of best-first lists; ties broken by id (deterministic)."""
    weights = list(weights) if weights is not None else [1.0] * len(ranked)
    fused: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for hits, w in zip(ranked, weights, strict=True):
        for rank, hit in enumerate(hits, start=1):
            fused[hit.id] = fused.get(hit.id, 0.0) + w / (k + rank)
            first.setdefault(hit.id, hit)
    return _ordered(fused, first)


def weighted_fuse(ranked: Sequence[Sequence[Hit]], weights: Sequence[float]) -> list[Hit]:
    """Weighted sum of each list's min-max normalised raw scores (higher raw is better)."""
    fused: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for hits, w in zip(ranked, weights, strict=True):
        if not hits:
            continue
        values = [h.score for h in hits]
        lo, hi = min(values), max(values)
        span = hi - lo
        for hit in hits:
            norm = (hit.score - lo) / span if span > 0 else 1.0
            fused[hit.id] = fused.get(hit.id, 0.0) + w * norm
            first.setdefault(hit.id, hit)
    return _ordered(fused, first)


def _ordered(fused: dict[str, float], first: dict[str, Hit]) -> list[Hit]:
    order = sorted(fused, key=lambda i: (-fused[i], i))
    return [replace(first[i], score=fused[i], raw_score=fused[i]) for i in order]


def fuse(vector_hits: Sequence[Hit], text_hits: Sequence[Hit], fusion: FusionConfig) -> list[Hit]:
    weights = (fusion.vector_weight, fusion.text_weight)
    if fusion.method == "weighted":
        return weighted_fuse((vector_hits, text_hits), weights)
    return rrf_fuse((vector_hits, text_hits), k=fusion.rrf_k, weights=weights)


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
) -> list[Hit]:
    """The top_k hits of one query in the given mode. ``vector`` is needed for vector and
    hybrid, ``text`` for text and hybrid."""
    fusion = fusion or FusionConfig()
    if mode in ("vector", "hybrid") and vector is None:
        raise ValueError(f"mode {mode!r} needs the query vector")
    if mode in ("text", "hybrid") and text is None:
        raise ValueError(f"mode {mode!r} needs the query text")
    common: dict[str, Any] = {"where": where, "include_quarantined": include_quarantined}
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
        # The full-text list is fetched while the vector list is: hybrid costs about the
        # slower of the two, not their sum.
        text_future = _pool().submit(
            store.text_query_refs, collection, text or "", top_k=depth, **common
        )
    vector_hits = store.query_refs(collection, list(vector), top_k=depth, **common)  # type: ignore[arg-type]
    try:
        text_hits = (
            text_future.result()
            if text_future is not None
            else store.text_query_refs(collection, text or "", top_k=depth, **common)
        )
    except NoTextSearch as exc:
        log.warning("hybrid recall by vector alone: %s", exc)
        return store.fill_records(collection, vector_hits[:top_k])
    return store.fill_records(collection, fuse(vector_hits, text_hits, fusion)[:top_k])


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """One small pool per process for the full-text half of hybrid searches."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="clef-hybrid")
        return _POOL
