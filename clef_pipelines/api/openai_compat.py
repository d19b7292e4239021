"""The OpenAI-compatible compaction endpoint: `POST /v1/chat/completions` and `GET /v1/models`.

An LLM client points its base URL here (any OpenAI SDK works) and sends the chat it was about
to send. The question is the last user message. The caller's system prompt (the first
message, when its role is `system` or `developer`) is a prompt, not context: it is never
compacted, dropped or counted as context. The context chunks are the extension field `context`
(a list of strings or `{"text", "id"?, ...}`), or, without it, every other message that is not
from the user (later system or developer messages, assistant and tool messages: where RAG
frameworks put retrieved documents). Nothing is generated: the assistant message is the
compacted context, ready to forward to the real LLM, and

- `usage` means what OpenAI's does: `prompt_tokens` the tokens of the request's messages and
  context, `completion_tokens` those of the returned message, `total_tokens` their sum (what
  a cost dashboard reads);
- `clef_pipelines` (an extension object) holds the compaction's own figures, named for what
  they are (`context_tokens_before`, `context_tokens_after`, `context_token_budget`,
  `context_saved_fraction`), what was kept and what was dropped and why (`decided_by` for
  planted instructions), who screened for planted instructions (`instruction_screen`), and
  `messages`: the chat to forward, with the caller's system prompt first, the compacted
  context as a system message after it, and the rest of the conversation;
- `clef` (deprecated, kept for older clients) repeats `kept`, `dropped` and the verdict.

`stream=True` answers with server-sent events as OpenAI sends them: `chat.completion.chunk`
objects (a role delta, the content in pieces, a final chunk with `finish_reason` and the
`clef_pipelines` object; with `stream_options.include_usage`, a last chunk holding `usage`),
then `data: [DONE]`. The content streamed is the same as the non-stream call's.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from clef_pipelines.api.models import ChatCompletionRequest, ChatMessage
from clef_pipelines.retrieval.result import RetrievalResult

#: The model name `GET /v1/models` lists. The chat endpoint accepts any name and echoes it.
COMPACT_MODEL = "clef-compact"
#: Listed as the model's creation time: a fixed date, so the list does not change per call.
_MODEL_CREATED = 1_735_689_600  # 2025-01-01
#: Roles a caller's own system prompt comes in.
PROMPT_ROLES = ("system", "developer")


class ChatRequestError(ValueError):
    """A chat body this endpoint cannot serve; `field` names the part at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass
class ChatParts:
    """A chat body read for compaction."""

    query: str
    passages: list[Any]
    #: The caller's system prompt, kept as a prompt (None: the chat has none).
    system_prompt: ChatMessage | None = None
    #: The messages that are not context, in order (the system prompt first when there is
    #: one): what is forwarded around the compacted context.
    conversation: list[ChatMessage] = field(default_factory=list)


def chat_request_parts(req: ChatCompletionRequest) -> ChatParts:
    """The question, the context chunks and the messages that are not context."""
    users = [i for i, m in enumerate(req.messages) if m.role == "user"]
    if not users:
        raise ChatRequestError("needs a user message holding the question", "messages")
    last = users[-1]
    query = req.messages[last].text().strip()
    if not query:
        raise ChatRequestError("the last user message is empty", f"messages.{last}.content")
    first = req.messages[0]
    system_prompt = first if first.role in PROMPT_ROLES else None
    if req.context is not None:
        passages = [
            p if isinstance(p, str) else p.model_dump(exclude_none=True) for p in req.context
        ]
        context_at: set[int] = set()
        where = "context"
    else:
        context_at = {
            i
            for i, m in enumerate(req.messages)
            if m.role != "user" and not (i == 0 and system_prompt is not None)
        }
        passages = [
            {"id": f"m{i}", "text": req.messages[i].text(), "role": req.messages[i].role}
            for i in sorted(context_at)
            if req.messages[i].text().strip()
        ]
        where = "messages"
    if not passages:
        raise ChatRequestError(
            "no context chunks: send them in `context`, or as messages after the system prompt "
            "(the first system message is the caller's prompt, never compacted)",
            where,
        )
    conversation = [m for i, m in enumerate(req.messages) if i not in context_at]
    return ChatParts(query, passages, system_prompt, conversation)


