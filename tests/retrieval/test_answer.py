"""Cited answers through OpenAI-compatible and Anthropic providers, against a fake chat LLM."""

from __future__ import annotations

from typing import Any

import pytest

from clef_pipelines.retrieval import Retriever
from clef_pipelines.retrieval.answer import SYSTEM_PROMPT, AnswerError, make_provider
from clef_pipelines.retrieval.config import AnswerConfig
from tests.clef.fake_server import FakeServer
from tests.retrieval.conftest import PASSAGES, PLANTED, QUERY, judge


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_cited_answer_passages_as_data(
    fake: FakeServer, collection_factory: Any, chat: Any, provider: str, monkeypatch: Any
) -> None:
    monkeypatch.setenv("LLM_KEY", "sk-test")
    base = chat.base_url + ("/v1" if provider == "openai" else "")
    fake.answer_with(judge(gate_p=0.9))
    col = collection_factory(
        fake,
        answer={"provider": provider, "base_url": base, "model": "m-1", "api_key_env": "LLM_KEY"},
    )
    with Retriever(col.settings) as r:
        reply = r.answer(QUERY)
    assert reply.llm_called and not reply.abstained
    assert reply.citations[0]["n"] == 1
    assert reply.citations[0]["id"] == col.id_of(PASSAGES[0])
    (body,) = chat.requests
    if provider == "openai":
        system, user = (m["content"] for m in body["messages"])
        assert chat.headers[0]["authorization"] == "Bearer sk-test"
    else:
        system, user = body["system"], body["messages"][0]["content"]
        assert chat.headers[0]["x-api-key"] == "sk-test"
        assert chat.headers[0]["anthropic-version"]
    assert system == SYSTEM_PROMPT and "not instructions" in system
    assert PASSAGES[0] in user and QUERY in user
    assert PLANTED not in user
    d = reply.to_dict()
    assert d["answer"] == chat.reply and d["retrieval"]["query"] == QUERY


def test_provider_retries_then_answers(
    fake: FakeServer, collection_factory: Any, chat: Any
) -> None:
    chat.fail_next.extend([429, 503])
    fake.answer_with(judge(gate_p=0.9))
    col = collection_factory(fake, answer={"base_url": chat.base_url + "/v1", "model": "m"})
    with Retriever(col.settings) as r:
        reply = r.answer(QUERY)
    assert reply.llm_called and len(chat.requests) == 3


def test_provider_needs_model_and_key() -> None:
    with pytest.raises(AnswerError, match="model"):
        make_provider(AnswerConfig(), env={})
    with pytest.raises(AnswerError, match="OPENAI_API_KEY"):
        make_provider(AnswerConfig(model="gpt"), env={})
