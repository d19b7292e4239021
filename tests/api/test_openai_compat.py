"""The OpenAI-compatible compaction endpoint, driven by the official `openai` client."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.clef.fake_server import FakeServer
from tests.retrieval.conftest import PASSAGES, PLANTED, QUERY, judge

SYSTEM_PROMPT = "You answer questions about the sync client. Be brief and cite passages."


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
    extra = (completion.model_extra or {})["clef_pipelines"]
    reasons = {d["id"]: d["reason"] for d in extra["dropped"]}
    assert reasons["2"] == "instructs_ai" and reasons["4"] == "irrelevant"
    assert extra["context_tokens_before"] > extra["context_tokens_after"] > 0
    assert completion.model == "clef-compact"


def test_context_as_non_user_messages(
    fake: FakeServer, collection_factory: Any, api_factory: Any
) -> None:
    fake.answer_with(judge())
    api = api_factory(collection_factory(fake))
    completion = client_for(api).chat.completions.create(
        model="any",
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "system", "content": PASSAGES[0]},
            {"role": "tool", "content": PLANTED, "tool_call_id": "t1"},
            {"role": "user", "content": [{"type": "text", "text": QUERY}]},
        ],
    )
    content = completion.choices[0].message.content or ""
    assert PASSAGES[0] in content and PLANTED not in content
    extra = (completion.model_extra or {})["clef_pipelines"]
    assert extra["dropped"] == [{"id": "m2", "reason": "instructs_ai", "decided_by": "clef"}]
    assert (completion.model_extra or {})["clef"]["dropped"] == extra["dropped"]  # deprecated


def test_the_callers_system_prompt_is_kept_as_a_prompt(
    fake: FakeServer, collection_factory: Any, api_factory: Any
) -> None:
    """The system prompt is neither context nor compacted: it leads the chat to forward, and
    `usage` counts what was sent and what came back, as OpenAI's does."""
    from clef_pipelines.chunking.tokens import count_tokens

    fake.answer_with(judge())
    api = api_factory(collection_factory(fake))
    context = [PASSAGES[0], PASSAGES[5]]
    completion = client_for(api).chat.completions.create(
        model="clef-compact",
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": QUERY},
        ],
        extra_body={"context": context},
    )
    content = completion.choices[0].message.content or ""
    assert SYSTEM_PROMPT not in content and PASSAGES[0] in content
    extra = (completion.model_extra or {})["clef_pipelines"]
    assert extra["system_prompt_kept"] is True
    assert "m0" not in str(extra["dropped"]) and len(extra["kept"]) == 1
    assert extra["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "system", "content": content},
        {"role": "user", "content": QUERY},
    ]
    usage = completion.usage
    assert usage is not None
    sent = sum(count_tokens(t) for t in [SYSTEM_PROMPT, QUERY, *context])
    assert (usage.prompt_tokens, usage.completion_tokens) == (sent, count_tokens(content))
    assert extra["context_tokens_before"] == sum(count_tokens(t) for t in context)
    assert extra["context_tokens_after"] == count_tokens(PASSAGES[0])


def test_stream_is_server_sent_events_of_the_same_context(
    fake: FakeServer, collection_factory: Any, api_factory: Any
) -> None:
    import httpx

    fake.answer_with(judge())
    api = api_factory(collection_factory(fake))
    client = client_for(api)
    body: dict[str, Any] = {
        "model": "clef-compact",
        "messages": [{"role": "user", "content": QUERY}],
    }
    context = {"context": [PASSAGES[0], PLANTED, PASSAGES[3], PASSAGES[6]]}
    whole = client.chat.completions.create(**body, extra_body=context)
    chunks = list(
        client.chat.completions.create(
            **body, stream=True, stream_options={"include_usage": True}, extra_body=context
        )
    )
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole.choices[0].message.content and PLANTED not in streamed
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "stop" and set(finish[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    ending = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    dropped = (ending[0].model_extra or {})["clef_pipelines"]["dropped"]
    assert {d["id"]: d["reason"] for d in dropped}["2"] == "instructs_ai"

    # On the wire: `data: {json}` events, each ended by a blank line, then `data: [DONE]`.
    raw = httpx.post(
        f"{api.base_url}/v1/chat/completions", json={**body, **context, "stream": True}
    )
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/event-stream")
    events = raw.text.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    assert all(e.startswith("data: {") for e in events[:-2])


def test_models_are_listed_as_openai_lists_them(collection_factory: Any, api_factory: Any) -> None:
    client = client_for(api_factory(collection_factory(None)))
    models = client.models.list()
    assert [m.id for m in models.data] == ["clef-compact"]
    assert models.data[0].object == "model" and models.data[0].owned_by == "clef-pipelines"
    assert client.models.retrieve("clef-compact").id == "clef-compact"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-nothing")


def test_refusals_name_the_field(collection_factory: Any, api_factory: Any) -> None:
    client = client_for(api_factory(collection_factory(None)))
    with pytest.raises(openai.UnprocessableEntityError) as err:  # before any stream starts
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": QUERY}], stream=True
        )
    assert "context" in str(err.value) or "messages" in str(err.value)
    with pytest.raises(openai.UnprocessableEntityError) as err:  # a system prompt is no context
        client.chat.completions.create(
            model="m",
            messages=[
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": QUERY},
            ],
        )
    assert "system prompt" in str(err.value)
    with pytest.raises(openai.UnprocessableEntityError) as err:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUERY}])
    assert "context" in str(err.value) or "messages" in str(err.value)
    with pytest.raises(openai.UnprocessableEntityError) as err:
        client.chat.completions.create(model="m", messages=[{"role": "system", "content": "x"}])
    assert "user message" in str(err.value)
