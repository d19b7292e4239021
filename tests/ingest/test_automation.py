"""Partitions follow the configured sources; the sensor and the schedule request runs only for
configured sources; ad-hoc CLI paths never become partitions of the shared instance."""

from __future__ import annotations

import datetime as dt
import time

import dagster as dg
import pytest
from typer.testing import CliRunner

from clef_pipelines.cli.main import app
from clef_pipelines.jobs.ingestion import build_refresh_schedule, source_change_sensor
from clef_pipelines.resources.settings import PipelineSettings
from tests.ingest.conftest import Workspace


def _resources(ws: Workspace) -> dict:
    return {"pipeline_settings": PipelineSettings(validated=ws.settings())}


def _evaluate(instance: dg.DagsterInstance, ws: Workspace, cursor: str | None) -> dg.SensorResult:
    # A context manager: the settings resource holds the process's validated settings object
    # (a nested resource), which Dagster sets up and tears down around the evaluation.
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=_resources(ws)) as ctx:
        result = source_change_sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    return result


def _apply(instance: dg.DagsterInstance, result: dg.SensorResult) -> None:
    for request in result.dynamic_partitions_requests or []:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions("sources", list(request.partition_keys))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition("sources", key)


def test_sensor_registers_sources_and_requests_runs_on_change(workspace: Workspace) -> None:
    with dg.instance_for_test() as instance:
        first = _evaluate(instance, workspace, None)
        (add,) = first.dynamic_partitions_requests
        assert list(add.partition_keys) == ["sample"]
        assert [r.partition_key for r in first.run_requests] == ["sample"]
        _apply(instance, first)

        quiet = _evaluate(instance, workspace, first.cursor)
        assert quiet.run_requests == [] and not quiet.dynamic_partitions_requests

        time.sleep(0.01)
        target = sorted(workspace.corpus.rglob("*.md"))[0]
        target.write_text(target.read_text() + "\nOne more line.\n")
        changed = _evaluate(instance, workspace, quiet.cursor)
        assert [r.partition_key for r in changed.run_requests] == ["sample"]
        assert changed.run_requests[0].run_key != first.run_requests[0].run_key


def test_sensor_requests_a_run_when_the_settings_change(workspace: Workspace) -> None:
    """A change of the settings that shape chunks (here the chunk size, and the guard switched
    on) re-processes a source's documents, so the sensor requests a run for it, as it does for
    changed files; a setting that shapes no chunk (the Clef client's concurrency) requests nothing."""
    with dg.instance_for_test() as instance:
        first = _evaluate(instance, workspace, None)
        _apply(instance, first)
        assert _evaluate(instance, workspace, first.cursor).run_requests == []

        workspace.write_config(chunking={"target_tokens": 120})
        resized = _evaluate(instance, workspace, first.cursor)
        assert [r.partition_key for r in resized.run_requests] == ["sample"]
        assert _evaluate(instance, workspace, resized.cursor).run_requests == []

        workspace.write_config(chunking={"target_tokens": 120}, clef={"max_concurrency": 3})
        assert _evaluate(instance, workspace, resized.cursor).run_requests == []

        workspace.write_config(chunking={"target_tokens": 120}, steering={"guard": {"mode": "on"}})
        guarded = _evaluate(instance, workspace, resized.cursor)
        assert [r.partition_key for r in guarded.run_requests] == ["sample"]

        # Back to the first settings: a signal seen before, still a run of its own (Dagster
        # drops a request whose run key it has seen).
        workspace.write_config(chunking={}, clef={}, steering={"guard": {"mode": "off"}})
        back = _evaluate(instance, workspace, guarded.cursor)
        assert [r.partition_key for r in back.run_requests] == ["sample"]
        ticks = (first, resized, guarded, back)
        keys = [r.run_key for tick in ticks for r in tick.run_requests]
        assert len(set(keys)) == len(keys) == 4


