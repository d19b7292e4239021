"""The OpenAI-compatible compaction endpoint, driven by the official `openai` client."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.clef.fake_server import FakeServer
from tests.retrieval.conftest import PASSAGES, PLANTED, QUERY, judge


def client_for(api: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{api.base_url}/v1", api_key="k", max_retries=0, timeout=30)


def test_context_in_the_extension_field(
    fake: FakeServer, collection_factory: Any, api_factory: Any
) -> None:
    fake.answer_with(judge())
    api = api_factory(collection_factory(fake))
    completion = client_for(api).chat.completions.create(
        model="clef-compact",
        messages=[{"role": "user", "content": QUERY}],
        extra_body={"context": [PASSAGES[0], PLANTED, PASSAGES[3], PASSAGES[6]]},
    )
    content = completion.choices[0].message.content or ""
    assert completion.choices[0].message.role == "assistant"
    assert PASSAGES[0] in content and PLANTED not in content and PASSAGES[6] not in content
    usage = completion.usage
    assert usage is not None and usage.prompt_tokens > usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    extra = completion.model_extra or {}
    reasons = {d["id"]: d["reason"] for d in extra["clef"]["dropped"]}
    assert reasons["2"] == "instructs_ai" and reasons["4"] == "irrelevant"
    assert completion.model == "clef-compact"


def test_context_as_non_user_messages(
    fake: FakeServer, collection_factory: Any, api_factory: Any
) -> None:
    fake.answer_with(judge())
    api = api_factory(collection_factory(fake))
    completion = client_for(api).chat.completions.create(
        model="any",
        messages=[
            {"role": "system", "content": PASSAGES[0]},
            {"role": "system", "content": PLANTED},
            {"role": "user", "content": [{"type": "text", "text": QUERY}]},
        ],
    )
    content = completion.choices[0].message.content or ""
    assert PASSAGES[0] in content and PLANTED not in content
    dropped = (completion.model_extra or {})["clef"]["dropped"]
    assert dropped == [{"id": "m1", "reason": "instructs_ai"}]


def test_refusals_name_the_field(collection_factory: Any, api_factory: Any) -> None:
    client = client_for(api_factory(collection_factory(None)))
    with pytest.raises(openai.UnprocessableEntityError) as err:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": QUERY}], stream=True
        )
    assert "stream" in str(err.value)
    with pytest.raises(openai.UnprocessableEntityError) as err:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUERY}])
    assert "context" in str(err.value) or "messages" in str(err.value)
    with pytest.raises(openai.UnprocessableEntityError) as err:
        client.chat.completions.create(model="m", messages=[{"role": "system", "content": "x"}])
    assert "user message" in str(err.value)
