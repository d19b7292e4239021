"""One run per source at a time, kept by the code location itself (`jobs.source_runs`), not
only by the run queue limit of the dagster.yaml the CLI writes: a run launched by `dg dev` or
`dagster dev` on any instance waits for an older run of its source, and says why."""

from __future__ import annotations

import threading
import time
import uuid

import dagster as dg

from clef_pipelines.jobs.launch import run_config
from clef_pipelines.jobs.location import build_definitions, build_resources
from tests.ingest.conftest import Workspace


def test_a_run_of_a_source_waits_for_an_older_one_whatever_launched_it(
    workspace: Workspace,
) -> None:
    """The wait is in the code, not only in the generated dagster.yaml: here no run queue
    limit applies (an in-process run), and the run still waits, saying why in its log."""
    workspace.ingest()
    settings = workspace.settings()
    job = build_definitions(settings).resolve_job_def("ingestion_job")
    with dg.DagsterInstance.get() as instance:
        older = instance.add_run(
            dg.DagsterRun(
                job_name="ingestion_job",
                run_id=str(uuid.uuid4()),
                status=dg.DagsterRunStatus.STARTED,
                tags={"dagster/partition": "sample"},
            )
        )
        run_id = str(uuid.uuid4())
        results: list[dg.ExecuteInProcessResult] = []
        worker = threading.Thread(
            target=lambda: results.append(
                job.execute_in_process(
                    partition_key="sample",
                    instance=instance,
                    resources=build_resources(settings),
                    run_config=run_config(log_level="INFO"),
                    run_id=run_id,
                    raise_on_error=False,
                )
            )
        )
        worker.start()
        said = f"waiting for run {older.run_id} of source 'sample' to finish"
        deadline = time.monotonic() + 120
        while not any(said in (e.user_message or "") for e in instance.all_logs(run_id)):
            assert worker.is_alive() and time.monotonic() < deadline, "the run did not wait"
            time.sleep(0.2)
        # Nothing of the waiting run was written while the older one was in progress.
        assert not any(
            e.is_dagster_event and e.dagster_event.is_step_materialization
            for e in instance.all_logs(run_id)
        )
        instance.report_run_canceled(older, "done (test)")
        worker.join(timeout=120)
        (result,) = results
        assert result.success
        assert result.get_asset_materialization_events()


def test_resources_show_their_settings_and_a_launch_may_set_them(workspace: Workspace) -> None:
    settings = workspace.settings()
    resources = build_resources(settings)
    store = resources["vector_store"]
    assert store.kind == "lancedb"  # type: ignore[union-attr]
    assert store.location == str(settings.data_path / "lancedb")  # type: ignore[union-attr]
    assert (resources["embedder"].kind, resources["embedder"].dimension) == ("hash", 64)  # type: ignore[union-attr]
    assert resources["clef"].backend == settings.clef.backend  # type: ignore[union-attr]
    # Set at launch, a field is what the run uses.
    elsewhere = workspace.root / "elsewhere"
    moved = type(store)(settings=store.settings, kind="lancedb", location=str(elsewhere))  # type: ignore[union-attr,call-arg]
    try:
        assert not moved.get().has_collection("docs")  # another, empty folder
        assert elsewhere.exists()
    finally:
        moved.teardown_after_execution(None)  # type: ignore[arg-type]
    from clef_pipelines.stores.factory import lancedb_path, with_location

    assert lancedb_path(with_location(settings.store, "", str(elsewhere)), settings.data_path) == (
        elsewhere
    )
