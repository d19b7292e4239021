"""A refresh watched write by write: the sync's own code against a real store, with a scan of
the store after every write call (insert, upsert, delete) that finds every document that
exists before and after the refresh. Deterministic: no thread races the sync; the hook runs
between its writes, where a concurrent query could run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from clef_pipelines.embedding.hashing import HashEmbedder
from clef_pipelines.ingest.documents import CHANGED, NEW, REMOVED, RESCREEN
from clef_pipelines.ingest.sync import sync_source
from clef_pipelines.records import content_hash, record_id
from clef_pipelines.stores.base import VectorStore

EMBEDDER = HashEmbedder(dimension=16)
COLLECTION = "refresh"


def chunk_frame(source: str, docs: dict[str, tuple[str, list[str]]]) -> pl.DataFrame:
    """Embedded chunks as the embeddings step leaves them: doc id -> (doc hash, texts)."""
    rows = []
    for doc_id, (doc_hash, texts) in docs.items():
        for i, text in enumerate(texts):
            rows.append(
                {
                    "id": record_id(f"{source}\x1f{doc_id}", content_hash(text)),
                    "source": source,
                    "doc_id": doc_id,
                    "chunk_index": i,
                    "doc_hash": doc_hash,
                    "doc_chunk_count": len(texts),
                    "text": text,
                    "embed_text": text,
                    "quarantined": False,
                }
            )
    frame = pl.DataFrame(rows)
    vectors = EMBEDDER.embed(frame["embed_text"].to_list())
    return frame.with_columns(pl.Series("vector", vectors).cast(pl.List(pl.Float32)))


def inventory(source: str, statuses: dict[str, str]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "source": [source] * len(statuses),
            "doc_id": list(statuses),
            "status": list(statuses.values()),
        }
    )


def corpus(
    n: int,
) -> tuple[dict[str, tuple[str, list[str]]], dict[str, tuple[str, list[str]]], dict[str, str]]:
    """Documents before and after a refresh, and the statuses the inventory would give.

    Of every five documents: one unchanged, one edited with a chunk kept (ids shared between
    the old and new sets), one rewritten whole (no id shared), one rescreened (the same ids,
    nothing else), one removed. Plus new documents, as many as a fifth."""
    before: dict[str, tuple[str, list[str]]] = {}
    after: dict[str, tuple[str, list[str]]] = {}
    status: dict[str, str] = {}
    for i in range(n):
        d = f"doc-{i:04d}"
        texts = [f"{d} first part", f"{d} second part", f"{d} third part"]
        before[d] = ("h1", texts)
        kind = i % 5
        if kind == 0:
            after[d] = before[d]
        elif kind == 1:
            after[d], status[d] = ("h2", [texts[0], f"{d} edited part"]), CHANGED
        elif kind == 2:
            after[d], status[d] = ("h2", [f"{d} all new {j}" for j in range(4)]), CHANGED
        elif kind == 3:
            after[d], status[d] = before[d], RESCREEN
        else:
            status[d] = REMOVED
    for i in range(n // 5):
        d = f"new-{i:04d}"
        after[d], status[d] = ("h1", [f"{d} fresh"]), NEW
    return before, after, status


def watched_refresh(store: VectorStore, n: int, *, batch_rows: int = 8) -> list[int]:
    """Load `n` documents, then refresh them (`corpus`) with a scan after every write call;
    returns how many documents that exist before and after were missing at each scan (all
    zeros when the store never hides one). Asserts the store holds exactly the new chunks."""
    before, after, status = corpus(n)
    sync_source(
        store,
        COLLECTION,
        "s",
        inventory("s", dict.fromkeys(before, NEW)),
        chunk_frame("s", before),
        EMBEDDER,
        chunker="structural",
        batch_rows=64,
    )
    both = set(before) & set(after)
    missing: list[int] = []

    def visible() -> set[str]:
        return {
            r["doc_id"] for r in store.scan(COLLECTION, where={"source": "s"}, fields=["doc_id"])
        }

    def watched(real: Callable[..., int]) -> Callable[..., int]:
        def write(collection: str, *args: Any, **kwargs: Any) -> int:
            done = real(collection, *args, **kwargs)
            missing.append(len(both - visible()))
            return done

        return write

    for name in ("insert", "upsert", "delete"):
        setattr(store, name, watched(getattr(store, name)))
    changed = {d: s for d, s in status.items() if s != REMOVED}
    current = chunk_frame("s", {d: after[d] for d in changed})
    sync_source(
        store,
        COLLECTION,
        "s",
        inventory("s", status),
        current,
        EMBEDDER,
        chunker="structural",
        batch_rows=batch_rows,
    )
    stored = sorted(r["id"] for r in store.scan(COLLECTION, where={"source": "s"}, fields=[]))
    assert stored == sorted(chunk_frame("s", after)["id"].to_list())
    return missing
