"""Issue 57, must-hold 1: a store conflict is retried, with backoff, in the core (upkeep, index
builds) and by Dagster (the steps that touch the store); any other failure fails at once."""

from __future__ import annotations

from typing import Any

import pytest

from clef_pipelines.assets import failures
from clef_pipelines.ingest import batch_steps
from clef_pipelines.stores import retry
from tests.ingest.conftest import Workspace

CONFLICT = (
    "Retryable commit conflict for version 19: This CreateIndex transaction was preempted by "
    "concurrent transaction Rewrite at version 19. Please retry."
)


class _PgConflict(Exception):
    sqlstate = "40001"


def test_retryable_errors_are_the_stores_conflicts() -> None:
    assert retry.is_retryable(OSError(CONFLICT))
    assert retry.is_retryable(_PgConflict("could not serialize access"))
    try:
        try:
            raise OSError(CONFLICT)
        except OSError as inner:
            raise RuntimeError("the sync failed after writing 20 records") from inner
    except RuntimeError as outer:
        assert retry.is_retryable(outer)  # found through the cause
    assert not retry.is_retryable(ValueError("embedder mismatch"))
    assert not retry.is_retryable(OSError("No space left on device"))


def test_retrying_runs_again_on_a_conflict_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "WAIT_INITIAL_S", 0.01)
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OSError(CONFLICT)
        return "done"

    assert retry.retrying(flaky) == "done" and len(calls) == 3

    def broken() -> None:
        calls.append(1)
        raise ValueError("not a conflict")

    calls.clear()
    with pytest.raises(ValueError):
        retry.retrying(broken)
    assert len(calls) == 1

    def always() -> None:
        raise OSError(CONFLICT)

    with pytest.raises(OSError, match="Retryable commit conflict"):
        retry.retrying(always, attempts=2)


def _step_events(workspace: Workspace, report: Any) -> list[tuple[str, str]]:
    import dagster as dg

    logs = dg.DagsterInstance.get().all_logs(report.run_id)
    return [(e.step_key or "", e.dagster_event.event_type_value) for e in logs if e.dagster_event]


def test_dagster_runs_a_store_step_again_on_a_conflict_and_not_on_another_failure(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        failures, "STORE_RETRY", failures.STORE_RETRY._replace(delay=0.05, jitter=None)
    )
    real = batch_steps.sync_batch
    calls: list[int] = []

    def conflicting_once(*args: Any, **kwargs: Any) -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(CONFLICT)
        return real(*args, **kwargs)

    monkeypatch.setattr(batch_steps, "sync_batch", conflicting_once)
    (report,) = workspace.ingest()
    assert report.success, report.error
    events = _step_events(workspace, report)
    assert ("clef__store_sync", "STEP_UP_FOR_RETRY") in events
    assert ("clef__store_sync", "STEP_RESTARTED") in events
    assert workspace.records()

    def broken(*args: Any, **kwargs: Any) -> bool:
        raise ValueError("a failure that is no store conflict")

    monkeypatch.setattr(batch_steps, "sync_batch", broken)
    (workspace.corpus / "new.md").write_text("# New\n\nA document to sync.\n")
    (report,) = workspace.ingest()
    assert not report.success
    assert "a failure that is no store conflict" in (report.error or "")
    events = _step_events(workspace, report)
    assert ("clef__store_sync", "STEP_UP_FOR_RETRY") not in events
    assert ("clef__store_sync", "STEP_FAILURE") in events
