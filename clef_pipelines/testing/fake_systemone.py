"""A fake System One server on loopback speaking the exact wire format, plain
(`POST /v1/systemone`) and inside the Workers AI envelope
(`POST /accounts/{id}/ai/run/@cf/cloudflare/{model}`), scriptable to fail.

    with FakeServer(token="k") as fake:
        fake.script(Reply(status=429, headers={"retry-after": "0"}), Reply())
        ...  # point a client at fake.base_url (self-hosted) or fake.workers_ai_base

Each request pops the next scripted Reply; with the script empty it answers correctly.
Answers can be scripted by question: `FakeServer(answerer=fn)` or `fake.answer_with(fn)`, where
`fn(qid, question, state)` returns the answer for that question (a wire answer dict, or a bare
float for a noul probability) or None for the default answer.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass
class Reply:
    """One scripted reply. Defaults: a correct answer, HTTP 200, no delay."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw: bytes | None = None  # sent as is (malformed bodies)
    body: Any = None  # a JSON body sent as is (plain or enveloped by the caller)
    partial: bool = False  # drop the last answer
    cf_code: int | None = None  # a Workers AI error envelope with this code
    cf_message: str = "error"
    bad_sum: bool = False  # probabilities that do not sum to 1


Answerer = Callable[[str, dict[str, Any], Any], "dict[str, Any] | float | None"]


def answer_for(request: dict[str, Any], answerer: Answerer | None = None) -> dict[str, Any]:
    """A deterministic, valid answer: choice favours the first option, score the top level;
    `answerer` overrides any question it returns an answer for."""
    answers: dict[str, Any] = {}
    for qid, q in request["questions"].items():
        scripted = answerer(qid, q, request.get("state")) if answerer else None
        if isinstance(scripted, int | float):
            answers[qid] = {"type": "noul", "noul": round(float(scripted), 4)}
        elif scripted is not None:
            answers[qid] = scripted
        elif q["type"] == "noul":
            answers[qid] = {"type": "noul", "noul": 0.7}
        elif q["type"] == "choice":
            opts = list(q["criteria"])
            rest = round(0.5 / (len(opts) - 1), 4)
            probs = {o: rest for o in opts}
            probs[opts[0]] = round(1 - rest * (len(opts) - 1), 4)
            answers[qid] = {
                "type": "choice",
                "choice": opts[0],
                "confidence": probs[opts[0]],
                "probabilities": probs,
            }
        else:
            n = len(q["criteria"])
            probs = {str(i): round(1 / n, 4) for i in range(n)}
            answers[qid] = {
                "type": "score",
                "score": round(sum(i / n for i in range(n)), 4),
                "confidence": round(1 / n, 4),
                "legend": {str(i): c for i, c in enumerate(q["criteria"])},
                "probabilities": probs,
            }
    text = json.dumps(request.get("state"))
    return {
        "model": request.get("model", "clef"),
        "answers": answers,
        "usage": {"input_tokens": 100 + len(text), "output_tokens": 0},
    }


