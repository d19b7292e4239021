"""The source sensor registers partitions and reacts to file changes; the schedule refreshes."""

from __future__ import annotations

import datetime as dt
import time

import dagster as dg

from clef_pipelines.jobs.ingestion import build_refresh_schedule, source_change_sensor
from clef_pipelines.resources.settings import PipelineSettings
from tests.ingest.conftest import Workspace


def _evaluate(instance: dg.DagsterInstance, ws: Workspace, cursor: str | None) -> dg.SensorResult:
    ctx = dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources={"pipeline_settings": PipelineSettings(config_path=str(ws.config_path))},
    )
    result = source_change_sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    return result


def test_sensor_registers_sources_and_requests_runs_on_change(workspace: Workspace) -> None:
    with dg.instance_for_test() as instance:
        first = _evaluate(instance, workspace, None)
        (add,) = first.dynamic_partitions_requests
        assert list(add.partition_keys) == ["sample"]
        assert [r.partition_key for r in first.run_requests] == ["sample"]
        instance.add_dynamic_partitions("sources", ["sample"])

        quiet = _evaluate(instance, workspace, first.cursor)
        assert quiet.run_requests == [] and not quiet.dynamic_partitions_requests

        time.sleep(0.01)
        target = sorted(workspace.corpus.rglob("*.md"))[0]
        target.write_text(target.read_text() + "\nOne more line.\n")
        changed = _evaluate(instance, workspace, quiet.cursor)
        assert [r.partition_key for r in changed.run_requests] == ["sample"]
        assert changed.run_requests[0].run_key != first.run_requests[0].run_key


def test_refresh_schedule_requests_every_registered_source(workspace: Workspace) -> None:
    schedule = build_refresh_schedule("0 3 * * *")
    with dg.instance_for_test() as instance:
        empty = schedule(
            dg.build_schedule_context(
                instance=instance, scheduled_execution_time=dt.datetime(2026, 1, 1, 3)
            )
        )
        assert isinstance(empty, dg.SkipReason)
        instance.add_dynamic_partitions("sources", ["a", "b"])
        requests = schedule(
            dg.build_schedule_context(
                instance=instance, scheduled_execution_time=dt.datetime(2026, 1, 1, 3)
            )
        )
        assert sorted(r.partition_key for r in requests) == ["a", "b"]
