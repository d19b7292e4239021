"""The HTTP API asks Clef as little as a warm `Retriever` with the same settings: the same
requests per query, counted by the fake System One server on loopback (issue 56)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from bench.fake_systemone import noul_answer  # the benchmarks' answers: a first wave settles
from clef_pipelines.retrieval.retriever import Retriever
from tests.clef.fake_server import FakeServer

QUERIES = [f"How do I limit upload bandwidth on device {i}?" for i in range(6)]
TEXTS = [
    f"Part {i}: upload bandwidth for device {i % 7} is limited under Preferences > Network, "
    f"with a cap in KB/s; note {i} about scheduling and quotas."
    for i in range(24)
]


def counted(fake: FakeServer, ask: Any) -> list[int]:
    """Clef requests per query, as the fake server received them."""
    out = []
    for q in QUERIES:
        before = len(fake.requests)
        ask(q)
        out.append(len(fake.requests) - before)
    return out


@pytest.mark.parametrize("answers", ["spread", "constant"])
def test_the_api_sends_as_many_clef_requests_as_a_warm_retriever(
    answers: str, fake: FakeServer, collection_factory: Any, api_factory: Any
) -> None:
    # Small requests, so that one pass over the candidates needs several and waves matter.
    fake.answer_with(noul_answer if answers == "spread" else None)  # constant: every noul 0.7
    col = collection_factory(
        fake, TEXTS, top_k=24, classify={"passages_per_request": 6}, select={"max_passages": 3}
    )
    with Retriever(col.settings, collection=col.name, store=col.store) as warm:
        warm.retrieve(QUERIES[0])  # warm-up, as the API's first request
        ours = counted(fake, warm.retrieve)

    api = api_factory(col)

    def via_api(q: str) -> None:
        r = httpx.post(
            f"{api.base_url}/v1/retrieve", json={"query": q, "collection": col.name}, timeout=30
        )
        assert r.status_code == 200, r.text
        assert not r.json()["degraded"]

    via_api(QUERIES[0])
    theirs = counted(fake, via_api)
    assert theirs == ours
    if answers == "spread":
        # The first wave (one request) settles each query: classification and the gate.
        assert ours == [2] * len(QUERIES)
    else:
        # Every passage alike: no first wave settles, so `waves: auto` asks everything at
        # once, in more requests: the API's "3 a query" of issue 56 came from its
        # benchmark's fake answering so, and a warm Retriever does the same.
        assert min(ours) > 2
