"""Failed steps keep secrets out of Dagster's event log.

Dagster stores a failed step's exception (message, cause and context) in its run storage, where
it outlives the run and shows in the UI. Our own messages are redacted where they are made, but
a library's exception may quote a URL with a password or echo a key; every asset body is wrapped
so that what Dagster records has passed through `redact` first.

The same wrapper writes each long stage's progress to the run log (`ingest.progress.logged`):
at least every 30 s while the step works, and its totals when it ends, so a run launched
from the UI says how far it is.

`store_retries` makes Dagster retry a step that touches the store when it failed on a store
conflict another writer caused (`stores.retry.is_retryable`), with the backoff of
`STORE_RETRY`. Not as the step's `retry_policy`: Dagster applies a policy to every failure,
and in Dagster 1.13 turns a Ctrl-C during the step into a retry instead of a stop; here any
other failure fails the step at once and an interruption stops the run.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

import dagster as dg

from clef_pipelines.ingest import progress
from clef_pipelines.redact import scrub_exception
from clef_pipelines.stores.retry import is_retryable

F = TypeVar("F", bound=Callable[..., Any])


def _progress_log(args: tuple[Any, ...]) -> AbstractContextManager[Any]:
    """Progress lines into the step's log, when the body is given a context (its first
    argument, as Dagster passes it)."""
    log = getattr(args[0], "log", None) if args else None
    return progress.logged(log.info) if log is not None else nullcontext()


def redacted_failures(fn: F) -> F:
    """Wrap an asset's compute function (plain or generator): exceptions leave it redacted,
    with their type and traceback kept whenever the message can be cleaned in place."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generator(*args: Any, **kwargs: Any) -> Any:
            try:
                with _progress_log(args):
                    yield from fn(*args, **kwargs)
            except Exception as error:
                scrubbed = scrub_exception(error)
                if scrubbed is error:
                    raise
                raise scrubbed from None

        return generator  # type: ignore[return-value]

    @functools.wraps(fn)
    def plain(*args: Any, **kwargs: Any) -> Any:
        try:
            with _progress_log(args):
                return fn(*args, **kwargs)
        except Exception as error:
            scrubbed = scrub_exception(error)
            if scrubbed is error:
                raise
            raise scrubbed from None

    return plain  # type: ignore[return-value]


#: How a step that touches the store is retried on a store conflict: up to 3 more times,
#: after about 2, 4 and 8 seconds (plus or minus a random share, so runs that conflicted
#: together do not retry together).
STORE_RETRY = dg.RetryPolicy(
    max_retries=3, delay=2.0, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)


def store_retries(fn: F) -> F:
    """Wrap the compute function of a step that writes the store (plain, not a generator; its
    first argument the Dagster context): a store conflict asks Dagster to run the step again
    (`STORE_RETRY`); every other error passes as it is."""

    @functools.wraps(fn)
    def plain(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            if not is_retryable(error):
                raise
            attempt = int(getattr(args[0], "retry_number", 0) or 0) + 1 if args else 1
            log = getattr(args[0], "log", None) if args else None
            wait = STORE_RETRY.calculate_delay(attempt)
            if log is not None and attempt <= STORE_RETRY.max_retries:
                log.warning(
                    f"store conflict with another writer; the step runs again in {wait:.1f} s "
                    f"(retry {attempt} of {STORE_RETRY.max_retries})"
                )
            raise dg.RetryRequested(
                max_retries=STORE_RETRY.max_retries, seconds_to_wait=wait
            ) from error

    return plain  # type: ignore[return-value]
