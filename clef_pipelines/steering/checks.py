"""The ingestion asset checks as plain functions: each returns (passed, facts for the UI).

The Dagster layer turns each into an `AssetCheckResult` on the asset (and source partition) it
checks. The `..._over` functions judge a step's output a batch at a time, as a check that runs
on its own reads it back; a failing check's facts name the documents (and values) behind it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from clef_pipelines.ingest.totals import distinct_doc_ids, scan_doc_ids
from clef_pipelines.steering.config import ChecksConfig
from clef_pipelines.stores.base import VectorStore

Check = tuple[bool, dict[str, Any]]


def judged_actions(screened: pl.DataFrame) -> dict[str, int]:
    """The screen actions of the judged blocks of a frame, counted (one batch of a run)."""
    judged = screened.filter(pl.col("screened")) if "screened" in screened.columns else screened
    if judged.height == 0:
        return {}
    return {str(k): int(v) for k, v in judged.group_by("screen_action").len().iter_rows()}


def screen_rates_of(
    actions: Mapping[str, int],
    bounds: ChecksConfig,
    top_documents: Sequence[Mapping[str, Any]] = (),
) -> Check:
    """Quarantine and drop rates of the judged blocks' actions (`judged_actions`, counted
    over a run's batches) within the bounds. `top_documents`: the documents with the most
    quarantined blocks (`QuarantineSummary.top_documents`), named in the facts when the
    quarantine rate is over its bound, so the failure says where to look."""
    n = sum(actions.values())
    q = actions.get("quarantine", 0) / n if n else 0.0
    d = actions.get("drop", 0) / n if n else 0.0
    passed = q <= bounds.max_quarantine_rate and d <= bounds.max_drop_rate
    facts: dict[str, Any] = {
        "screened_blocks": n,
        "quarantined_blocks": actions.get("quarantine", 0),
        "quarantine_rate": round(q, 4),
        "drop_rate": round(d, 4),
        "max_quarantine_rate": bounds.max_quarantine_rate,
        "max_drop_rate": bounds.max_drop_rate,
    }
    if q > bounds.max_quarantine_rate and top_documents:
        facts["documents_most_quarantined"] = [
            f"{doc['source']}/{doc['doc_id']}: {doc['quarantined']}" for doc in top_documents
        ]
    return passed, facts


#: How many documents a failing check names.
NAMED = 10


def _named(counts: Counter[str], n: int = NAMED) -> list[str]:
    """'doc: count' for the documents with the highest counts, most first."""
    return [f"{doc}: {c}" for doc, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


def screen_rates_over(batches: Iterable[pl.DataFrame], bounds: ChecksConfig) -> Check:
    """`screen_rates_of` over a step's screened batches (as written): the documents with the
    most quarantined blocks when the quarantine rate is over its bound, and with the most
    dropped blocks when the drop rate is."""
    from clef_pipelines.steering.quarantine import QuarantineSummary

    actions: Counter[str] = Counter()
    quarantine = QuarantineSummary()
    dropped: Counter[str] = Counter()
    for frame in batches:
        if frame.height == 0:
            continue
        actions.update(judged_actions(frame))
        quarantine.add(frame)
        judged = frame.filter(pl.col("screened")) if "screened" in frame.columns else frame
        drops = judged.filter(pl.col("screen_action") == "drop")
        for source, doc_id, n in drops.group_by("source", "doc_id").len().iter_rows():
            dropped[f"{source}/{doc_id}"] += int(n)
    passed, facts = screen_rates_of(actions, bounds, quarantine.top_documents())
    if facts["drop_rate"] > bounds.max_drop_rate:
        facts["documents_most_dropped"] = _named(dropped)
    return passed, facts


def chunk_sizes_over(batches: Iterable[pl.DataFrame], max_tokens: int) -> Check:
    """`chunk_sizes` over a step's chunk batches (as written)."""
    return combine_chunk_sizes([chunk_sizes(f, max_tokens) for f in batches], max_tokens)


def embedded_over(batches: Iterable[pl.DataFrame], dimension: int) -> Check:
    """`all_embedded` over a step's embedded batches (as written)."""
    return combine_embedded([all_embedded(f, dimension) for f in batches], dimension)


