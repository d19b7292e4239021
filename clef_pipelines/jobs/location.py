"""The code location's parts, built from one validated `Settings`: its resources and its
`Definitions`. `definitions.py` builds them from the config it loads once (`dg dev`, a run
worker); the CLI's in-process runs (`jobs.launch`) from the settings its command loaded.
"""
# ruff: noqa: E402  (the malloc arena limit must run before the imports below; see there)

from __future__ import annotations

# First, before Dagster and the stores' native libraries start threads (each new thread can
# get a malloc arena of its own): every process that runs these assets imports this module (a
# run worker and `dg dev` through definitions.py, the CLI's in-process runs through
# jobs.launch), and two arenas bound what the stores' runtimes keep (`limit_malloc_arenas`;
# `MALLOC_ARENA_MAX` in the environment overrides).
from clef_pipelines.ingest.process_memory import limit_malloc_arenas

limit_malloc_arenas()

import dagster as dg

from clef_pipelines.assets.checks import ingestion_checks
from clef_pipelines.assets.evaluation import evaluation_assets
from clef_pipelines.assets.ingestion import ingestion_assets
from clef_pipelines.config import Settings
from clef_pipelines.jobs.evaluation import eval_job
from clef_pipelines.jobs.ingestion import (
    build_refresh_schedule,
    ingestion_job,
    source_change_sensor,
)
from clef_pipelines.resources.clef import ClefResource
from clef_pipelines.resources.embedder import EmbedderResource
from clef_pipelines.resources.parquet_io import PolarsParquetIOManager
from clef_pipelines.resources.settings import PipelineSettings
from clef_pipelines.resources.store import VectorStoreResource
from clef_pipelines.stores.factory import store_location


def build_resources(
    settings: Settings,
) -> dict[str, dg.ConfigurableResource | dg.ConfigurableIOManager]:
    """Every resource of the location, each reading the one validated `settings`."""
    pipeline = PipelineSettings(validated=settings)
    return {
        "pipeline_settings": pipeline,
        # Clef: initialised only by steps that ask for it (the screen and enrichment stages).
        # The settings each resource uses show as its typed fields in the UI.
        "clef": ClefResource(
            settings=pipeline,
            backend=settings.clef.backend,
            model=settings.clef.model,
            base_url=settings.clef.base_url,
            api_key_env=settings.clef.api_key_env,
        ),
        "vector_store": VectorStoreResource(
            settings=pipeline,
            kind=settings.store.kind,
            location=store_location(settings.store, settings.data_path),
        ),
        "embedder": EmbedderResource(
            settings=pipeline,
            kind=settings.embedder.kind,
            model=settings.embedder.model,
            dimension=settings.embedder.dimension,
        ),
        "parquet_io": PolarsParquetIOManager(settings=pipeline),
    }


def build_definitions(settings: Settings) -> dg.Definitions:
    return dg.Definitions(
        assets=[*ingestion_assets, *evaluation_assets],
        asset_checks=ingestion_checks,
        jobs=[ingestion_job, eval_job],
        sensors=[source_change_sensor],
        schedules=[build_refresh_schedule(settings.refresh_cron)],
        resources=build_resources(settings),
        # Every run of these assets, however it is launched (the job, an asset-graph selection,
        # a backfill, the sensor, the schedule), runs its steps the same way: by default in one
        # process, so the embedder and store open once per run instead of once per step in a
        # process each; `executor: multiprocess` gives each step a process, as production
        # deployments run them. The CLI's runs are in-process whatever this says.
        executor=step_executor(settings),
    )


def configured_ingestion_job() -> dg.JobDefinition:
    """The location's ingestion job as the settings at ``$CLEF_PIPELINES_CONFIG`` build it
    (their ``executor`` included): a target for ``dg.reconstructable``, so that a step
    process of the multiprocess executor rebuilds the same job from the same file."""
    from clef_pipelines.config import load_settings

    return build_definitions(load_settings()).resolve_job_def("ingestion_job")


def step_executor(settings: Settings) -> dg.ExecutorDefinition:
    """The executor of the `executor` setting."""
    if settings.executor == "multiprocess":
        return dg.multiprocess_executor
    return dg.in_process_executor
