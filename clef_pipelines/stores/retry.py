"""The store's retryable errors, and a retry with backoff around store upkeep.

Several writers into one collection (sources of one collection run at once from a backfill,
the daemon, the CLI) are serialised by the collection's lock (`ingest.locks`), but a writer
that does not take it (another machine on a shared folder, a command run by hand) can still
commit between a step's reads and its commit. LanceDB then refuses the later commit with
"Retryable commit conflict ... Please retry": the operation is safe to run again on the
table as it is now. PostgreSQL says the same with a serialization failure or a deadlock.

`retrying(fn)` runs an idempotent store operation (upkeep, index builds) with tenacity,
retrying only those errors, with exponential backoff and jitter; the Dagster steps that touch
the store ask Dagster to retry the step on the same errors (`assets.failures.store_retries`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from clef_pipelines.redact import redacting_logger

log = redacting_logger("clef_pipelines.stores")

T = TypeVar("T")

#: What LanceDB / Lance say of a commit another writer's commit preempted.
_LANCE_RETRYABLE = ("retryable commit conflict", "commit conflict", "please retry")
#: PostgreSQL: serialization_failure, deadlock_detected.
_PG_RETRYABLE = {"40001", "40P01"}

#: Attempts of one upkeep or index build (the first included), and its backoff in seconds.
ATTEMPTS = 6
WAIT_INITIAL_S = 0.2
WAIT_MAX_S = 5.0


def is_retryable(error: BaseException) -> bool:
    """Whether `error`, or an error it was raised from, is a store conflict that running the
    operation again resolves."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if getattr(current, "sqlstate", None) in _PG_RETRYABLE:
            return True
        text = str(current).lower()
        if any(marker in text for marker in _LANCE_RETRYABLE):
            return True
        current = current.__cause__ or current.__context__
    return False


def _say(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome else None
    wait = state.next_action.sleep if state.next_action else 0.0
    log.warning(
        "store conflict (attempt %d of %d), retrying in %.1f s: %s",
        state.attempt_number,
        ATTEMPTS,
        wait,
        str(error).splitlines()[0][:200] if error else "",
    )


def retrying(fn: Callable[[], T], *, attempts: int = ATTEMPTS) -> T:
    """`fn()`, run again with backoff while it fails with a retryable store error."""
    runner = Retrying(
        retry=retry_if_exception(is_retryable),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential_jitter(initial=WAIT_INITIAL_S, max=WAIT_MAX_S),
        before_sleep=_say,
        reraise=True,
    )
    return runner(fn)