def enrichment_drops_over(
    pairs: Iterable[tuple[pl.DataFrame, pl.DataFrame]], bounds: ChecksConfig
) -> Check:
    """`enrichment_drop_rate` over (chunks, enriched) batch pairs (as written), naming the
    documents that lost the most chunks when the rate is over its bound."""
    before = after = 0
    dropped: Counter[str] = Counter()
    for chunks, enriched in pairs:
        before += chunks.height
        after += enriched.height
        if chunks.height > enriched.height:
            kept = enriched["id"].implode() if enriched.height else pl.Series([], dtype=pl.Utf8)
            gone = chunks.filter(~pl.col("id").is_in(kept)) if enriched.height else chunks
            for doc_id, n in gone.group_by("doc_id").len().iter_rows():
                dropped[str(doc_id)] += int(n)
    passed, facts = enrichment_drop_rate(before, after, bounds)
    if not passed:
        facts["documents_most_dropped"] = _named(dropped)
    return passed, facts


def guard_coverage(not_judged: Mapping[str, int], clef: str, screened: int) -> Check:
    """Whether every screenable block had a judge: the blocks the guard leaves to Clef (their
    document is in another language, or they hold no prose: `guard_not_judged`) are judged by
    nobody while Clef's screen is not on. They are kept, never quarantined wholesale; the
    check says how many, and why, so that a user sees them (a warning, not an error)."""
    left = sum(not_judged.values())
    unjudged = left if clef != "on" else 0
    return unjudged == 0, {
        "screened_blocks": screened,
        "not_judged_by_guard": dict(sorted(not_judged.items())),
        "clef_screen": clef,
        "kept_unjudged": unjudged,
        "unjudged_rate": round(unjudged / screened, 4) if screened else 0.0,
    }


def enrichment_drop_rate(before: int, after: pl.DataFrame | int, bounds: ChecksConfig) -> Check:
    """Share of chunks the enrichment dropped, within the drop bound (`after`: the enriched
    frame, or its row count summed over a run's batches)."""
    out = after if isinstance(after, int) else after.height
    d = (before - out) / before if before else 0.0
    return d <= bounds.max_drop_rate, {
        "chunks_in": before,
        "chunks_out": out,
        "drop_rate": round(d, 4),
        "max_drop_rate": bounds.max_drop_rate,
    }


def chunk_sizes(chunks: pl.DataFrame, max_tokens: int) -> Check:
    """No retrievable chunk over max_tokens (a quarantined block is stored whole, as found)."""
    live = chunks.filter(~pl.col("quarantined")) if chunks.height else chunks
    over = live.filter(pl.col("tokens") > max_tokens) if live.height else live
    return over.height == 0, {
        "chunks": live.height,
        "over_max_tokens": over.height,
        "max_tokens": max_tokens,
        "largest": int(live["tokens"].max() or 0) if live.height else 0,
        "examples": over["id"].head(5).to_list() if over.height else [],
        # Which documents, and how large: "doc_id: tokens" of the largest offenders.
        "documents_over": [
            f"{d}: {t} tokens"
            for d, t in over.sort("tokens", descending=True)
            .select("doc_id", "tokens")
            .head(NAMED)
            .iter_rows()
        ]
        if over.height
        else [],
    }


def combine_chunk_sizes(parts: list[Check], max_tokens: int) -> Check:
    """`chunk_sizes` over a run's batches, from each batch's result."""
    facts = [f for _, f in parts]
    return all(ok for ok, _ in parts), {
        "chunks": sum(f["chunks"] for f in facts),
        "over_max_tokens": sum(f["over_max_tokens"] for f in facts),
        "max_tokens": max_tokens,
        "largest": max((f["largest"] for f in facts), default=0),
        "examples": [e for f in facts for e in f["examples"]][:5],
        "documents_over": [d for f in facts for d in f.get("documents_over", [])][:NAMED],
    }


def combine_embedded(parts: list[Check], dimension: int) -> Check:
    """`all_embedded` over a run's batches, from each batch's result."""
    facts = [f for _, f in parts]
    return all(ok for ok, _ in parts), {
        "chunks": sum(f["chunks"] for f in facts),
        "missing_or_bad": sum(f["missing_or_bad"] for f in facts),
        "dimension": dimension,
        "documents_missing": [d for f in facts for d in f.get("documents_missing", [])][:NAMED],
    }


