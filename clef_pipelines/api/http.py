"""The HTTP API (`clef-pipelines api`): JSON in, the Python API's `to_dict()` shapes out.

    POST /v1/retrieve          {"query", "collection"?, "top_k"?, "where"?}  -> RetrievalResult
    POST /v1/answer            same body                                    -> AnswerResult
    POST /v1/compact           {"query", "passages", "token_budget"?, ...}  -> RetrievalResult
    POST /v1/chat/completions  an OpenAI chat body; the answer is the compacted context
                               (`stream: true`: server-sent events, as OpenAI streams)
    GET  /v1/models            the model the chat endpoint serves, in OpenAI's list shape
    GET  /v1/collections       the served collections
    GET  /openapi.json         this API as OpenAPI 3.1
    GET  /health               liveness (no auth, says nothing about the deployment)

Every error is JSON `{"error": {"type", "message", "field"?}}` with the status that fits:
400 unreadable JSON, 401 missing or wrong key, 403 an `Origin` not in `api.allowed_origins`
(a browser page elsewhere: CSRF), 404 unknown path or collection, 405, 408 a body not received
within `api.body_timeout_s`, 413 body over `api.max_body_bytes`, 415 a POST body not declared
`application/json` (what a browser sends without a preflight), 421 a `Host` that is neither the
bind address nor in `api.allowed_hosts` (DNS rebinding), 422 a field that breaks a rule
(named), 503 over `api.max_connections` with every connection busy, 504 over
`api.request_timeout_s`. Internal errors are logged and answered without a traceback.

The server itself (`api_uvicorn_config`) closes connections whose headers do not arrive within
`api.header_timeout_s` and caps open connections (see `clef_pipelines.clef.http_limits`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from clef_pipelines import __version__
from clef_pipelines.api.config import ApiConfig
from clef_pipelines.api.models import (
    AnswerRequest,
    ChatCompletionRequest,
    CompactRequest,
    RequestRefused,
    RetrieveRequest,
    check_passages,
    check_query,
    first_error,
    json_schemas,
)
from clef_pipelines.api.openai_compat import (
    COMPACT_MODEL,
    ChatRequestError,
    chat_completion,
    chat_request_parts,
    completion_chunks,
    model_object,
    models_list,
    server_sent_events,
)
from clef_pipelines.api.service import RetrievalService, UnknownCollection
from clef_pipelines.clef.http_limits import guarded_uvicorn_config
from clef_pipelines.retrieval.answer import AnswerError, AnswerNotConfigured
from clef_pipelines.stores import StoreError

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, kind: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.field = status, kind, field

    def response(self) -> JSONResponse:
        err: dict[str, Any] = {"type": self.kind, "message": str(self)}
        if self.field is not None:
            err["field"] = self.field
        # A body not received in time leaves the rest of it on the line: the connection
        # cannot carry another request, so it is closed now rather than at keep-alive's end.
        headers = {"connection": "close"} if self.status == 408 else None
        return JSONResponse({"error": err}, status_code=self.status, headers=headers)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "too_large", f"body: over the {limit}-byte limit", "body")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, "too_large", f"body: over the {limit}-byte limit", "body")
    return bytes(body)


async def _read_json(request: Request, api: ApiConfig) -> Any:
    """The body as JSON, read within `api.max_body_bytes` and `api.body_timeout_s`."""
    try:
        async with asyncio.timeout(api.body_timeout_s):
            body = await _read_body(request, api.max_body_bytes)
    except TimeoutError:
        raise ApiError(
            408, "timeout", f"body: not received within {api.body_timeout_s:g} s", "body"
        ) from None
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, "bad_json", f"body: not valid JSON ({exc})", "body") from None


def _parse(model: type[BaseModel], raw: Any) -> Any:
    if not isinstance(raw, dict):
        raise ApiError(422, "invalid_request", "body: expected a JSON object", "body")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        field, msg = first_error(exc)
        raise ApiError(422, "invalid_request", f"{field}: {msg}", field) from None


Handler = Callable[[Request], Awaitable[Any]]


def _authorised(request: Request, expected: bytes | None) -> bool:
    if expected is None:
        return True
    got = request.headers.get("authorization", "")
    # The scheme is case-insensitive (RFC 9110); the key is compared in constant time.
    scheme, _, token = got.partition(" ")
    return hmac.compare_digest(f"Bearer {token.strip()}".encode(), expected) and (
        scheme.lower() == "bearer"
    )


def _error_response(exc: Exception, request: Request, api: ApiConfig) -> Response:
    """The error a failed request answers with; called while `exc` is being handled."""
    if isinstance(exc, ApiError):
        return exc.response()
    if isinstance(exc, TimeoutError):
        return ApiError(504, "timeout", f"request: over {api.request_timeout_s:g} s").response()
    if isinstance(exc, UnknownCollection):
        return ApiError(404, "not_found", str(exc), "collection").response()
    if isinstance(exc, RequestRefused):
        return ApiError(422, "invalid_request", str(exc), exc.field).response()
    if isinstance(exc, ChatRequestError):
        return ApiError(422, "invalid_request", str(exc), exc.field).response()
    if isinstance(exc, AnswerNotConfigured):  # the deployment's to fix, not the caller's
        return ApiError(501, "not_configured", str(exc)).response()
    if isinstance(exc, AnswerError):
        return ApiError(502, "upstream_error", f"answer: the LLM failed: {exc}").response()
    if isinstance(exc, StoreError):
        return ApiError(422, "invalid_request", str(exc), "where").response()
    if isinstance(exc, ValidationError):  # a model checked deeper in: its first error, named
        field, msg = first_error(exc)
        return ApiError(422, "invalid_request", f"{field}: {msg}", field).response()
    if isinstance(exc, ValueError):  # a filter or passage the core refused, with its reason
        field = "where" if "filter" in str(exc) or "operator" in str(exc) else "body"
        return ApiError(422, "invalid_request", str(exc), field).response()
    log.exception("API request failed: %s %s", request.method, request.url.path)
    return ApiError(500, "internal", "internal error (see the server log)").response()


_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})


def _host_name(value: str) -> str:
    """The name in a `Host` header or bind address: no port, no IPv6 brackets, no final dot."""
    value = value.strip().lower()
    if value.startswith("["):
        value = value[1 : value.find("]")] if "]" in value else value[1:]
    elif value.count(":") == 1:  # name:port (a bare IPv6 address has several colons)
        value = value.partition(":")[0]
    return value.rstrip(".")


def allowed_host_names(api: ApiConfig) -> frozenset[str] | None:
    """The `Host` names the API answers (None: any): the bind address, loopback's own names
    when bound there, and `api.allowed_hosts`. A wildcard bind with no list accepts any (such
    a deployment needs a bearer key, which a rebinding page does not have)."""
    extra = {_host_name(h) for h in api.allowed_hosts}
    if "*" in extra:
        return None
    bind = _host_name(api.host)
    if bind in _WILDCARD_BINDS:
        return frozenset(extra) if extra else None
    names = {bind, *extra}
    if bind in _LOOPBACK_NAMES or bind.startswith("127."):
        names |= _LOOPBACK_NAMES
    return frozenset(names)


def _is_json_media_type(content_type: str | None) -> bool:
    media = (content_type or "").partition(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class _RequestGuard:
    """ASGI middleware refusing what a browser can be made to send before anything else runs:
    a foreign `Host` (DNS rebinding: 421), a foreign `Origin` (CSRF: 403) and a POST body not
    declared JSON (a `text/plain` form post needs no CORS preflight: 415)."""

    def __init__(self, app: Any, api: ApiConfig) -> None:
        self.app = app
        self.hosts = allowed_host_names(api)
        origins = {o.strip().rstrip("/").lower() for o in api.allowed_origins}
        self.any_origin = "*" in origins
        self.origins = frozenset(origins)

    def _origin_allowed(self, origin: str) -> bool:
        return self.any_origin or origin.strip().rstrip("/").lower() in self.origins

    def refusal(self, scope: Any) -> ApiError | None:
        headers = Headers(scope=scope)
        host = headers.get("host")
        if self.hosts is not None and (host is None or _host_name(host) not in self.hosts):
            return ApiError(421, "misdirected", f"host: {host!r} is not served here", "host")
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin):
            return ApiError(
                403, "forbidden", f"origin: {origin!r} is not in api.allowed_origins", "origin"
            )
        if scope.get("method") == "POST" and not _is_json_media_type(headers.get("content-type")):
            return ApiError(
                415,
                "unsupported_media_type",
                "content-type: a POST body must be sent as application/json",
                "content-type",
            )
        return None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            refused = self.refusal(scope)
            if refused is not None:
                await refused.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _Handlers:
    """The API's endpoints over a warm service; each returns the JSON body to send."""

    def __init__(self, service: RetrievalService) -> None:
        self.service = service
        self.api = service.api

    async def retrieve(self, request: Request) -> Any:
        req = _parse(RetrieveRequest, await _read_json(request, self.api))
        check_query(req.query, self.api)
        result = await self.service.retrieve(
            req.query, collection=req.collection, top_k=req.top_k, where=req.where
        )
        return result.to_dict()

    async def answer(self, request: Request) -> Any:
        req = _parse(AnswerRequest, await _read_json(request, self.api))
        check_query(req.query, self.api)
        result = await self.service.answer(
            req.query, collection=req.collection, top_k=req.top_k, where=req.where
        )
        return result.to_dict()

    async def compact(self, request: Request) -> Any:
        api = self.api
        req = _parse(CompactRequest, await _read_json(request, api))
        check_query(req.query, api)
        check_passages([p if isinstance(p, str) else p.text for p in req.passages], api)
        passages = [
            p if isinstance(p, str) else p.model_dump(exclude_none=True) for p in req.passages
        ]
        result = await self.service.compact(
            req.query,
            passages,
            token_budget=req.token_budget,
            max_passages=req.max_passages,
            gate=req.gate,
        )
        return result.to_dict()

    async def chat(self, request: Request) -> Any:
        api = self.api
        req = _parse(ChatCompletionRequest, await _read_json(request, api))
        parts = chat_request_parts(req)
        check_query(parts.query, api)
        if len(parts.passages) > api.max_passages:
            raise ApiError(
                422, "invalid_request", f"context: over {api.max_passages} chunks", "context"
            )
        result = await self.service.compact(
            parts.query,
            parts.passages,
            token_budget=req.token_budget,
            max_passages=req.max_passages,
        )
        completion = chat_completion(
            req, parts, result, completion_id=f"chatcmpl-{uuid.uuid4().hex}"
        )
        if not req.stream:
            return completion
        # Compaction is done and every event rendered before the first byte: an error (a
        # value JSON cannot carry included) is still a JSON error with its status, and the
        # stream holds exactly the non-stream call's content.
        include_usage = req.stream_options is not None and req.stream_options.include_usage
        events = list(
            server_sent_events(completion_chunks(completion, include_usage=include_usage))
        )
        return StreamingResponse(
            iter(events), media_type="text/event-stream", headers={"cache-control": "no-cache"}
        )

    async def models(self, request: Request) -> Any:
        return models_list()

    async def model(self, request: Request) -> Any:
        name = request.path_params["model"]
        if name != COMPACT_MODEL:
            raise ApiError(404, "not_found", f"model {name!r} is not served here", "model")
        return model_object(name)

    async def collections(self, request: Request) -> Any:
        return {"collections": await asyncio.to_thread(self.service.describe_collections)}

    async def openapi(self, request: Request) -> Any:
        return openapi_document()


