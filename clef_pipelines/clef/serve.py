"""`clef-pipelines serve`: a System One HTTP server for a release folder (starlette + uvicorn).

Concurrent requests share forward passes (the engine's Batcher, or one per Ray actor).
Errors are JSON: {"error": {"code": ..., "message": ..., "field": ...}} with
400 bad JSON (nested too deeply included), 401 bad key, 404 unknown path, 405 wrong method,
408 a body not sent in time, 413 body too large, 422 an invalid request (naming the field;
an unknown model too), 500 an engine failure. A connection whose request headers do not arrive
within `header_timeout_s` is closed; a body must arrive within `body_timeout_s`.
"""

from __future__ import annotations

import asyncio
import hmac
import json
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
from clef_pipelines.clef.http_limits import DEFAULT_HEADER_TIMEOUT_S, guarded_uvicorn_config
from clef_pipelines.clef.wire import parse_request
from clef_pipelines.redact import redacting_logger, register_secret

log = redacting_logger("clef_pipelines.clef.serve")

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024  # four base64 images and a long state fit
DEFAULT_BODY_TIMEOUT_S = 30.0
#: The published Clef models; any other name is refused rather than echoed back.
KNOWN_MODELS = frozenset({"clef", "clef-flash"})


class _TooLarge(Exception):
    pass


def _error(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    err: dict[str, Any] = {"code": code, "message": message}
    if field:
        err["field"] = field
    return JSONResponse({"error": err}, status_code=status)


def _authorised(header: str, api_key: str) -> bool:
    """`Authorization: Bearer <key>`, the scheme in any case (RFC 9110), compared in
    constant time so the comparison does not leak how much of the key matched."""
    scheme, _, token = header.strip().partition(" ")
    ok_scheme = scheme.lower() == "bearer"
    return hmac.compare_digest(token.strip().encode(), api_key.encode()) and ok_scheme


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


class _Refused(Exception):
    """A request answered with an error; the server counts it in `errors`."""

    def __init__(self, response: JSONResponse) -> None:
        super().__init__(response.status_code)
        self.response = response


class _SystemOne:
    """The System One endpoint and the health check over one backend."""

    def __init__(
        self, backend: Backend, api_key: str | None, max_body_bytes: int, body_timeout_s: float
    ) -> None:
        self.backend = backend
        self.api_key = api_key
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.stats = {"requests": 0, "errors": 0}

    def authorised(self, request: Request) -> bool:
        if not self.api_key:
            return True
        return _authorised(request.headers.get("authorization", ""), self.api_key)

    async def systemone(self, request: Request) -> JSONResponse:
        self.stats["requests"] += 1
        try:
            if not self.authorised(request):
                raise _Refused(_error(401, "unauthorized", "missing or wrong bearer key"))
            body = await self._body(request)
            self._check_model(body)
            answer = await self._send(body)
        except _Refused as refused:
            self.stats["errors"] += 1
            return refused.response
        # The model that answered, whatever name the request used for it.
        return JSONResponse({**answer, "model": self.backend.model})

    async def _body(self, request: Request) -> dict[str, Any]:
        """The request's JSON object, read within the size and time limits."""
        limit, timeout_s = self.max_body_bytes, self.body_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                raw = await _read_body(request, limit)
        except _TooLarge:
            raise _Refused(_error(413, "too_large", f"request body over {limit} bytes")) from None
        except TimeoutError:
            raise _Refused(
                _error(408, "timeout", f"request body not received within {timeout_s} s")
            ) from None
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _Refused(_error(400, "bad_json", f"body is not valid JSON: {exc}")) from None
        except RecursionError:
            raise _Refused(_error(400, "bad_json", "body is nested too deeply")) from None
        if not isinstance(body, dict):
            raise _Refused(
                _error(422, "invalid_request", "the body must be a JSON object", "(body)")
            )
        return body

    def _check_model(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if isinstance(model, str) and model not in KNOWN_MODELS:
            raise _Refused(
                _error(
                    422,
                    "invalid_request",
                    f"unknown model {model[:64]!r}; this server answers as "
                    f"{self.backend.model!r} (models: {', '.join(sorted(KNOWN_MODELS))})",
                    "model",
                )
            )

    async def _send(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            req = parse_request(body)
            return await self.backend.send(req)
        except RecursionError:
            raise _Refused(_error(400, "bad_json", "body is nested too deeply")) from None
        except ClefValidationError as exc:
            raise _Refused(_error(422, "invalid_request", str(exc), exc.field)) from None
        except ClefUnsupported as exc:
            raise _Refused(_error(422, "unsupported", str(exc), "images")) from None
        except ClefError as exc:
            log.exception("engine failure")
            raise _Refused(_error(500, "engine_error", str(exc))) from None
        except Exception as exc:  # whatever breaks, the client gets JSON, not a plain 500
            log.exception("unexpected failure")
            raise _Refused(_error(500, "internal_error", f"{type(exc).__name__}")) from None

    async def health(self, request: Request) -> JSONResponse:
        if not self.authorised(request):
            # Liveness only: what runs where is not for anonymous callers.
            return JSONResponse({"status": "ok"})
        backend = self.backend
        info: dict[str, Any] = {
            "status": "ok",
            "backend": backend.name,
            "model": backend.model,
            **self.stats,
        }
        runner = getattr(backend, "runner", None)
        engine = getattr(runner, "engine", None)
        if engine is not None:
            # Never the release folder's path: the server's file system is its own business.
            info["engine"] = {k: v for k, v in engine.info().items() if k != "release_dir"}
        batcher = getattr(backend, "batcher", None)
        if batcher is not None and batcher.batch_sizes:
            sizes = batcher.batch_sizes
            info["batches"] = len(sizes)
            info["mean_batch"] = round(sum(sizes) / len(sizes), 3)
        return JSONResponse(info)


async def _not_found(request: Request, exc: Exception) -> JSONResponse:
    return _error(404, "not_found", f"no route for {request.url.path}")


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return _error(exc.status_code, code, f"{exc.detail} ({request.method} {request.url.path})")


def build_app(
    backend: Backend,
    *,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    close_backend: bool = True,
) -> Starlette:
    register_secret(api_key)
    server = _SystemOne(backend, api_key, max_body_bytes, body_timeout_s)

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
            Route("/v1/systemone", server.systemone, methods=["POST"]),
            Route("/health", server.health, methods=["GET"]),
        ],
        exception_handlers={404: _not_found, HTTPException: _http_error},
        lifespan=lifespan,
    )


def uvicorn_config(
    app: Starlette,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    log_level: str = "info",
) -> Any:
    """uvicorn settings for `serve`: the shared h11 protocol with a header deadline
    (`clef_pipelines.clef.http_limits`)."""
    return guarded_uvicorn_config(
        app, host=host, port=port, header_timeout_s=header_timeout_s, log_level=log_level
    )


def serve(
    backend: Backend,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
) -> None:
    import uvicorn

    app = build_app(
        backend, api_key=api_key, max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s
    )
    uvicorn.Server(
        uvicorn_config(app, host=host, port=port, header_timeout_s=header_timeout_s)
    ).run()
