"""The store calls a benchmark of the sync step times: every write, delete and upkeep of a
store, by wrapping its methods (lab/bench/store_sync.py, lab/bench/refresh_sync.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def time_store_calls(
    store: Any,
    log: list[dict[str, Any]],
    on_upkeep: Callable[[tuple[Any, ...], float], None] | None = None,
) -> None:
    """Log ``{"kind": write | delete | upkeep, "s": seconds}`` per call. A write's or delete's
    time is its own: an upkeep it triggers is logged as an upkeep, not in it. ``on_upkeep``
    gets each upkeep's arguments and seconds."""
    nested = [0.0]  # seconds of the upkeeps run inside the call being timed
    kinds = (
        ("upsert", "write"),
        ("insert", "write"),
        ("delete", "delete"),
        ("_optimize", "upkeep"),
    )
    for name, kind in kinds:
        if not hasattr(store, name):
            continue
        real = getattr(store, name)

        def timed(*args: Any, _real: Any = real, _kind: str = kind, **kw: Any) -> Any:
            outer, nested[0] = nested[0], 0.0
            t0 = time.perf_counter()
            out = _real(*args, **kw)
            took = time.perf_counter() - t0
            log.append({"kind": _kind, "s": took if _kind == "upkeep" else took - nested[0]})
            if _kind == "upkeep" and on_upkeep is not None:
                on_upkeep(args, took)
            nested[0] = outer + (took if _kind == "upkeep" else 0.0)
            return out

        setattr(store, name, timed)
