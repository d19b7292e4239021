"""The backend interface: one validated request in, one raw answer body out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from clef_pipelines.clef.tokens import EstimateCounter, TokenCounter

if TYPE_CHECKING:
    from clef_pipelines.clef.wire import SystemOneRequest


class Backend(ABC):
    #: The `clef.backend` value this implements; also the cache and price key.
    name: str = "base"
    #: Tokens one request may hold (state + questions + prompt).
    context_tokens: int = 16_384
    counter: TokenCounter = EstimateCounter()
    #: False only for `off`: callers fall back and mark their results degraded.
    enabled: bool = True

    def __init__(self, model: str) -> None:
        self.model = model

    @abstractmethod
    async def send(self, request: SystemOneRequest) -> dict[str, Any]:
        """Send one request; return the plain (unenveloped) answer body, or raise a ClefError."""

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Connect or load; called once before the first request."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections, threads and engines."""

    def describe(self) -> str:
        return f"{self.name} ({self.model})"
