"""A fake chat LLM on loopback: OpenAI-compatible `POST /v1/chat/completions` and Anthropic
`POST /v1/messages`, recording every request. Replies echo a scripted text (default: a cited
sentence) in each API's own shape; `fail_next` scripts HTTP errors first."""

from __future__ import annotations

from collections import deque
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.clef.conftest import ServedApp


class FakeChat:
    def __init__(self, reply: str = "Set a fixed rate under Preferences > Network [1].") -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.fail_next: deque[int] = deque()
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._openai, methods=["POST"]),
                Route("/v1/messages", self._anthropic, methods=["POST"]),
            ]
        )
        self._served = ServedApp(app)

    @property
    def base_url(self) -> str:
        return self._served.base_url

    def __enter__(self) -> FakeChat:
        self._served.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._served.__exit__(*exc)

    async def _record(self, request: Request) -> JSONResponse | None:
        self.requests.append(await request.json())
        self.headers.append(dict(request.headers))
        if self.fail_next:
            return JSONResponse(
                {"error": "scripted"}, self.fail_next.popleft(), {"retry-after": "0"}
            )
        return None

    async def _openai(self, request: Request) -> JSONResponse:
        failed = await self._record(request)
        if failed is not None:
            return failed
        return JSONResponse(
            {
                "id": "chatcmpl-1",
                "model": self.requests[-1]["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": self.reply}}],
                "usage": {"prompt_tokens": 321, "completion_tokens": 12},
            }
        )

    async def _anthropic(self, request: Request) -> JSONResponse:
        failed = await self._record(request)
        if failed is not None:
            return failed
        return JSONResponse(
            {
                "id": "msg_1",
                "type": "message",
                "model": self.requests[-1]["model"],
                "content": [{"type": "text", "text": self.reply}],
                "usage": {"input_tokens": 300, "output_tokens": 10},
            }
        )
