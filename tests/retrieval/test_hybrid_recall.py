"""Recall modes through the plain `recall` function and the Retriever: text and hybrid
candidates reach the Clef stages unchanged."""

from __future__ import annotations

import inspect
import statistics
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from clef_pipelines.embedding.hashing import HashEmbedder
from clef_pipelines.retrieval import Retriever
from clef_pipelines.retrieval.config import FusionConfig, RetrievalConfig
from clef_pipelines.retrieval.fusion import fuse, rrf_fuse, weighted_fuse
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


def text_hit(i: str, raw: float) -> Hit:
    """A full-text hit as the stores make it: `score` squashes the raw BM25 into [0, 1)."""
    return Hit(id=i, score=raw / (1 + raw), raw_score=raw, record={"id": i})


def test_zscore_fusion_standardises_each_list_and_reads_raw_text_scores() -> None:
    vector = [hit("x", 0.9), hit("y", 0.8), hit("z", 0.1)]
    text = [text_hit("z", 12.0), text_hit("y", 3.0), text_hit("w", 1.0)]

    def z(values: list[float], floor: float | None = None) -> list[float]:
        """Standard scores shifted so the floor (a missing record's value) is 0: the list's
        lowest for a full list; 0, counted in the spread, for a list holding every match."""
        if floor is None:
            floor, spread = min(values), statistics.pstdev(values)
        else:
            spread = statistics.pstdev([*values, floor])
        return [(v - floor) / spread for v in values]

    def expect(zv: list[float], zt: list[float]) -> dict[str, float]:
        """Fused values of w, x, y, z: the vector list is x y z, the text list z y w."""
        by_v, by_t = dict(zip("xyz", zv, strict=True)), dict(zip("zyw", zt, strict=True))
        return {i: by_v.get(i, 0.0) + by_t.get(i, 0.0) for i in "wxyz"}

    # Full lists (as deep as asked): the default is zscore, weights 1 / 1.
    want = expect(z([0.9, 0.8, 0.1]), z([12.0, 3.0, 1.0]))
    fused = fuse(vector, text, FusionConfig(), depth=3)
    assert [h.id for h in fused] == sorted(want, key=lambda i: -want[i]) == ["y", "z", "x", "w"]
    assert {h.id: h.score for h in fused} == pytest.approx(want)
    assert all(h.score >= 0 for h in fused)  # a fused score is never negative
    # The text leg is read raw: squashed scores would weigh y's BM25 3 (vs 12) far higher.
    squashed = weighted_fuse([vector, text], [1.0, 1.0], spread="sd")
    assert {h.id: h.score for h in squashed}["y"] > want["y"] + 0.5
    # Lists shorter than asked hold every match: a missing record has the no-match value 0.
    short = expect(z([0.9, 0.8, 0.1], 0.0), z([12.0, 3.0, 1.0], 0.0))
    assert {h.id: h.score for h in fuse(vector, text, FusionConfig())} == pytest.approx(short)
    # So the only full-text match of a rare term counts (2), as the only hit of a list.
    only = fuse(vector, [text_hit("z", 6.0)], FusionConfig())
    assert {h.id: h.score for h in only}["z"] == pytest.approx(2.0 + z([0.9, 0.8, 0.1], 0.0)[2])
    # Weights scale each list; a list of equal scores gives its hits 1.
    only_text = fuse(vector, text, FusionConfig(vector_weight=0.0), depth=3)
    assert [h.id for h in only_text][:2] == ["z", "y"]
    flat = weighted_fuse([[hit("a", 0.5), hit("b", 0.5)], []], [1.0, 1.0], spread="sd")
    assert [(h.id, h.score) for h in flat] == [("a", 1.0), ("b", 1.0)]
    # Min-max (`weighted`) reads the same values.
    mm = fuse(vector, text, FusionConfig(method="weighted"), depth=3)
    assert {h.id: h.score for h in mm} == pytest.approx(
        {"x": 1.0, "y": 0.875 + 2 / 11, "z": 1.0, "w": 0.0}
    )


def test_recall_defaults_to_the_configured_mode() -> None:
    assert inspect.signature(recall).parameters["mode"].default == RetrievalConfig().mode


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


def test_hybrid_recall_embeds_while_the_text_leg_runs(collection_factory: Any) -> None:
    """Hybrid recall on a store whose reads overlap starts the full-text leg before it
    embeds the query (the text leg needs no vector), and returns what it did before."""
    col = collection_factory(None, texts=[*PASSAGES, RARE])
    store = col.store
    started = threading.Event()
    text_leg = store.text_query_refs

    def recorded_text_leg(*args: Any, **kw: Any) -> Any:
        started.set()
        return text_leg(*args, **kw)

    waited: list[bool] = []

    class Embedder(HashEmbedder):
        def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
            waited.append(started.wait(5))  # False: the text leg had not started
            return super().embed_queries(texts)

    kw: dict[str, Any] = {"store": store, "collection": col.name, "top_k": 3}
    kw.update(mode="hybrid", fusion=FusionConfig(candidates=20))
    alone = recall("what does E-4417 mean", embedder=HashEmbedder(64), **kw)
    store.text_query_refs = recorded_text_leg  # type: ignore[method-assign]
    store.concurrent_reads = True  # as LanceDB and pgvector
    overlapped = recall("what does E-4417 mean", embedder=Embedder(64), **kw)
    assert waited == [True]
    assert [(p.id, p.score) for p in overlapped] == [(p.id, p.score) for p in alone]


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
