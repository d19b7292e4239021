"""The recorded candidates hold exactly what the query path recalls in each mode: the vector,
full-text and hybrid systems (and the Clef systems, through `recall_view`) rank the same chunks
`retrieval.fusion.search` returns, on a real LanceDB collection of SciFact abstracts."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from clef_pipelines.embedding.hashing import HashEmbedder
from clef_pipelines.evals.candidates import recall_candidates, recall_view
from clef_pipelines.evals.datasets import EvalQuery
from clef_pipelines.retrieval.config import FusionConfig
from clef_pipelines.retrieval.fusion import search
from clef_pipelines.stores import open_store
from clef_pipelines.stores.base import CollectionSpec
from clef_pipelines.stores.config import StoreConfig
from tests.shared_data import SCIFACT, need

DOCS = 120
TOP_K = 5


def test_each_mode_sees_what_recall_returns(tmp_path: Path) -> None:
    scifact = need(SCIFACT)
    with (scifact / "corpus.jsonl").open() as f:
        docs = [json.loads(line) for line, _ in zip(f, range(DOCS), strict=False)]
    embedder = HashEmbedder(64)
    store = open_store(StoreConfig(kind="lancedb"), tmp_path)
    fields = {"doc_id": "str", "text": "str", "title": "str", "tokens": "int"}
    store.ensure_collection(
        CollectionSpec(name="c", dimension=64, fields=fields, text_fields=("title", "text"))
    )
    vectors = embedder.embed([d["text"] for d in docs])
    store.upsert(
        "c",
        [
            {
                "id": f"00000000-0000-0000-0000-{i:012d}",
                "vector": vectors[i],
                "doc_id": str(d["_id"]),
                "text": d["text"],
                "title": d["title"],
                "tokens": len(d["text"].split()),
            }
            for i, d in enumerate(docs)
        ],
    )
    store.put_manifest("c", {"embedder": embedder.name, "dimension": 64, "metric": "cosine"})
    # Queries made of words of the documents, so both lists have hits and differ.
    queries = [
        EvalQuery(f"q{i}", " ".join(docs[i]["title"].split()[:6]), {str(docs[i]["_id"]): 1})
        for i in range(0, DOCS, 12)
    ]
    fusion = FusionConfig(candidates=40)
    frame, stats = recall_candidates(
        queries, store=store, embedder=embedder, collection="c", top_k=TOP_K, fusion=fusion
    )
    assert stats.text_recall == "ok"
    for column in ("vector_score", "text_score", "hybrid_score"):
        per_query = frame.filter(pl.col(column).is_not_null()).group_by("query_id").len()
        assert per_query["len"].max() == TOP_K, column
    differs = False
    for query in queries:
        vector = embedder.embed([query.text])[0].tolist()
        rows = frame.filter(pl.col("query_id") == query.id)
        assert rows["chunk_id"].n_unique() == rows.height  # a chunk is recorded once
        for mode in ("vector", "text", "hybrid"):
            expected = search(
                store, "c", mode=mode, text=query.text, vector=vector, top_k=TOP_K, fusion=fusion
            )
            view = recall_view(rows, mode).sort("rank")
            assert view["chunk_id"].to_list() == [h.id for h in expected], (query.id, mode)
            assert view["rank"].to_list() == list(range(1, len(expected) + 1))
            if mode == "hybrid":
                # The hybrid list is fused from lists deeper than top_k, as recall fuses them.
                assert view["vector_score"].to_list() == [h.score for h in expected]
                differs |= set(view["chunk_id"]) != set(recall_view(rows, "vector")["chunk_id"])
    assert differs  # the check above compared more than one list three times
