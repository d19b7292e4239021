"""A failed step's exception reaches Dagster's event log redacted.

Dagster stores the message, cause and context of a step's exception in its run storage. Every
asset of the code location is wrapped by `redacted_failures`; these tests fail a real Dagster
run with secrets in the exception chain and read back what Dagster recorded.
"""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg
import pytest

from clef_pipelines.assets.failures import redacted_failures
from clef_pipelines.definitions import defs
from clef_pipelines.redact import register_secret

KEY = "key-9d1e4c55b7"
DSN = "postgresql://ingest:pw-4471aa@db.internal:5432/rag"


def _recorded_failure(asset: dg.AssetsDefinition) -> str:
    """Everything Dagster stored about the failed step: message, stack, cause and context."""
    result = dg.materialize([asset], raise_on_error=False)
    assert not result.success
    [event] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    error = event.step_failure_data.error
    parts: list[str] = []
    while error is not None:
        parts += [error.cls_name or "", error.message, *error.stack]
        error = error.cause or error.context
    return "\n".join(parts)


def test_a_failed_steps_message_cause_and_type_are_recorded_without_secrets() -> None:
    register_secret(KEY)

    @dg.asset
    @redacted_failures
    def fails() -> None:
        try:
            raise ConnectionError(f"connect to {DSN} refused")
        except ConnectionError as inner:
            raise ValueError(f"sync failed with key {KEY}") from inner

    recorded = _recorded_failure(fails)
    assert "ValueError" in recorded and "ConnectionError" in recorded  # types and chain kept
    assert "sync failed with key ***" in recorded
    for secret in (KEY, "pw-4471aa"):
        assert secret not in recorded


def test_a_generator_asset_and_an_exception_that_prints_itself_are_redacted() -> None:
    register_secret(KEY)

    class SelfPrinting(Exception):
        def __str__(self) -> str:  # a message not made from args: cannot be cleaned in place
            return f"upstream said {KEY}"

    @dg.asset
    @redacted_failures
    def streams() -> Iterator[dg.Output[int]]:
        raise SelfPrinting()
        yield dg.Output(1)

    recorded = _recorded_failure(streams)
    assert "RedactedError" in recorded and "SelfPrinting: upstream said ***" in recorded
    assert KEY not in recorded


def test_without_the_wrapper_dagster_would_record_the_secret() -> None:
    """The check above can fail: an unwrapped asset's failure carries the secret."""

    @dg.asset
    def leaks() -> None:
        raise ValueError(f"key {KEY}")

    assert KEY in _recorded_failure(leaks)


@pytest.mark.parametrize("group", ["ingestion", "evaluation"])
def test_every_asset_of_the_code_location_is_wrapped(group: str) -> None:
    assets = [
        a
        for a in defs.assets or []
        if isinstance(a, dg.AssetsDefinition) and a.group_names_by_key
        if group in a.group_names_by_key.values()
    ]
    assert assets
    for asset in assets:
        fn = asset.op.compute_fn.decorated_fn  # type: ignore[union-attr]
        assert getattr(fn, "__wrapped__", None) is not None, asset.key
