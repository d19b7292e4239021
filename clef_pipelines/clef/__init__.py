"""Clef: the System One protocol, one shared client and its backends (no dagster here).

The names below are imported on first use: a cold `compact` imports the client and the
plain wire (`wire_light`) but not the models (pydantic) of `config` and `wire`.
"""

from __future__ import annotations

import importlib
from typing import Any

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

_LAZY = {
    "ClefClient": "clef_pipelines.clef.client",
    "SyncClefClient": "clef_pipelines.clef.client",
    "make_backend": "clef_pipelines.clef.client",
    "resolve_backend": "clef_pipelines.clef.client",
    "ClefConfig": "clef_pipelines.clef.config",
    "SystemOneRequest": "clef_pipelines.clef.wire",
    "SystemOneResponse": "clef_pipelines.clef.wire",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'clef_pipelines.clef' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


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
