"""`off`: no Clef. Calls fail with ClefNotConfigured; callers check `enabled` and fall back."""

from __future__ import annotations

from typing import Any

from clef_pipelines.clef.backends.base import Backend
from clef_pipelines.clef.errors import ClefNotConfigured
from clef_pipelines.clef.wire import SystemOneRequest


class OffBackend(Backend):
    name = "off"
    enabled = False

    def __init__(self, model: str, reason: str = "clef.backend is 'off'") -> None:
        super().__init__(model)
        self.reason = reason

    async def send(self, request: SystemOneRequest) -> dict[str, Any]:
        raise ClefNotConfigured(f"Clef is off: {self.reason}")

    def describe(self) -> str:
        return f"off ({self.reason})"
