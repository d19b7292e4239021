"""Usage accounting: requests, cache hits, retries, errors, tokens, cost and latency."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

# List price per million input tokens (output is free). Self-hosted, local and ray: $0.
PRICE_PER_M_INPUT = {"clef": 0.24, "clef-flash": 0.09}
PAID_BACKENDS = {"workers-ai"}


def price_per_token(backend: str, model: str) -> float:
    if backend not in PAID_BACKENDS:
        return 0.0
    return PRICE_PER_M_INPUT.get(model, 0.0) / 1_000_000


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (0.0 when empty)."""
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


@dataclass
class Usage:
    """Counters of one client. `requests` counts calls to `ask` that reached the backend or
    the cache (a split request counts once per part); `latencies_ms` holds one value per
    answered part, cache hits included."""

    backend: str = ""
    model: str = ""
    requests: int = 0
    sent: int = 0
    cached: int = 0
    retries: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(
        self, *, latency_ms: float, cached: bool, input_tokens: int = 0, output_tokens: int = 0
    ) -> None:
        with self._lock:
            self.requests += 1
            self.latencies_ms.append(latency_ms)
            if cached:
                self.cached += 1
                return
            self.sent += 1
            self.input_tokens += input_tokens
            self.output_tokens += output_tokens
            self.cost_usd += input_tokens * price_per_token(self.backend, self.model)

    def add_retry(self) -> None:
        with self._lock:
            self.retries += 1

    def add_error(self) -> None:
        with self._lock:
            self.errors += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            lat = sorted(self.latencies_ms)
            return {
                "backend": self.backend,
                "model": self.model,
                "requests": self.requests,
                "sent": self.sent,
                "cached": self.cached,
                "retries": self.retries,
                "errors": self.errors,
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "cost_usd": round(self.cost_usd, 9),
                "latency_p50_ms": round(percentile(lat, 50), 3),
                "latency_p95_ms": round(percentile(lat, 95), 3),
                "latency_p99_ms": round(percentile(lat, 99), 3),
            }

    def reset(self) -> None:
        with self._lock:
            self.requests = self.sent = self.cached = self.retries = self.errors = 0
            self.input_tokens = self.output_tokens = 0
            self.cost_usd = 0.0
            self.latencies_ms = []
