"""Clef: the System One protocol, one shared client and its backends (no dagster here)."""

from clef_pipelines.clef.client import ClefClient, SyncClefClient, make_backend, resolve_backend
from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.clef.errors import (
    ClefAuthError,
    ClefBadAnswer,
    ClefBadRequest,
    ClefError,
    ClefNotConfigured,
    ClefQuotaExhausted,
    ClefRateLimited,
    ClefRequestTooLarge,
    ClefRetriesExhausted,
    ClefServerError,
    ClefTimeout,
    ClefTransportError,
    ClefUnsupported,
    ClefValidationError,
)
from clef_pipelines.clef.wire import SystemOneRequest, SystemOneResponse

__all__ = [
    "ClefAuthError",
    "ClefBadAnswer",
    "ClefBadRequest",
    "ClefClient",
    "ClefConfig",
    "ClefError",
    "ClefNotConfigured",
    "ClefQuotaExhausted",
    "ClefRateLimited",
    "ClefRequestTooLarge",
    "ClefRetriesExhausted",
    "ClefServerError",
    "ClefTimeout",
    "ClefTransportError",
    "ClefUnsupported",
    "ClefValidationError",
    "SyncClefClient",
    "SystemOneRequest",
    "SystemOneResponse",
    "make_backend",
    "resolve_backend",
]
