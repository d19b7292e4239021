"""The evaluation job, and how the CLI, benchmarks and tests run it in-process."""

from __future__ import annotations

import json
from typing import Any

import dagster as dg

from clef_pipelines.assets.evaluation import GROUP, dataset_partitions
from clef_pipelines.config import Settings
from clef_pipelines.jobs.launch import SourceRunReport, _plain, _root_message, ensure_dagster_home

eval_job = dg.define_asset_job(
    name="eval_job",
    selection=dg.AssetSelection.groups(GROUP),
    partitions_def=dataset_partitions,
    description=(
        "Evaluate one labelled dataset: candidates once, every system scored on them, the "
        "report. Ingest the dataset's source first (ingestion_job, same partition key)."
    ),
    executor_def=dg.in_process_executor,
)


def run_evaluation(
    settings: Settings,
    dataset: str,
    *,
    config_path: str | None,
    overrides: dict[str, Any] | None = None,
    log_level: str = "WARNING",
) -> SourceRunReport:
    """Ingest the dataset's source (when it has documents), then run `eval_job` for it."""
    from clef_pipelines.definitions import build_definitions, build_resources
    from clef_pipelines.evals.sources import with_eval_sources
    from clef_pipelines.jobs.launch import run_ingestion

    settings = with_eval_sources(settings)
    if any(s.name == dataset for s in settings.sources):
        ingested = run_ingestion(
            settings, [dataset], config_path=config_path, overrides=overrides, log_level=log_level
        )[0]
        if not ingested.success:
            return ingested
    ensure_dagster_home(settings)
    instance = dg.DagsterInstance.get()
    name = dataset_partitions.name or "eval_datasets"
    if dataset not in instance.get_dynamic_partitions(name):
        instance.add_dynamic_partitions(name, [dataset])
    job = build_definitions(config_path).resolve_job_def("eval_job")
    result = job.execute_in_process(
        partition_key=dataset,
        instance=instance,
        resources=build_resources(config_path, overrides_json=json.dumps(overrides or {})),
        raise_on_error=False,
        tags={"clef/launched_by": "cli"},
        run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
    )
    report = SourceRunReport(source=dataset, run_id=result.run_id, success=result.success)
    for event in result.all_events:
        if event.event_type_value == "ASSET_MATERIALIZATION":
            mat = event.event_specific_data.materialization  # type: ignore[union-attr]
            report.assets[mat.asset_key.path[-1]] = {k: _plain(v) for k, v in mat.metadata.items()}
        elif event.event_type_value == "STEP_FAILURE" and report.error is None:
            report.error = _root_message(event.event_specific_data.error)  # type: ignore[union-attr]
    return report
