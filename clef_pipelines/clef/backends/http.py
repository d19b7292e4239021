"""The HTTP transport shared by `workers-ai` and `self-hosted`: one httpx.AsyncClient per
backend, status and transport errors mapped to typed, retryable-or-not ClefErrors.

`in_threads=True` (a one-shot process: `clef-pipelines compact`) sends each request with
httpx's sync `Client` on a daemon thread of its own instead: the event loop's client makes
httpcore load anyio's asyncio backend (and sniffio, anyio's streams) on the first request,
about 5% of a cold `compact`'s instructions, for what is often one request. Requests still overlap (one thread
each, up to `max_connections` in flight, as the pool allows), with the same timeouts, limits
and errors. A request the caller stops waiting for (a deadline) runs on until its timeout
but does not hold up the process's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import threading
import time
from typing import Any

import httpx

from clef_pipelines.clef.backends.base import Backend
from clef_pipelines.clef.errors import (
    ClefAuthError,
    ClefBadAnswer,
    ClefBadRequest,
    ClefError,
    ClefRateLimited,
    ClefServerError,
    ClefTimeout,
    ClefTransportError,
)

RETRY_STATUSES = {408, 429, 500, 502, 503, 504, 529}


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a `retry-after` header: a number (0 included) or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_for_status(
    status: int, message: str, *, request_id: str | None, retry_after: float | None
) -> ClefError:
    kw: dict[str, Any] = {"status": status, "request_id": request_id, "retry_after": retry_after}
    if status in (401, 403):
        return ClefAuthError(f"HTTP {status}: {message}", **kw)
    if status in (408, 429):
        return ClefRateLimited(f"HTTP {status}: {message}", **kw)
    if status in RETRY_STATUSES:
        return ClefServerError(f"HTTP {status}: {message}", **kw)
    if 400 <= status < 500:
        return ClefBadRequest(f"HTTP {status}: {message}", **kw)
    return ClefError(f"HTTP {status}: {message}", **kw)


class HttpBackend(Backend):
    request_id_header = "x-request-id"

    def __init__(
        self,
        model: str,
        *,
        url: str,
        headers: dict[str, str],
        timeout_s: float,
        connect_timeout_s: float,
        max_connections: int,
        in_threads: bool = False,
    ) -> None:
        super().__init__(model)
        self.url = url
        self._headers = headers
        self._timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self._limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self.in_threads = in_threads
        self._http: httpx.AsyncClient | None = None
        self._sync_http: httpx.Client | None = None

    def _client_kw(self) -> dict[str, Any]:
        return {
            "headers": self._headers,
            "timeout": self._timeout,
            "limits": self._limits,
            # A plain-http URL (a self-hosted server on loopback or a LAN) never uses TLS
            # and redirects are not followed, so loading the CA bundle for it (about 0.1 s
            # of CPU, a twentieth of a cold `query`) buys nothing; https verifies as ever.
            "verify": not self.url.startswith("http://"),
        }

    async def start(self) -> None:
        if self.in_threads:
            if self._sync_http is None:
                self._sync_http = httpx.Client(**self._client_kw())
        elif self._http is None:
            self._http = httpx.AsyncClient(**self._client_kw())

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._sync_http is not None:
            self._sync_http.close()
            self._sync_http = None

    async def _post_in_thread(self, body: dict[str, Any]) -> httpx.Response:
        """`Client.post` on a daemon thread; its response or error comes back to the loop."""
        assert self._sync_http is not None
        http, loop = self._sync_http, asyncio.get_running_loop()
        done: asyncio.Future[httpx.Response] = loop.create_future()

        def settle(resp: httpx.Response | None, exc: BaseException | None) -> None:
            if done.cancelled():
                return
            if exc is not None:
                done.set_exception(exc)
            else:
                done.set_result(resp)  # type: ignore[arg-type]

        def post() -> None:
            resp, error = None, None
            try:
                resp = http.post(self.url, json=body)
            except Exception as exc:  # noqa: BLE001 - handed to the awaiting task as is
                error = exc
            # The loop may be gone when a request nobody waits for ends.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, resp, error)

        threading.Thread(target=post, name="clef-http", daemon=True).start()
        return await done

    async def _post(self, body: dict[str, Any]) -> tuple[httpx.Response, Any]:
        """POST and decode JSON. Transport failures become retryable errors; a body that is
        not JSON is returned as None for the caller to judge with the status."""
        await self.start()
        try:
            if self.in_threads:
                resp = await self._post_in_thread(body)
            else:
                assert self._http is not None
                resp = await self._http.post(self.url, json=body)
        except httpx.TimeoutException as exc:
            raise ClefTimeout(f"no answer from {self.url} in time ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise ClefTransportError(f"{type(exc).__name__} talking to {self.url}: {exc}") from exc
        try:
            data = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            data = None
        return resp, data

    def _meta(self, resp: httpx.Response) -> tuple[str | None, float | None]:
        return resp.headers.get(self.request_id_header), parse_retry_after(
            resp.headers.get("retry-after")
        )

    @staticmethod
    def _malformed(resp: httpx.Response, rid: str | None) -> ClefBadAnswer:
        snippet = resp.text[:200] if resp.content else "(empty body)"
        return ClefBadAnswer(
            f"HTTP {resp.status_code} with a body that is not a JSON object: {snippet!r}",
            status=resp.status_code,
            request_id=rid,
        )
