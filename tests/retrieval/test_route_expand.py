"""Routing by taxonomy fields marked for routing, and neighbour expansion."""

from __future__ import annotations

from typing import Any

from clef_pipelines.retrieval import Retriever
from clef_pipelines.retrieval.config import RouteConfig
from clef_pipelines.steering.route import RouteField, decide_field
from tests.clef.fake_server import FakeServer
from tests.retrieval.conftest import PASSAGES, QUERY, judge

TOPIC = RouteField(
    name="topic",
    options={"network": "Bandwidth and uploads", "billing": "Invoices", "other": None},
)


def tagged(n_network: int) -> list[dict[str, Any]]:
    """The first n passages are tagged network, the rest billing."""
    return [{"tag_topic": "network" if i < n_network else "billing"} for i in range(len(PASSAGES))]


def route_answer(probs: dict[str, float]) -> Any:
    base = judge()

    def answer(qid: str, q: dict[str, Any], state: Any) -> Any:
        if qid == "route_topic":
            top = max(probs, key=probs.__getitem__)
            return {
                "type": "choice",
                "choice": top,
                "confidence": probs[top],
                "probabilities": probs,
            }
        return base(qid, q, state)

    return answer


def test_decide_field() -> None:
    cfg = RouteConfig()
    assert (
        decide_field({"network": 0.7, "billing": 0.2, "other": 0.05, "any": 0.05}, cfg) == "network"
    )
    pair = decide_field({"network": 0.45, "billing": 0.4, "other": 0.1, "any": 0.05}, cfg)
    assert pair == ["network", "billing"]
    assert decide_field({"network": 0.3, "billing": 0.3, "other": 0.2, "any": 0.2}, cfg) is None
    assert decide_field({"other": 0.9, "network": 0.05, "billing": 0.03, "any": 0.02}, cfg) is None


def test_confident_route_filters_in_one_request(fake: FakeServer, collection_factory: Any) -> None:
    fake.answer_with(route_answer({"network": 0.8, "billing": 0.1, "other": 0.05, "any": 0.05}))
    col = collection_factory(fake, extra=tagged(6))
    with Retriever(col.settings, route_fields=[TOPIC]) as r:
        res = r.retrieve(QUERY)
    assert res.filter_used == {"tag_topic": "network"}
    assert res.stage("recall").details["candidates"] == 6
    assert all(c.record["tag_topic"] == "network" for c in [*res.passages, *res.dropped])
    route_requests = [b for b in fake.requests if "route_topic" in b["questions"]]
    assert len(route_requests) == 1 and set(route_requests[0]["state"]) == {"query"}
    assert "any" in route_requests[0]["questions"]["route_topic"]["criteria"]
    assert res.clef_requests == len(fake.requests) <= 4


def test_too_few_candidates_retries_unfiltered(fake: FakeServer, collection_factory: Any) -> None:
    fake.answer_with(route_answer({"network": 0.8, "billing": 0.1, "other": 0.05, "any": 0.05}))
    col = collection_factory(fake, extra=tagged(2))
    with Retriever(col.settings, route_fields=[TOPIC]) as r:
        res = r.retrieve(QUERY)
    assert res.stage("recall").details["retried_unfiltered"] is True
    assert res.filter_used is None
    assert res.stage("recall").details["candidates"] == len(PASSAGES)


def test_caller_filter_skips_routing(fake: FakeServer, collection_factory: Any) -> None:
    fake.answer_with(route_answer({"network": 0.9, "billing": 0.04, "other": 0.03, "any": 0.03}))
    col = collection_factory(fake, extra=tagged(6))
    with Retriever(col.settings, route_fields=[TOPIC]) as r:
        res = r.retrieve(QUERY, where={"tag_topic": "billing"})
    assert res.stage("route").skipped == "the caller passed a filter"
    assert not any("route_topic" in b["questions"] for b in fake.requests)
    assert res.filter_used == {"tag_topic": "billing"}


def test_shadow_route_records_but_does_not_filter(
    fake: FakeServer, collection_factory: Any
) -> None:
    fake.answer_with(route_answer({"network": 0.8, "billing": 0.1, "other": 0.05, "any": 0.05}))
    col = collection_factory(fake, extra=tagged(6), route={"mode": "shadow"})
    with Retriever(col.settings, route_fields=[TOPIC]) as r:
        res = r.retrieve(QUERY)
    assert res.filter_used is None
    assert res.stage("route").details["filter"] == {"tag_topic": "network"}


def test_neighbours_of_a_chunk_that_is_not_self_contained(
    fake: FakeServer, collection_factory: Any
) -> None:
    """Chunks 0..2 of one document; chunk 1 (the answer) is not self-contained. Its
    neighbours come along in reading order; a quarantined neighbour never does."""
    texts = [
        "Network settings chapter, part one: the preferences window.",
        "To limit the upload bandwidth of the sync client, set a fixed rate there.",
        "Part three: the rate applies to every device.",
        "Unrelated billing passage about invoices.",
    ]
    extra = [
        {"doc_id": "net", "chunk_index": 0, "q_self_contained": 0.9},
        {"doc_id": "net", "chunk_index": 1, "q_self_contained": 0.2},
        {"doc_id": "net", "chunk_index": 2, "q_self_contained": 0.9},
        {"doc_id": "bill", "chunk_index": 0, "q_self_contained": 0.9},
    ]

    def answer(qid: str, q: dict[str, Any], state: Any) -> Any:
        if qid == "answerable":
            return 0.9
        text = state[q["instructions"].split("`")[1]]
        name = qid.rsplit(".", 1)[-1]
        if name == "contains_answer_evidence":
            return 0.95 if "fixed rate" in text else 0.05
        if name == "is_relevant":
            return 0.9 if "fixed rate" in text else 0.1
        return 0.01

    fake.answer_with(answer)
    col = collection_factory(
        fake, texts, extra, select={"expand_neighbours": True, "strategy": "threshold"}
    )
    manifest = col.store.get_manifest(col.name)
    col.store.put_manifest(col.name, {**manifest, "steering": {"screened": True}})
    col.store.upsert(
        col.name,
        [
            {
                **col.store.get(col.name, [col.id_of(texts[2])])[0],
                "vector": [0.0] * 63 + [1.0],
                "quarantined": True,
            }
        ],
    )
    with Retriever(col.settings) as r:
        res = r.retrieve(QUERY)
    assert [c.text for c in res.passages] == texts[:2]
    assert res.passages[0].expanded_from == col.id_of(texts[1])
    assert res.stage("expand").details["added"] == 1


def test_taxonomy_fields_marked_route_are_routable(tmp_path: Any) -> None:
    from clef_pipelines.config import Settings
    from clef_pipelines.retrieval.retriever import routable_fields

    settings = Settings(
        base_dir=str(tmp_path),
        steering={
            "enrich": {
                "taxonomy": {
                    "fields": [
                        {
                            "name": "topic",
                            "options": {"network": "x", "other": None},
                            "route": True,
                        },
                        {"name": "kind", "options": {"faq": "y", "other": None}},
                    ]
                }
            }
        },
    )
    assert [f.name for f in routable_fields(settings)] == ["topic"]
