"""The OpenAI-compatible compaction endpoint: `POST /v1/chat/completions`.

An LLM client points its base URL here (any OpenAI SDK works) and sends the chat it was about
to send. The question is the last user message; the context chunks are the extension field
`context` (a list of strings or `{"text", "id"?, ...}`), or, without it, every message that is
not from the user (system, developer, assistant and tool messages: where RAG frameworks put
retrieved documents). Nothing is generated: the assistant message is the compacted context,
ready to forward to the real LLM, and

- `usage.prompt_tokens` / `usage.completion_tokens` are the context tokens before / after
  (`tokens_before`, `tokens_after` and `saved_fraction` say the same by name);
- `clef` (an extension field) lists what was kept and what was dropped, and why.
"""

from __future__ import annotations

import time
from typing import Any

from clef_pipelines.api.models import ChatCompletionRequest
from clef_pipelines.retrieval.result import RetrievalResult


class ChatRequestError(ValueError):
    """A chat body this endpoint cannot serve; `field` names the part at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def chat_request_parts(req: ChatCompletionRequest) -> tuple[str, list[Any]]:
    """(query, passages) of a chat body."""
    if req.stream:
        raise ChatRequestError("streaming is not supported: the answer is one message", "stream")
    users = [i for i, m in enumerate(req.messages) if m.role == "user"]
    if not users:
        raise ChatRequestError("needs a user message holding the question", "messages")
    last = users[-1]
    query = req.messages[last].text().strip()
    if not query:
        raise ChatRequestError("the last user message is empty", f"messages.{last}.content")
    if req.context is not None:
        passages = [
            p if isinstance(p, str) else p.model_dump(exclude_none=True) for p in req.context
        ]
        field = "context"
    else:
        passages = [
            {"id": f"m{i}", "text": m.text(), "role": m.role}
            for i, m in enumerate(req.messages)
            if m.role != "user" and m.text().strip()
        ]
        field = "messages"
    if not passages:
        raise ChatRequestError(
            "no context chunks: send them in `context` or as non-user messages", field
        )
    return query, passages


def chat_completion(
    req: ChatCompletionRequest, result: RetrievalResult, *, completion_id: str
) -> dict[str, Any]:
    """The OpenAI `chat.completion` object for a compaction result."""
    tokens = result.tokens
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.to_prompt()},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": tokens.before,
            "completion_tokens": tokens.after,
            "total_tokens": tokens.before + tokens.after,
            "tokens_before": tokens.before,
            "tokens_after": tokens.after,
            "saved_fraction": tokens.saved_fraction,
        },
        "clef": {
            "kept": [{"n": n, "id": c.id, "citation": c.citation} for n, c in result.numbered],
            "dropped": [{"id": c.id, "reason": c.reason} for c in result.dropped],
            "abstain": result.abstain,
            "degraded": result.degraded,
            "degraded_reasons": list(result.degraded_reasons),
            "clef_requests": result.clef_requests,
            "clef_input_tokens": result.clef_input_tokens,
            "cost_usd": round(result.cost_usd, 8),
        },
    }