def _request_tokens(req: ChatCompletionRequest) -> int:
    """Tokens of what the caller sent: every message and every context chunk."""
    from clef_pipelines.chunking.tokens import count_tokens_batch

    texts = [m.text() for m in req.messages]
    texts += [p if isinstance(p, str) else p.text for p in req.context or []]
    return sum(count_tokens_batch([t for t in texts if t]))


def _forwarded(parts: ChatParts, context: str) -> list[dict[str, Any]]:
    """The chat to send to the real LLM: the caller's system prompt, the compacted context as
    a system message, then the rest of the conversation."""
    out = [m.model_dump(exclude_none=True) for m in parts.conversation]
    if context:
        at = 1 if parts.system_prompt is not None else 0
        out.insert(at, {"role": "system", "content": context})
    return out


def chat_completion(
    req: ChatCompletionRequest, parts: ChatParts, result: RetrievalResult, *, completion_id: str
) -> dict[str, Any]:
    """The OpenAI `chat.completion` object for a compaction result."""
    from clef_pipelines.chunking.tokens import count_tokens

    tokens = result.tokens
    content = result.to_prompt()
    prompt_tokens = _request_tokens(req)
    completion_tokens = count_tokens(content) if content else 0
    kept = [{"n": n, "id": c.id, "citation": c.citation} for n, c in result.numbered]
    dropped = [
        {k: v for k, v in (("id", c.id), ("reason", c.reason), ("decided_by", c.decided_by)) if v}
        for c in result.dropped
    ]
    verdict = {
        "abstain": result.abstain,
        "degraded": result.degraded,
        "degraded_reasons": list(result.degraded_reasons),
        "clef_requests": result.clef_requests,
        "clef_input_tokens": result.clef_input_tokens,
        "cost_usd": round(result.cost_usd, 8),
    }
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        "clef_pipelines": {
            "context_tokens_before": tokens.before,
            "context_tokens_after": tokens.after,
            "context_token_budget": tokens.budget,
            "context_saved_fraction": tokens.saved_fraction,
            "system_prompt_kept": parts.system_prompt is not None,
            "kept": kept,
            "dropped": dropped,
            "instruction_screen": result.instruction_screen,
            **verdict,
            "messages": _forwarded(parts, content),
        },
        "clef": {"kept": kept, "dropped": dropped, **verdict},
    }


def _pieces(content: str) -> list[str]:
    """The content in the pieces it is streamed in (a block each): joined, the same text."""
    return [p for p in re.split(r"(?<=\n\n)", content) if p]


def completion_chunks(
    completion: dict[str, Any], *, include_usage: bool
) -> Iterator[dict[str, Any]]:
    """A `chat.completion` as the `chat.completion.chunk` objects OpenAI streams."""
    base = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion["created"],
        "model": completion["model"],
        "system_fingerprint": None,
    }
    choice = completion["choices"][0]

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        out = {
            **base,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            **extra,
        }
        if include_usage:
            out["usage"] = None  # as OpenAI: only the last chunk carries it
        return out

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(choice["message"]["content"]):
        yield chunk({"content": piece})
    yield chunk({}, choice["finish_reason"], clef_pipelines=completion["clef_pipelines"])
    if include_usage:
        yield {**base, "choices": [], "usage": completion["usage"]}


def server_sent_events(chunks: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    """`data: {json}` events, then `data: [DONE]`, as OpenAI ends a stream."""
    for c in chunks:
        yield f"data: {json.dumps(c, separators=(',', ':'), allow_nan=False)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def model_object(name: str = COMPACT_MODEL) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": _MODEL_CREATED, "owned_by": "clef-pipelines"}


def models_list() -> dict[str, Any]:
    """`GET /v1/models`, in OpenAI's list shape."""
    return {"object": "list", "data": [model_object()]}
