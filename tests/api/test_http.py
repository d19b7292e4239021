"""The HTTP API over a real uvicorn server on loopback: the Python API's shapes and
guarantees, auth, limits, and errors that name the field."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest

from tests.api.conftest import QUARANTINED, add_quarantined
from tests.clef.fake_server import FakeServer, Reply
from tests.retrieval.conftest import CONFLICT, PASSAGES, PLANTED, QUERY, judge


def post(api: Any, path: str, body: Any, **kw: Any) -> httpx.Response:
    return httpx.post(f"{api.base_url}{path}", json=body, timeout=30, **kw)


def test_retrieve_is_steered_cited_and_never_returns_quarantined_text(
    fake: FakeServer, collection_factory: Any, api_factory: Any
) -> None:
    fake.answer_with(judge(gate_p=0.9))
    col = collection_factory(fake)
    add_quarantined(col)
    api = api_factory(col)
    r = post(api, "/v1/retrieve", {"query": QUERY, "collection": col.name})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["query"] == QUERY and body["collection"] == col.name
    texts = [p["text"] for p in body["passages"]]
    assert texts[0] == PASSAGES[0]
    assert all(p["citation"] and p["n"] >= 1 for p in body["passages"])
    assert PLANTED not in texts and CONFLICT in [c["text"] for c in body["conflicts"]]
    assert {"id": col.id_of(PLANTED), "reason": "instructs_ai"} in [
        {"id": d["id"], "reason": d["reason"]} for d in body["dropped"]
    ]
    assert QUARANTINED not in r.text
    # Asking for quarantined records through the filter still finds none.
    r = post(api, "/v1/retrieve", {"query": QUERY, "where": {"quarantined": True}})
    assert r.status_code == 200 and QUARANTINED not in r.text
    assert r.json()["passages"] == []


def test_one_warm_retriever_per_collection(collection_factory: Any, api_factory: Any) -> None:
    col = collection_factory(None)
    api = api_factory(col)
    for _ in range(3):
        r = post(api, "/v1/retrieve", {"query": QUERY})
        assert r.status_code == 200, r.text
        assert r.json()["degraded"] is True  # Clef is off: vector order, never abstains
    assert list(api.service._retrievers) == [col.name]
    retriever = api.service.retriever(col.name)
    assert retriever.embedder is api.service.embedder and retriever.store is api.service.store
    r = httpx.get(f"{api.base_url}/v1/collections")
    # The in-process memory store is shared by the whole test process: find ours.
    (described,) = [c for c in r.json()["collections"] if c["name"] == col.name]
    assert described["default"] and described["records"] == len(PASSAGES)


def test_clef_failures_degrade_instead_of_failing(
    fake: FakeServer, collection_factory: Any, api_factory: Any
) -> None:
    col = collection_factory(fake)
    fake.script(*[Reply(status=503) for _ in range(40)])
    api = api_factory(col)
    r = post(api, "/v1/retrieve", {"query": QUERY})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["degraded"] and not body["abstain"] and body["passages"]


def test_bearer_auth(collection_factory: Any, api_factory: Any) -> None:
    api = api_factory(collection_factory(None), api_key="s3cret")
    assert post(api, "/v1/retrieve", {"query": QUERY}).status_code == 401
    wrong = {"authorization": "Bearer nope"}
    assert post(api, "/v1/retrieve", {"query": QUERY}, headers=wrong).status_code == 401
    for scheme in ("Bearer", "bearer"):
        ok = {"authorization": f"{scheme} s3cret"}
        assert post(api, "/v1/retrieve", {"query": QUERY}, headers=ok).status_code == 200
    # Health and the OpenAPI document need no key and reveal nothing about the deployment.
    assert httpx.get(f"{api.base_url}/health").json() == {"status": "ok"}
    assert httpx.get(f"{api.base_url}/openapi.json").status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({}, 422, "query"),
        ({"query": "   "}, 422, "query"),
        ({"query": QUERY, "top_k": 0}, 422, "top_k"),
        ({"query": QUERY, "colection": "x"}, 422, "colection"),
        ({"query": QUERY, "collection": "nope"}, 404, "collection"),
        ({"query": QUERY, "where": {"source": {"like": "x"}}}, 422, "where"),
        (["not", "an", "object"], 422, "body"),
    ],
)
def test_errors_name_the_field(
    collection_factory: Any, api_factory: Any, body: Any, status: int, field: str
) -> None:
    api = api_factory(collection_factory(None))
    r = post(api, "/v1/retrieve", body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["field"] == field and err["message"]


def test_bad_json_size_limit_unknown_path_and_timeout(
    fake: FakeServer, collection_factory: Any, api_factory: Any
) -> None:
    col = collection_factory(fake)
    api = api_factory(col, max_body_bytes=4096, request_timeout_s=0.3)
    as_json = {"content-type": "application/json"}
    r = httpx.post(f"{api.base_url}/v1/retrieve", content=b"{nope", headers=as_json, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["field"] == "body"
    r = httpx.post(
        f"{api.base_url}/v1/retrieve", content=b"[" * 200_000 + b"]" * 200_000, headers=as_json
    )
    assert r.status_code == 413
    deep = "[" * 1800 + "]" * 1800  # deeper than the JSON parser recurses, within the limit
    r = httpx.post(
        f"{api.base_url}/v1/retrieve", content=deep.encode(), headers=as_json, timeout=10
    )
    assert r.status_code in (400, 422), r.text
    r = post(api, "/v1/compact", {"query": QUERY, "passages": ["x" * 5000]})
    assert r.status_code == 413
    r = httpx.get(f"{api.base_url}/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    r = httpx.get(f"{api.base_url}/v1/retrieve")
    assert r.status_code == 405
    # A slow Clef degrades the answer within the request's deadline (issue 54) ...
    fake.script(Reply(delay_s=2.0))
    r = post(api, "/v1/retrieve", {"query": QUERY})
    assert r.status_code == 200 and r.json()["degraded"], r.text
    # ... while a request still running at the deadline (here: its body) is a 504.
    with socket.create_connection(("127.0.0.1", api.served.port)) as sock:
        sock.sendall(
            b"POST /v1/retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        sock.settimeout(30)
        assert sock.recv(65536).startswith(b"HTTP/1.1 504")


def test_compact_endpoint_drops_injections_with_reasons(
    fake: FakeServer, collection_factory: Any, api_factory: Any
) -> None:
    fake.answer_with(judge())
    api = api_factory(collection_factory(fake))
    passages = [PASSAGES[0], {"text": PLANTED, "id": "planted"}, PASSAGES[5]]
    r = post(api, "/v1/compact", {"query": QUERY, "passages": passages, "token_budget": 200})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [p["text"] for p in body["passages"]] == [PASSAGES[0]]
    reasons = {d["id"]: d["reason"] for d in body["dropped"]}
    assert reasons["planted"] == "instructs_ai" and reasons["3"] == "irrelevant"
    assert body["tokens"]["before"] > body["tokens"]["after"] > 0


def test_answer_endpoint_and_abstention_calls_no_llm(
    fake: FakeServer, collection_factory: Any, api_factory: Any, chat: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("LLM_KEY", "sk-test")
    col = collection_factory(
        fake, answer={"base_url": chat.base_url + "/v1", "model": "m", "api_key_env": "LLM_KEY"}
    )
    api = api_factory(col)
    fake.answer_with(judge(gate_p=0.9))
    r = post(api, "/v1/answer", {"query": QUERY})
    assert r.status_code == 200, r.text
    assert r.json()["llm_called"] and r.json()["answer"] == chat.reply
    fake.answer_with(judge(gate_p=0.05))
    r = post(api, "/v1/answer", {"query": QUERY + " today"})
    assert r.status_code == 200 and r.json()["abstained"] and not r.json()["llm_called"]
    assert len(chat.requests) == 1


def test_openapi_document_lists_every_body(collection_factory: Any, api_factory: Any) -> None:
    api = api_factory(collection_factory(None))
    doc = httpx.get(f"{api.base_url}/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    assert {"/v1/retrieve", "/v1/answer", "/v1/compact", "/v1/chat/completions"} <= set(
        doc["paths"]
    )
    schemas = doc["components"]["schemas"]
    assert schemas["RetrieveRequest"]["required"] == ["query"]
    json.dumps(doc)  # serialisable as served


@pytest.mark.parametrize(
    ("mode", "kind"), [("vector", "vector_similarity"), ("hybrid", "fused_zscore")]
)
def test_recall_scores_say_what_they_hold(
    collection_factory: Any, api_factory: Any, mode: str, kind: str
) -> None:
    """A hybrid recall's fused score is not a similarity in [0, 1]: its name says so, and the
    old `vector_score` field still holds the same value."""
    api = api_factory(collection_factory(None, mode=mode))
    r = post(api, "/v1/retrieve", {"query": QUERY})
    assert r.status_code == 200, r.text
    passages = r.json()["passages"]
    assert passages and {p["recall_score_kind"] for p in passages} == {kind}
    assert all(p["recall_score"] == p["vector_score"] for p in passages)
    if mode == "vector":
        assert all(0.0 <= p["recall_score"] <= 1.0 for p in passages)
