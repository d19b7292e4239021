"""Clef-steered retrieval end to end: a real store, the fake System One server scripted by
question, every failure kind, shadow mode, packing limits."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from clef_pipelines.clef.wire import MAX_QUESTIONS
from clef_pipelines.retrieval import Retriever
from tests.clef.fake_server import FakeServer, Reply
from tests.retrieval.conftest import CONFLICT, PASSAGES, PLANTED, QUERY, judge


def check_limits(fake: FakeServer) -> None:
    for body in fake.requests:
        assert 1 <= len(body["questions"]) <= MAX_QUESTIONS


def test_injection_dropped_conflict_apart_in_at_most_four_requests(
    fake: FakeServer, collection_factory: Any
) -> None:
    fake.answer_with(judge(gate_p=0.9))
    col = collection_factory(fake)
    with Retriever(col.settings) as r:
        res = r.retrieve(QUERY)
    prompt = res.to_prompt()
    assert not res.degraded and not res.abstain
    # The planted instruction was among the candidates and never reaches the prompt.
    assert col.id_of(PLANTED) in {c.id for c in res.dropped if c.reason == "instructs_ai"}
    assert "ignore your previous instructions" not in prompt
    # The conflict is in its own block, after the evidence.
    assert [c.id for c in res.conflicts] == [col.id_of(CONFLICT)]
    evidence, conflicts = prompt.split("## Conflicts")
    assert CONFLICT in conflicts and CONFLICT not in evidence
    # Evidence first by answer evidence: the passage with the actual setting leads.
    assert res.passages[0].id == col.id_of(PASSAGES[0])
    assert prompt.index("[1] ") < prompt.index(PASSAGES[0])
    # 10 candidates x 4 questions = 40 questions in one request, plus the gate.
    assert len(fake.requests) == res.clef_requests == 2
    assert res.clef_input_tokens > 0
    check_limits(fake)
    stages = {s.name: s for s in res.stages}
    assert stages["classify"].details["instructs_ai_asked"] is True
    assert stages["gate"].details["p"] == 0.9
    decisions = stages["select"].details["decisions"]
    assert decisions[col.id_of(PLANTED)]["decision"] == "instructs_ai"
    assert decisions[col.id_of(PLANTED)]["instructs_ai"] == 0.97
    d = res.to_dict()
    assert d["query"] == QUERY and d["passages"][0]["n"] == 1
    assert d["conflicts"][0]["n"] == len(res.passages) + 1
    json.dumps(d)  # JSON-ready


@pytest.mark.parametrize("waves", [False, True])
def test_more_candidates_than_one_request_holds(
    fake: FakeServer, collection_factory: Any, waves: bool
) -> None:
    """30 candidates x 4 questions need two requests of at most 64; the gate makes three.
    With waves the first request's 16 passages already hold 5 evidence passages: the other
    14 are not asked (two requests)."""
    texts = [f"Upload bandwidth note number {i}: the client limits uploads." for i in range(28)]
    texts += [PLANTED, CONFLICT]
    fake.answer_with(judge())
    col = collection_factory(fake, texts, classify={"waves": waves})
    with Retriever(col.settings) as r:
        res = r.retrieve(QUERY, top_k=30)
    assert res.stage("recall").details["candidates"] == 30
    assert len(fake.requests) == res.clef_requests == (2 if waves else 3) <= 4
    check_limits(fake)
    assert PLANTED not in res.to_prompt()
    not_needed = [c for c in res.dropped if c.reason == "not_needed"]
    assert len(not_needed) == (14 if waves else 0)
    assert res.stage("classify").details["passages"] == (16 if waves else 30)


def test_gate_abstains_and_answer_calls_no_llm(
    fake: FakeServer, collection_factory: Any, chat: Any
) -> None:
    fake.answer_with(judge(gate_p=0.1))
    col = collection_factory(fake, answer={"base_url": chat.base_url + "/v1", "model": "m"})
    with Retriever(col.settings) as r:
        reply = r.answer(QUERY)
    assert reply.abstained and not reply.llm_called
    assert reply.text == "Not in the documents."
    assert reply.retrieval.abstain and "gate 0.10" in (reply.retrieval.reason or "")
    assert reply.retrieval.to_prompt() == ""
    assert chat.requests == []


FAILURES = {
    "429 storm": [Reply(status=429, headers={"retry-after": "0"})] * 12,
    "5xx": [Reply(status=503)] * 12,
    "timeout": [Reply(delay_s=1.5)] * 12,
    "malformed": [Reply(raw=b"{not json")] * 12,
    "partial": [Reply(partial=True)] * 12,
    "no answers": [Reply(body={"model": "clef", "answers": {}, "usage": {"input_tokens": 9}})] * 12,
    "auth refused": [Reply(status=401)] * 12,
}


@pytest.mark.parametrize("kind", list(FAILURES))
def test_every_clef_failure_degrades_to_vector_order(
    fake: FakeServer, collection_factory: Any, kind: str
) -> None:
    fake.answer_with(judge(gate_p=0.0))  # would abstain, if Clef were ever believed
    col = collection_factory(fake)
    without_clef = col.settings.model_copy(update={"clef": col.settings.clef.model_copy()})
    without_clef.clef.backend = "off"
    with Retriever(without_clef) as r:
        vector = r.retrieve(QUERY)
    fake.script(*FAILURES[kind])
    with Retriever(col.settings) as r:
        res = r.retrieve(QUERY)
    assert res.degraded and not res.abstain, res.degraded_reasons
    # Vector order, less what the offline guard drops: the collection was not screened at
    # ingest, so with Clef off (and where Clef failed) the guard judges the passages shown.
    shown = [c.id for c in res.passages]
    assert shown and shown == [c.id for c in vector.passages if c.id in shown]
    assert [c.rank for c in res.passages] == sorted(c.rank for c in res.passages)
    for result in (vector, res):
        assert PLANTED not in " ".join(c.text for c in result.passages)
        assert [c.decided_by for c in result.dropped if c.text == PLANTED] == ["guard"]
    assert res.stage("gate").skipped  # a degraded result is never gated into abstaining


def test_gate_failure_alone_degrades_never_abstains(
    fake: FakeServer, collection_factory: Any
) -> None:
    fake.answer_with(judge(gate_p=0.0))
    col = collection_factory(fake)
    with Retriever(col.settings) as r:
        fake.script(Reply(), *[Reply(status=500)] * 3)  # classify answers, the gate fails
        res = r.retrieve(QUERY)
    assert res.degraded and not res.abstain
    assert "gate failed" in res.degraded_reasons[0]


def test_shadow_mode_changes_no_result(fake: FakeServer, collection_factory: Any) -> None:
    fake.answer_with(judge(gate_p=0.05))
    col = collection_factory(fake, classify={"mode": "off"}, gate={"mode": "off"})
    with Retriever(col.settings) as r:
        off = r.retrieve(QUERY)
    assert fake.requests == []
    col.settings.retrieval.classify.mode = "shadow"
    col.settings.retrieval.gate.mode = "shadow"
    with Retriever(col.settings) as r:
        shadow = r.retrieve(QUERY)
    assert [c.id for c in shadow.passages] == [c.id for c in off.passages]
    assert shadow.conflicts == [] and not shadow.abstain and not shadow.degraded
    assert len(fake.requests) == 2  # it did ask ...
    would = shadow.stage("select").details["shadow"]
    assert would["drop"][col.id_of(PLANTED)] == "instructs_ai"  # ... and recorded
    assert shadow.stage("gate").details["would_abstain"] is True


def test_packed_answers_land_on_their_passage_when_the_server_shuffles(
    collection_factory: Any,
) -> None:
    rng = random.Random(3)

    class Shuffling(FakeServer):
        def _answer(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
            out = super()._answer(reply, body)
            items = list(out["answers"].items())
            rng.shuffle(items)
            out["answers"] = dict(items)
            return out

    texts = list(PASSAGES)
    rng.shuffle(texts)
    with Shuffling(token="test-key", answerer=judge()) as fake:
        col = collection_factory(fake, texts, classify={"passages_per_request": 3})
        with Retriever(col.settings) as r:
            res = r.retrieve(QUERY)
        assert len(fake.requests) == 5  # 10 passages, 3 a request, then the gate
    for c in [*res.passages, *res.conflicts, *res.dropped]:
        assert c.scores["instructs_ai"] == (0.97 if c.text == PLANTED else 0.02)
        assert c.scores["is_relevant"] == (0.9 if "bandwidth" in c.text else 0.1)
    assert [c.text for c in res.conflicts] == [CONFLICT]


def test_inline_layout_and_one_passage_per_request(
    fake: FakeServer, collection_factory: Any
) -> None:
    fake.answer_with(judge())
    col = collection_factory(fake, classify={"layout": "inline", "packed": False})
    with Retriever(col.settings) as r:
        res = r.retrieve(QUERY)
    assert len(fake.requests) == len(PASSAGES) + 1
    classify = [b for b in fake.requests if "answerable" not in b["questions"]]
    assert all(set(b["state"]) == {"query"} for b in classify)
    assert PLANTED not in res.to_prompt()


def test_screened_collection_is_not_asked_instructs_ai(
    fake: FakeServer, collection_factory: Any
) -> None:
    fake.answer_with(judge())
    col = collection_factory(fake)
    manifest = col.store.get_manifest(col.name)
    col.store.put_manifest(col.name, {**manifest, "steering": {"screened": True}})
    with Retriever(col.settings) as r:
        res = r.retrieve(QUERY)
    asked = {q.rsplit(".", 1)[-1] for b in fake.requests for q in b["questions"]}
    assert "instructs_ai" not in asked
    assert res.stage("classify").details["questions"] == 3 * len(PASSAGES)


def test_duplicates_and_budget(fake: FakeServer, collection_factory: Any) -> None:
    fake.answer_with(judge())
    texts = [*PASSAGES, PASSAGES[0].upper()]  # the same passage, shouting
    col = collection_factory(fake, texts, compact={"token_budget": 40})
    with Retriever(col.settings) as r:
        res = r.retrieve(QUERY)
    reasons = {c.id: c.reason for c in res.dropped}
    assert "duplicate" in reasons.values()
    assert sum(c.tokens for c in [*res.passages, *res.conflicts]) <= 40
    assert res.tokens.after <= 40 < res.tokens.before
    assert 0 < res.tokens.saved_fraction < 1
    assert "over_budget" in reasons.values()
    # The passages sent (subject keys s1, s2 ...; the query and shared wording are not).
    sent = [
        v
        for b in fake.requests
        if "answerable" not in b["questions"]
        for k, v in b["state"].items()
        if k[:1] == "s" and k[1:].isdigit()
    ]
    # Neither the duplicate nor a passage the budget cannot hold alone was asked about.
    assert sum(1 for v in sent if v.casefold() == PASSAGES[0].casefold()) == 1
    assert res.stage("classify").details["passages"] == len(sent)


def test_async_twins_share_one_warm_retriever(fake: FakeServer, collection_factory: Any) -> None:
    fake.answer_with(judge())
    col = collection_factory(fake)

    async def main() -> list[Any]:
        async with Retriever(col.settings) as r:
            return await asyncio.gather(*(r.aretrieve(QUERY) for _ in range(3)))

    results = asyncio.run(main())
    assert all(not r.degraded for r in results)
    assert len({tuple(c.id for c in r.passages) for r in results}) == 1


def test_warm_asks_clef_nothing_and_changes_no_result(
    fake: FakeServer, collection_factory: Any
) -> None:
    fake.answer_with(judge())
    col = collection_factory(fake)
    with Retriever(col.settings) as r:
        cold = r.retrieve(QUERY)
    asked = len(fake.requests)
    with Retriever(col.settings) as r:
        assert r.warm() is r  # imports the query path's modules (by name) and collects
        assert len(fake.requests) == asked
        warm = r.retrieve(QUERY)
    assert [c.id for c in warm.passages] == [c.id for c in cold.passages]
    assert warm.gate_p == cold.gate_p and warm.clef_requests == cold.clef_requests


def test_clef_off_is_vector_order_and_degraded(collection_factory: Any) -> None:
    col = collection_factory(None)
    with Retriever(col.settings) as r:
        res = r.retrieve(QUERY)
    assert res.degraded and "Clef is off" in res.degraded_reasons[0]
    # Vector order, less the planted passage: the collection was not screened at ingest, so
    # the offline guard judges what Clef cannot.
    ranks = [c.rank for c in res.passages]
    assert len(ranks) == 5 and ranks == sorted(ranks)
    (planted,) = [c for c in res.dropped if c.text == PLANTED]
    assert planted.reason == "instructs_ai" and planted.decided_by == "guard"
    assert res.clef_requests == 0
