"""Issue 54 (Medium 10, Low): every refusal of the HTTP API is the API's own JSON error shape
with the status that fits, never a plain-text 500 or pydantic's raw text."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.retrieval.conftest import PASSAGES, QUERY


def post_raw(api: Any, path: str, body: str) -> httpx.Response:
    headers = {"content-type": "application/json"}
    return httpx.post(f"{api.base_url}{path}", content=body, headers=headers, timeout=30)


def assert_api_error(r: httpx.Response, status: int, field: str | None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json", r.text
    err = r.json()["error"]
    assert set(err) <= {"type", "message", "field"} and err["message"]
    assert err.get("field") == field
    # The API's words, not pydantic's: no error URLs, no "validation error for <Model>".
    assert "pydantic" not in err["message"] and "validation error" not in err["message"]
    return err


@pytest.mark.parametrize("score", ["1e999", "-1e999", '"NaN"', '"inf"', '"0.5"'])
def test_compact_refuses_a_non_finite_score_with_a_json_422(
    collection_factory: Any, api_factory: Any, score: str
) -> None:
    api = api_factory(collection_factory(None))
    body = f'{{"query": "{QUERY}", "passages": [{{"text": "{PASSAGES[0]}", "score": {score}}}]}}'
    assert_api_error(post_raw(api, "/v1/compact", body), 422, "passages.0.score")
    chat = (
        f'{{"messages": [{{"role": "user", "content": "{QUERY}"}}], '
        f'"context": [{{"text": "{PASSAGES[0]}", "score": {score}}}]}}'
    )
    assert_api_error(post_raw(api, "/v1/chat/completions", chat), 422, "context.0.score")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (f'{{"query": "{QUERY}", "top_k": "5"}}', "top_k"),
        (f'{{"query": "{QUERY}", "top_k": true}}', "top_k"),
        (f'{{"query": "{QUERY}", "top_k": 5.0}}', "top_k"),
        (f'{{"query": "{QUERY}", "collection": ""}}', "collection"),
    ],
)
def test_numbers_are_strict_and_an_empty_collection_is_not_the_default(
    collection_factory: Any, api_factory: Any, body: str, field: str
) -> None:
    api = api_factory(collection_factory(None))
    assert_api_error(post_raw(api, "/v1/retrieve", body), 422, field)


def test_compact_flags_are_strict(collection_factory: Any, api_factory: Any) -> None:
    api = api_factory(collection_factory(None))
    for extra, field in [('"token_budget": "100"', "token_budget"), ('"gate": "yes"', "gate")]:
        body = f'{{"query": "{QUERY}", "passages": ["{PASSAGES[0]}"], {extra}}}'
        assert_api_error(post_raw(api, "/v1/compact", body), 422, field)


def test_answer_without_a_model_says_so(collection_factory: Any, api_factory: Any) -> None:
    api = api_factory(collection_factory(None))  # retrieval.answer.model is not set
    r = httpx.post(f"{api.base_url}/v1/answer", json={"query": QUERY}, timeout=30)
    err = assert_api_error(r, 501, None)
    assert err["type"] == "not_configured"
    assert "retrieval.answer.model is not set" in err["message"]


def test_a_collection_dropped_under_the_api_is_a_404(
    collection_factory: Any, api_factory: Any
) -> None:
    col = collection_factory(None)
    api = api_factory(col)
    body = {"query": QUERY, "collection": col.name, "where": {"doc_id": "d0"}}
    r = httpx.post(f"{api.base_url}/v1/retrieve", json=body, timeout=30)
    assert r.status_code == 200, r.text  # the retriever is warm now
    col.store.drop(col.name)
    for where in ({"doc_id": "d0"}, None):
        r = httpx.post(f"{api.base_url}/v1/retrieve", json={**body, "where": where}, timeout=30)
        err = assert_api_error(r, 404, "collection")
        assert col.name in err["message"]