def test_partitions_follow_the_configured_sources(workspace: Workspace) -> None:
    extra = workspace.root / "extra"
    extra.mkdir()
    (extra / "a.md").write_text("# Extra\n\nA second source.\n")
    workspace.write_config(
        sources=[{"name": "sample", "path": "corpus"}, {"name": "extra", "path": "extra"}]
    )
    with dg.instance_for_test() as instance:
        # A partition left from a source that is no longer configured.
        instance.add_dynamic_partitions("sources", ["sample", "gone"])
        first = _evaluate(instance, workspace, None)
        kinds = {
            type(r).__name__: list(r.partition_keys) for r in first.dynamic_partitions_requests
        }
        assert kinds == {
            "AddDynamicPartitionsRequest": ["extra"],
            "DeleteDynamicPartitionsRequest": ["gone"],
        }
        assert sorted(r.partition_key for r in first.run_requests) == ["extra", "sample"]
        _apply(instance, first)
        assert sorted(instance.get_dynamic_partitions("sources")) == ["extra", "sample"]

        # The source leaves the config: its partition goes, no run is requested for it.
        workspace.write_config(sources=[{"name": "sample", "path": "corpus"}])
        later = _evaluate(instance, workspace, first.cursor)
        (delete,) = later.dynamic_partitions_requests
        assert isinstance(delete, dg.DeleteDynamicPartitionsRequest)
        assert list(delete.partition_keys) == ["extra"]
        assert later.run_requests == []


def test_refresh_schedule_requests_only_configured_sources(workspace: Workspace) -> None:
    schedule = build_refresh_schedule("0 3 * * *")

    def tick(instance: dg.DagsterInstance, day: int):  # type: ignore[no-untyped-def]
        with dg.build_schedule_context(
            instance=instance,
            scheduled_execution_time=dt.datetime(2026, 1, day, 3),
            resources=_resources(workspace),
        ) as context:
            return schedule(context)

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("sources", ["stale", "adhoc"])
        requests = tick(instance, 1)
        assert [r.partition_key for r in requests] == ["sample"]
        assert instance.get_dynamic_partitions("sources") == ["sample"]

        workspace.write_config(sources=[])
        assert isinstance(tick(instance, 2), dg.SkipReason)


def test_cli_ingest_then_sensor_first_tick_requests_nothing(workspace: Workspace) -> None:
    """The UI's first sensor tick after a CLI ingest sees the files were already ingested;
    an ad-hoc path ingested from the CLI never becomes a partition of the shared instance."""
    extra = workspace.root / "adhoc"
    extra.mkdir()
    (extra / "a.md").write_text("# Ad hoc\n\nIngested once from the command line.\n")
    cfg = str(workspace.config_path)
    runner = CliRunner()
    first_ingest = runner.invoke(app, ["ingest", "--config", cfg, "--json"])
    assert first_ingest.exit_code == 0, first_ingest.output
    adhoc = runner.invoke(app, ["ingest", str(extra), "--config", cfg, "--json"])
    assert adhoc.exit_code == 0, adhoc.output
    with dg.DagsterInstance.get() as instance:  # DAGSTER_HOME of the workspace
        assert instance.get_dynamic_partitions("sources") == ["sample"]
        first = _evaluate(instance, workspace, None)
        assert first.run_requests == []
        assert not first.dynamic_partitions_requests


def test_a_partition_that_names_no_source_is_pruned_with_a_reason_and_its_run_fails_fast(
    workspace: Workspace, capfd: pytest.CaptureFixture[str]
) -> None:
    """Issue 57, must-hold 6: "Add a partition" in the UI for a name that is no configured
    source: the sensor removes it, saying why, and a run launched for it before that fails at
    its first step, naming the configured sources."""
    from clef_pipelines.jobs.launch import run_config
    from clef_pipelines.jobs.location import build_definitions, build_resources
    from clef_pipelines.jobs.results import root_message

    settings = workspace.settings()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("sources", ["sample", "typo"])
        job = build_definitions(settings).resolve_job_def("ingestion_job")
        result = job.execute_in_process(
            partition_key="typo",
            instance=instance,
            resources=build_resources(settings),
            raise_on_error=False,
            run_config=run_config(),
        )
        assert not result.success
        (failure,) = [e for e in result.all_events if e.is_step_failure]
        assert failure.step_key == "clef__source_documents"  # the first step, before any work
        message = root_message(failure.step_failure_data.error)  # type: ignore[union-attr]
        assert "partition 'typo' is not a configured source (configured: sample)" in message
        assert "\n" not in message.strip()
        assert not (settings.data_path / "lancedb").exists() or workspace.records() == []

        capfd.readouterr()
        tick = _evaluate(instance, workspace, None)
        (delete,) = [
            r
            for r in tick.dynamic_partitions_requests
            if isinstance(r, dg.DeleteDynamicPartitionsRequest)
        ]
        assert list(delete.partition_keys) == ["typo"]
        assert [r.partition_key for r in tick.run_requests] == ["sample"]
        said = " ".join(capfd.readouterr().err.split())  # the tick's log
        assert "partition(s) 'typo' name no configured source (configured: sample)" in said
        assert "left the config" not in said  # it never was a source
