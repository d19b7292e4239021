"""Failed steps keep secrets out of Dagster's event log.

Dagster stores a failed step's exception (message, cause and context) in its run storage, where
it outlives the run and shows in the UI. Our own messages are redacted where they are made, but
a library's exception may quote a URL with a password or echo a key; every asset body is wrapped
so that what Dagster records has passed through `redact` first.

The same wrapper writes each long stage's progress to the run log (`ingest.progress.logged`):
at least every 30 s while the step works, and its totals when it ends, so a run launched
from the UI says how far it is.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

from clef_pipelines.ingest import progress
from clef_pipelines.redact import scrub_exception

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