async def _health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _not_found(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    kind = "not_found" if status == 404 else "method_not_allowed"
    return ApiError(status, kind, f"{request.method} {request.url.path}").response()


def build_app(service: RetrievalService, *, api_key: str | None = None) -> Starlette:
    """The ASGI app over a warm service. `api_key`: the bearer key clients must send (None:
    no auth; `clef-pipelines api` refuses that off loopback)."""
    api = service.api
    expected = f"Bearer {api_key}".encode() if api_key else None
    handlers = _Handlers(service)

    def endpoint(
        handler: Handler, *, auth: bool = True
    ) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            started = time.perf_counter()
            try:
                if auth and not _authorised(request, expected):
                    raise ApiError(401, "unauthorized", "missing or wrong bearer key")
                out = await asyncio.wait_for(handler(request), timeout=api.request_timeout_s)
                headers = {"x-clef-ms": f"{(time.perf_counter() - started) * 1e3:.1f}"}
                if isinstance(out, Response):  # a stream, made once the work is done
                    out.headers.update(headers)
                    return out
                # Rendered here so that a value JSON cannot carry is a JSON error too.
                return JSONResponse(out, headers=headers)
            except Exception as exc:  # noqa: BLE001 - mapped (and logged); never a traceback
                return _error_response(exc, request, api)

        return run

    @asynccontextmanager
    async def lifespan(app: Starlette):  # type: ignore[no-untyped-def]
        yield
        await service.aclose_loop_clients()

    routes = [
        Route("/v1/retrieve", endpoint(handlers.retrieve), methods=["POST"]),
        Route("/v1/answer", endpoint(handlers.answer), methods=["POST"]),
        Route("/v1/compact", endpoint(handlers.compact), methods=["POST"]),
        Route("/v1/chat/completions", endpoint(handlers.chat), methods=["POST"]),
        Route("/v1/collections", endpoint(handlers.collections), methods=["GET"]),
        Route("/v1/models", endpoint(handlers.models), methods=["GET"]),
        Route("/v1/models/{model}", endpoint(handlers.model), methods=["GET"]),
        Route("/openapi.json", endpoint(handlers.openapi, auth=False), methods=["GET"]),
        Route("/health", _health, methods=["GET"]),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={404: _not_found, 405: _not_found},
        middleware=[Middleware(_RequestGuard, api=api)],
    )


def api_uvicorn_config(app: Starlette, api: ApiConfig) -> Any:
    """uvicorn settings for `clef-pipelines api`: the shared connection limits of
    `clef_pipelines.clef.http_limits` (header deadline, connection cap)."""
    return guarded_uvicorn_config(
        app,
        host=api.host,
        port=api.port,
        header_timeout_s=api.header_timeout_s,
        max_connections=api.max_connections,
    )


def openapi_document() -> dict[str, Any]:
    """OpenAPI 3.1 for the API: request bodies from the pydantic models."""

    def post(summary: str, body: str, returns: str) -> dict[str, Any]:
        return {
            "post": {
                "summary": summary,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}
                    },
                },
                "responses": {
                    "200": {
                        "description": returns,
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    **{
                        str(status): {"$ref": "#/components/responses/Error"}
                        for status in (400, 401, 403, 404, 408, 413, 415, 421, 422, 503, 504)
                    },
                },
            }
        }

    return {
        "openapi": "3.1.0",
        "info": {"title": "clef-pipelines API", "version": __version__},
        "components": {
            "schemas": json_schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {
                "Error": {
                    "description": "An error naming the field when one is at fault.",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/retrieve": post(
                "Clef-steered retrieval", "RetrieveRequest", "RetrievalResult.to_dict()"
            ),
            "/v1/answer": post(
                "A cited answer (or an abstention)", "AnswerRequest", "AnswerResult"
            ),
            "/v1/compact": post(
                "Compact passages for a query within a token budget",
                "CompactRequest",
                "RetrievalResult.to_dict()",
            ),
            "/v1/chat/completions": post(
                "OpenAI-compatible: the compacted context as the assistant message",
                "ChatCompletionRequest",
                "chat.completion",
            ),
            "/v1/models": {
                "get": {
                    "summary": "OpenAI-compatible: the model the chat endpoint serves",
                    "responses": {"200": {"description": "a list of models"}},
                }
            },
            "/v1/collections": {
                "get": {
                    "summary": "The collections served",
                    "responses": {"200": {"description": "collections"}},
                }
            },
        },
    }
