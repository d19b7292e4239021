"""`clef-pipelines serve`: a System One HTTP server for a release folder (starlette + uvicorn).

Concurrent requests share forward passes (the engine's Batcher, or one per Ray actor).
Errors are JSON: {"error": {"code": ..., "message": ..., "field": ...}} with
400 bad JSON, 401 bad key, 404 unknown path, 405 wrong method, 413 body too large,
422 an invalid request (naming the field), 500 an engine failure.
"""

from __future__ import annotations

import hmac
import json
import logging
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from clef_pipelines.clef.backends.base import Backend
from clef_pipelines.clef.errors import (
    ClefError,
    ClefUnsupported,
    ClefValidationError,
)
from clef_pipelines.clef.wire import parse_request

log = logging.getLogger("clef_pipelines.clef.serve")

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024  # four base64 images and a long state fit


class _TooLarge(Exception):
    pass


def _error(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    err: dict[str, Any] = {"code": code, "message": message}
    if field:
        err["field"] = field
    return JSONResponse({"error": err}, status_code=status)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    chunks = []
    size = 0
    # A missing or false content-length must not let a client stream past the limit.
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def build_app(
    backend: Backend,
    *,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    close_backend: bool = True,
) -> Starlette:
    expected = f"Bearer {api_key}".encode() if api_key else None
    stats = {"requests": 0, "errors": 0}

    def authorised(request: Request) -> bool:
        if expected is None:
            return True
        got = request.headers.get("authorization", "").encode()
        # Constant time: the comparison must not leak how much of the key matched.
        return hmac.compare_digest(got, expected)

    async def systemone(request: Request) -> JSONResponse:
        stats["requests"] += 1
        if not authorised(request):
            stats["errors"] += 1
            return _error(401, "unauthorized", "missing or wrong bearer key")
        try:
            raw = await _read_body(request, max_body_bytes)
        except _TooLarge:
            stats["errors"] += 1
            return _error(413, "too_large", f"request body over {max_body_bytes} bytes")
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            stats["errors"] += 1
            return _error(400, "bad_json", f"body is not valid JSON: {exc}")
        if not isinstance(body, dict):
            stats["errors"] += 1
            return _error(422, "invalid_request", "the body must be a JSON object", "(body)")
        try:
            req = parse_request(body)
            answer = await backend.send(req)
        except ClefValidationError as exc:
            stats["errors"] += 1
            return _error(422, "invalid_request", str(exc), exc.field)
        except ClefUnsupported as exc:
            stats["errors"] += 1
            return _error(422, "unsupported", str(exc), "images")
        except ClefError as exc:
            stats["errors"] += 1
            log.exception("engine failure")
            return _error(500, "engine_error", str(exc))
        return JSONResponse(answer)

    async def health(request: Request) -> JSONResponse:
        info: dict[str, Any] = {"status": "ok", "backend": backend.describe(), **stats}
        runner = getattr(backend, "runner", None)
        engine = getattr(runner, "engine", None)
        if engine is not None:
            info["engine"] = engine.info()
        batcher = getattr(backend, "batcher", None)
        if batcher is not None and batcher.batch_sizes:
            sizes = batcher.batch_sizes
            info["batches"] = len(sizes)
            info["mean_batch"] = round(sum(sizes) / len(sizes), 3)
        return JSONResponse(info)

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return _error(404, "not_found", f"no route for {request.url.path}")

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, f"{exc.detail} ({request.method} {request.url.path})")

    @asynccontextmanager
    async def lifespan(app: Starlette):  # type: ignore[no-untyped-def]
        await backend.start()  # load the engine (or reach the Ray pool) before serving
        log.info("serving %s", backend.describe())
        try:
            yield
        finally:
            if close_backend:
                await backend.aclose()

    return Starlette(
        routes=[
            Route("/v1/systemone", systemone, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ],
        exception_handlers={404: not_found, HTTPException: http_error},
        lifespan=lifespan,
    )


def serve(
    backend: Backend,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> None:
    import uvicorn

    app = build_app(backend, api_key=api_key, max_body_bytes=max_body_bytes)
    uvicorn.run(app, host=host, port=port, log_level="info", access_log=False)