class FakeServer:
    def __init__(
        self,
        *,
        token: str | None = None,
        account: str = "acct",
        answerer: Answerer | None = None,
        delay_s: float = 0.0,
    ) -> None:
        self.token = token
        # A fixed latency for every request (benchmarks); a scripted Reply's delay adds to it.
        self.delay_s = delay_s
        self.answerer = answerer
        self.account = account
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.calls = 0
        self.inflight = 0
        self.max_inflight = 0
        self.server_seconds = 0.0
        app = Starlette(
            routes=[
                Route("/v1/systemone", self._plain, methods=["POST"]),
                Route(
                    "/client/v4/accounts/{account}/ai/run/@cf/cloudflare/{model}",
                    self._workers_ai,
                    methods=["POST"],
                ),
                Route("/health", self._health, methods=["GET"]),
            ]
        )
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit this; without it uvicorn's separate header and body
        # writes meet the client's delayed ACK (a 40 ms stall per request on Linux).
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        )
        self._thread = threading.Thread(target=self._run, daemon=True)

    # ---- control --------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def workers_ai_base(self) -> str:
        return f"{self.base_url}/client/v4"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def answer_with(self, answerer: Answerer | None) -> None:
        """Script answers by question from now on (None: back to the default answers)."""
        self.answerer = answerer

    def start(self) -> FakeServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._sock]))

    # ---- handlers -------------------------------------------------------------------

    def _next(self) -> Reply:
        with self._lock:
            self.calls += 1
            return self._script.popleft() if self._script else Reply()

    async def _common(
        self, request: Request
    ) -> tuple[Reply, dict[str, Any] | None, Response | None]:
        reply = self._next()
        self.headers.append(dict(request.headers))
        if (
            self.token is not None
            and request.headers.get("authorization") != f"Bearer {self.token}"
        ):
            return reply, None, None  # the caller maps this to its own auth error
        raw = await request.body()
        body = json.loads(raw)
        self.requests.append(body)
        self.inflight += 1  # one event loop: no lock needed
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            if reply.delay_s or self.delay_s:
                await asyncio.sleep(reply.delay_s + self.delay_s)
        finally:
            self.inflight -= 1
        return reply, body, None

    def _answer(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        if reply.body is not None:
            return reply.body
        ans = answer_for(body, self.answerer)
        if reply.partial:
            ans["answers"].pop(list(ans["answers"])[-1])
        if reply.bad_sum:
            for a in ans["answers"].values():
                if "probabilities" in a:
                    for k in a["probabilities"]:
                        a["probabilities"][k] = 0.9
        return ans

    async def _plain(self, request: Request) -> Response:
        t0 = time.perf_counter()
        reply, body, _ = await self._common(request)
        try:
            if body is None:
                return JSONResponse({"error": "bad key"}, status_code=401)
            if reply.raw is not None:
                return Response(reply.raw, reply.status, headers=reply.headers)
            if reply.status != 200:
                return JSONResponse({"error": "scripted"}, reply.status, headers=reply.headers)
            return JSONResponse(self._answer(reply, body), headers=reply.headers)
        finally:
            self.server_seconds += time.perf_counter() - t0

    async def _workers_ai(self, request: Request) -> Response:
        t0 = time.perf_counter()
        reply, body, _ = await self._common(request)
        headers = {"cf-ray": f"fake-{self.calls}", **reply.headers}
        try:
            if body is None:
                return JSONResponse(
                    {
                        "result": None,
                        "success": False,
                        "errors": [{"code": 10000, "message": "Authentication error"}],
                        "messages": [],
                    },
                    401,
                    headers=headers,
                )
            if request.path_params["account"] != self.account:
                return JSONResponse(
                    {
                        "result": None,
                        "success": False,
                        "errors": [{"code": 7003, "message": "No route"}],
                    },
                    404,
                    headers=headers,
                )
            if reply.raw is not None:
                return Response(reply.raw, reply.status, headers=headers)
            if reply.cf_code is not None:
                status = reply.status if reply.status != 200 else 400
                return JSONResponse(
                    {
                        "result": None,
                        "success": False,
                        "errors": [{"code": reply.cf_code, "message": reply.cf_message}],
                        "messages": [],
                    },
                    status,
                    headers=headers,
                )
            if reply.status != 200:
                return Response(b"upstream error", reply.status, headers=headers)
            body["model"] = request.path_params["model"]
            return JSONResponse(
                {
                    "result": self._answer(reply, body),
                    "success": True,
                    "errors": [],
                    "messages": [],
                },
                headers=headers,
            )
        finally:
            self.server_seconds += time.perf_counter() - t0

    async def _health(self, request: Request) -> Response:
        # `fake` lets a report label numbers from this server as not model quality.
        return JSONResponse({"status": "ok", "fake": True})