def all_embedded(embedded: pl.DataFrame, dimension: int) -> Check:
    """Every chunk has a finite vector of the embedder's dimension (checked column-wise, with
    no Python list per vector)."""
    if embedded.height == 0:
        return True, {"chunks": 0, "missing_or_bad": 0}
    vectors = embedded["vector"]
    right_size = (vectors.list.len() == dimension).fill_null(False).to_numpy()
    bad_rows = ~right_size
    sized = vectors.filter(pl.Series(right_size))
    if sized.len():
        matrix = sized.cast(pl.Array(pl.Float32, dimension)).to_numpy()
        bad_rows[np.flatnonzero(right_size)] = ~np.isfinite(matrix).all(axis=1)
    bad = int(bad_rows.sum())
    facts: dict[str, Any] = {
        "chunks": embedded.height,
        "missing_or_bad": bad,
        "dimension": dimension,
    }
    if bad and "doc_id" in embedded.columns:
        docs = embedded.filter(pl.Series(bad_rows))["doc_id"].cast(pl.Utf8).to_list()
        facts["documents_missing"] = _named(Counter(docs))
    return bad == 0, facts


def no_removed_documents(
    store: VectorStore, collection: str, source: str, inventory: pl.DataFrame
) -> Check:
    """The store holds no record of a document the source no longer has."""
    if not store.has_collection(collection):
        return True, {"stored_documents": 0, "stale_documents": 0}
    # Polars series, not sets of Python strings: the check's memory would grow with the
    # source (see `scan_doc_ids`).
    current = inventory.filter(pl.col("status") != "removed")["doc_id"].implode()
    present: list[pl.Series] = []
    stale_parts: list[pl.Series] = []
    for part in scan_doc_ids(store, collection, source):
        present.append(part)
        stale_parts.append(part.filter(~part.is_in(current)))
    stored = distinct_doc_ids(present).len()
    del present
    stale = distinct_doc_ids(stale_parts).sort().to_list()
    return not stale, {
        "stored_documents": stored,
        "stale_documents": len(stale),
        "examples": stale[:5],
    }


def quarantine_hidden(store: VectorStore, collection: str, source: str, limit: int = 20) -> Check:
    """Querying with each quarantined record's own vector (the nearest any query can get)
    never returns a quarantined record.

    Each probe query is filtered to the probe's own document (and source): the quarantined
    record itself, at distance 0, is still among what the query may return, so a store that
    failed to leave quarantined records out would return it, and the exclusion is the same
    one every query gets on top of its caller's filter. Why not the whole collection: before
    the index step every query is an exact search, and one over the whole table held memory
    that grew with it (+0.26 GB at 379,024 rows, +0.35 at 1.1 million; the sync step's
    peak, docs/BENCHMARKS.md "Upkeep in bounded memory"); a document's rows are found by its
    `doc_id` index, +0.005 GB at either size."""
    if not store.has_collection(collection):
        return True, {"quarantined_records": 0, "probes": 0, "leaked": 0}
    ids = store.list_ids(collection, where={"source": source, "quarantined": True})
    probes = store.get(collection, ids[:limit], with_vectors=True) if ids else []
    if not probes:  # still prove the filter on one ordinary record
        # The first record of a scan, not a list of every id of a large source.
        first = next(iter(store.scan(collection, where={"source": source}, fields=[])), None)
        some = [first["id"]] if first else []
        probes = store.get(collection, some, with_vectors=True) if some else []
    leaked: list[str] = []
    for rec in probes:
        where: dict[str, Any] = {"source": source}
        if rec.get("doc_id") is not None:
            where["doc_id"] = rec["doc_id"]
        for hit in store.query(collection, rec["vector"], where=where, top_k=10):
            if hit.record.get("quarantined"):
                leaked.append(f"{hit.record.get('doc_id')} ({hit.id})")
    return not leaked, {
        "quarantined_records": len(ids),
        "probes": len(probes),
        "leaked": len(leaked),
        # The documents (and record ids) a query returned although quarantined.
        "leaked_records": sorted(set(leaked))[:NAMED],
    }
