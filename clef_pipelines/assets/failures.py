"""Failed steps keep secrets out of Dagster's event log.

Dagster stores a failed step's exception (message, cause and context) in its run storage, where
it outlives the run and shows in the UI. Our own messages are redacted where they are made, but
a library's exception may quote a URL with a password or echo a key; every asset body is wrapped
so that what Dagster records has passed through `redact` first.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from clef_pipelines.redact import scrub_exception

F = TypeVar("F", bound=Callable[..., Any])


def redacted_failures(fn: F) -> F:
    """Wrap an asset's compute function (plain or generator): exceptions leave it redacted,
    with their type and traceback kept whenever the message can be cleaned in place."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generator(*args: Any, **kwargs: Any) -> Any:
            try:
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
            return fn(*args, **kwargs)
        except Exception as error:
            scrubbed = scrub_exception(error)
            if scrubbed is error:
                raise
            raise scrubbed from None

    return plain  # type: ignore[return-value]
