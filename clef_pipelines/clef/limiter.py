"""Pacing: requests per second, input tokens per second, and requests in flight."""

from __future__ import annotations

import asyncio

# The module itself, not the package's `__init__` (see `retrieval.fast_start.quick_clef_import`).
from aiolimiter.leakybucket import AsyncLimiter


class Pacer:
    """Every request takes a request slot, its token count and a concurrency slot.

    aiolimiter is a leaky bucket: bursts up to one second's worth, then the steady rate. A
    request larger than a whole second of tokens is charged the whole bucket (aiolimiter
    refuses amounts above its capacity), so it waits for an empty bucket instead of failing.
    """

    def __init__(self, requests_per_s: float, tokens_per_s: float, max_concurrency: int) -> None:
        self.requests = AsyncLimiter(max_rate=requests_per_s, time_period=1.0)
        self.tokens = AsyncLimiter(max_rate=tokens_per_s, time_period=1.0)
        self.slots = asyncio.Semaphore(max_concurrency)
        self.max_concurrency = max_concurrency

    async def admit(self, tokens: int) -> None:
        await self.requests.acquire()
        if tokens > 0:
            await self.tokens.acquire(min(float(tokens), self.tokens.max_rate))
