"""Typed Clef errors. Callers branch on the class; `retryable` drives the client's retry loop."""

from __future__ import annotations

from clef_pipelines.redact import redact


class ClefError(RuntimeError):
    """Base of every Clef failure. `status` is the HTTP status when there was one, `code` the
    backend's own error code (e.g. a Cloudflare code), `request_id` its id (`cf-ray`)."""

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: int | str | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        # Messages carry URLs and echoed bodies: never a password or a bearer key.
        super().__init__(redact(message))
        self.status = status
        self.code = code
        self.request_id = request_id
        self.retry_after = retry_after


class ClefNotConfigured(ClefError):
    """No backend is configured (`off`), or one lacks what it needs (a key, a release folder)."""


class ClefValidationError(ClefError, ValueError):
    """The request breaks a rule of the wire format; nothing was sent. `field` is dotted."""

    def __init__(self, message: str, *, field: str = "", **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(message, **kw)
        self.field = field


class ClefRequestTooLarge(ClefValidationError):
    """The state (or one question with it) exceeds the backend's token budget. Never truncated."""


class ClefUnsupported(ClefError):
    """The backend cannot do this (e.g. images on a local engine without an image processor)."""


class ClefAuthError(ClefError):
    """401/403 or Cloudflare code 10000: the key is missing, wrong or lacks permission."""


class ClefBadRequest(ClefError):
    """The backend refused the request as invalid (400/413/422, Cloudflare code 5006)."""


class ClefQuotaExhausted(ClefError):
    """The daily allocation is used up (Cloudflare code 3036). Retrying today will not help."""


class ClefBadAnswer(ClefError):
    """The answer is malformed or partial: a missing question, wrong options, bad sums."""


class ClefRetryableError(ClefError):
    retryable = True


class ClefRateLimited(ClefRetryableError):
    """429 (or 408): slow down; `retry_after` is honoured when the server sends one."""


class ClefServerError(ClefRetryableError):
    """500, 502, 503, 504, 529, or Cloudflare 3040 (out of capacity)."""


class ClefTimeout(ClefRetryableError):
    """No answer within the configured timeout."""


class ClefDeadlineExceeded(ClefError):
    """The caller's deadline (`clef_deadline`) passed, retries and backoffs included: not
    retried; a query degrades to vector order instead of waiting on."""


class ClefTransportError(ClefRetryableError):
    """Connection refused, reset, DNS failure and other transport errors."""


class ClefRetriesExhausted(ClefError):
    """Every retry failed; `last` is the final retryable error."""

    def __init__(self, message: str, *, last: ClefError, attempts: int) -> None:
        super().__init__(
            message,
            status=last.status,
            code=last.code,
            request_id=last.request_id,
            retry_after=last.retry_after,
        )
        self.last = last
        self.attempts = attempts
