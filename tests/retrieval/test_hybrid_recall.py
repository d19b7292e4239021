"""Recall modes through the plain `recall` function and the Retriever: text and hybrid
candidates reach the Clef stages unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from clef_pipelines.embedding.hashing import HashEmbedder
from clef_pipelines.retrieval import Retriever
from clef_pipelines.retrieval.config import FusionConfig
from clef_pipelines.retrieval.fusion import rrf_fuse, weighted_fuse
from clef_pipelines.retrieval.recall import recall
from clef_pipelines.stores.base import Hit, NoTextSearch
from tests.clef.fake_server import FakeServer
from tests.retrieval.conftest import PASSAGES, PLANTED, QUERY, judge

RARE = "Error code E-4417 means the device token expired; sign in again to renew it."


def hit(i: str, score: float) -> Hit:
    return Hit(id=i, score=score, raw_score=score, record={"id": i})


def test_rrf_and_weighted_fusion() -> None:
    a = [hit("x", 0.9), hit("y", 0.8), hit("z", 0.1)]
    b = [hit("z", 12.0), hit("y", 3.0)]
    fused = rrf_fuse([a, b], k=60)
    # z is 3rd and 1st (1/63 + 1/61), just above y, 2nd in both (2/62); x is in one list.
    assert [h.id for h in fused] == ["z", "y", "x"]
    assert fused[0].score == pytest.approx(1 / 63 + 1 / 61)
    assert fused[1].score == pytest.approx(2 / 62)
    assert [h.id for h in rrf_fuse([a, b], k=60, weights=[1.0, 0.0])] == ["x", "y", "z"]
    w = weighted_fuse([a, b], [1.0, 1.0])
    # Min-max: x 1 + 0, y 0.875 + 0, z 0 + 1 ... y also gets text 0 (it is the text minimum).
    assert [h.id for h in w][:1] == ["x"] and {h.id for h in w} == {"x", "y", "z"}
    assert rrf_fuse([[], []]) == []


def test_recall_modes(collection_factory: Any) -> None:
    col = collection_factory(None, texts=[*PASSAGES, RARE])
    store, emb = col.store, HashEmbedder(64)
    kw: dict[str, Any] = {"store": store, "embedder": emb, "collection": col.name, "top_k": 3}
    query = "what does E-4417 mean"
    text = recall(query, mode="text", **kw)
    assert text[0].id == col.id_of(RARE) and text[0].text == RARE
    hybrid = recall(query, mode="hybrid", fusion=FusionConfig(candidates=20), **kw)
    assert hybrid[0].id == col.id_of(RARE)
    assert [p.rank for p in hybrid] == [1, 2, 3]
    assert hybrid[0].score >= hybrid[1].score
    # Filters hold in every mode.
    for mode in ("vector", "text", "hybrid"):
        got = recall(query, mode=mode, where={"doc_id": "doc-0"}, **kw)
        assert {p.doc_id for p in got} <= {"doc-0"}, mode


def test_hybrid_on_a_collection_without_text_search_is_vector(collection_factory: Any) -> None:
    col = collection_factory(None)
    store, emb = col.store, HashEmbedder(64)
    store.drop(col.name)
    from tests.retrieval.conftest import Collection

    old = Collection(col.settings, col.name, list(PASSAGES), text_fields=())
    kw: dict[str, Any] = {"store": old.store, "embedder": emb, "collection": col.name}
    assert [p.id for p in recall(QUERY, mode="hybrid", **kw)] == [
        p.id for p in recall(QUERY, mode="vector", **kw)
    ]
    with pytest.raises(NoTextSearch):
        recall(QUERY, mode="text", **kw)


def test_hybrid_candidates_through_the_clef_stages(
    fake: FakeServer, collection_factory: Any
) -> None:
    fake.answer_with(judge(gate_p=0.9))
    col = collection_factory(fake, mode="hybrid")
    with Retriever(col.settings) as r:
        res = r.retrieve(QUERY)
    assert not res.degraded and not res.abstain
    assert col.id_of(PLANTED) in {c.id for c in res.dropped if c.reason == "instructs_ai"}
    assert res.passages[0].id == col.id_of(PASSAGES[0])
    stages = {s.name: s for s in res.stages}
    assert stages["recall"].details["recall_mode"] == "hybrid"
