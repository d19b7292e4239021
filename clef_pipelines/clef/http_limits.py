"""Connection limits shared by the package's uvicorn servers (`serve` and `api`).

uvicorn times out idle keep-alive connections, but not a client that sends half a request line
and waits, nor one that sends a header line every few seconds: each such connection holds a file
descriptor for as long as the client likes, and enough of them starve the process of descriptors.
The protocol here adds what uvicorn lacks:

* a header deadline: a request's headers must all arrive within `header_timeout_s` of its first
  byte (or of the connection's opening), whatever trickles in meanwhile;
* a cap on open connections: past `max_connections`, a new connection closes the oldest one still
  waiting for its headers (a slow client, or an idle keep-alive one), so slow clients can never
  lock out a normal request; when every connection is busy with a request, the newcomer gets a
  503. uvicorn's own `limit_concurrency` answers 503 only once a request's headers have arrived,
  so it neither frees the descriptors slow clients hold nor lets a normal request past them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar

from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_HEADER_TIMEOUT_S = 10.0
#: Largest piece of a request line plus headers h11 buffers before refusing it (uvicorn: 16 KiB).
MAX_HEADER_BYTES = 64 * 1024
#: Seconds an idle kept-alive connection stays open.
KEEP_ALIVE_S = 5

_BUSY_BODY = b'{"error": {"type": "unavailable", "message": "too many open connections"}}'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and a cap on open connections."""

    header_timeout_s: ClassVar[float] = DEFAULT_HEADER_TIMEOUT_S
    max_connections: ClassVar[int | None] = None
    _header_timer: asyncio.TimerHandle | None = None
    _opened_at: float = 0.0

    def _waiting_for_headers(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.transport.close()

    def _make_room(self) -> None:
        """Over the cap: close the oldest connection still waiting for headers, or refuse
        this one when every other connection is busy with a request."""
        cap = self.max_connections
        if cap is None:
            return
        open_now = [c for c in self.connections if not c.transport.is_closing()]
        if len(open_now) <= cap:
            return
        waiting = [
            c
            for c in open_now
            if c is not self and isinstance(c, GuardedH11Protocol) and c._waiting_for_headers()
        ]
        if waiting:
            min(waiting, key=lambda c: c._opened_at).transport.close()
        else:
            self.transport.write(_BUSY)
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._opened_at = time.monotonic()
        self._arm()
        self._make_room()

    def data_received(self, data: bytes) -> None:
        if self._waiting_for_headers():
            self._arm()  # the first bytes of a next request on a kept-alive connection
        super().data_received(data)
        if not self._waiting_for_headers():
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def guarded_protocol(
    *, header_timeout_s: float, max_connections: int | None
) -> type[GuardedH11Protocol]:
    """A `GuardedH11Protocol` class with these limits (uvicorn takes a class, not an instance)."""
    return type(
        "ClefH11Protocol",
        (GuardedH11Protocol,),
        {"header_timeout_s": header_timeout_s, "max_connections": max_connections},
    )


def guarded_uvicorn_config(
    app: Any,
    *,
    host: str,
    port: int,
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    max_connections: int | None = None,
    log_level: str = "warning",
) -> Any:
    """uvicorn settings with the limits above: always h11 (httptools, which uvicorn would pick
    when installed, has no header deadline), short keep-alive, bounded header size."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=guarded_protocol(header_timeout_s=header_timeout_s, max_connections=max_connections),
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE_S,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )
