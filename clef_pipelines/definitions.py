"""The Dagster code location `clef_pipelines`: `dg dev`, `clef-pipelines ui` or workspace.yaml."""
# ruff: noqa: E402  (the malloc arena limit must run before the imports below; see there)

from __future__ import annotations

from collections.abc import Sequence

# First, before Dagster and the stores' native libraries start threads (each new thread can
# get a malloc arena of its own): every process that runs these assets loads this module (a
# run worker, `dg dev`, the CLI's in-process runs), and two arenas bound what the stores'
# runtimes keep (`limit_malloc_arenas`; `MALLOC_ARENA_MAX` in the environment overrides).
from clef_pipelines.ingest.process_memory import limit_malloc_arenas

limit_malloc_arenas()

import dagster as dg

from clef_pipelines.assets.evaluation import evaluation_assets
from clef_pipelines.assets.ingestion import ingestion_assets
from clef_pipelines.config import SourceConfig, load_settings
from clef_pipelines.jobs.evaluation import eval_job
from clef_pipelines.jobs.ingestion import (
    build_refresh_schedule,
    ingestion_job,
    source_change_sensor,
)
from clef_pipelines.resources.clef import ClefResource
from clef_pipelines.resources.embedder import EmbedderResource
from clef_pipelines.resources.parquet_io import PolarsParquetIOManager
from clef_pipelines.resources.settings import PipelineSettings, SourceOverride
from clef_pipelines.resources.store import VectorStoreResource

#: One name everywhere: pyproject's [tool.dagster] and [tool.dg], workspace.yaml, the UI.
CODE_LOCATION = "clef_pipelines"


def build_resources(
    config_path: str | None = None,
    sources: Sequence[SourceConfig] = (),
    overrides_json: str = "{}",
) -> dict[str, dg.ConfigurableResource | dg.ConfigurableIOManager]:
    settings = PipelineSettings(
        config_path=config_path,
        sources=[SourceOverride(**s.model_dump(mode="json")) for s in sources],
        overrides_json=overrides_json,
    )
    return {
        "pipeline_settings": settings,
        # Clef: initialised only by steps that ask for it (the screen and enrichment stages).
        "clef": ClefResource(config_file=config_path),
        "vector_store": VectorStoreResource(settings=settings),
        "embedder": EmbedderResource(settings=settings),
        "parquet_io": PolarsParquetIOManager(settings=settings),
    }


def build_definitions(config_path: str | None = None) -> dg.Definitions:
    settings = load_settings(config_path)
    return dg.Definitions(
        assets=[*ingestion_assets, *evaluation_assets],
        jobs=[ingestion_job, eval_job],
        sensors=[source_change_sensor],
        schedules=[build_refresh_schedule(settings.refresh_cron)],
        resources=build_resources(config_path),
        # Every run of these assets, however it is launched (the job, an asset-graph selection,
        # a backfill, the sensor, the schedule, the CLI), runs its steps in one process: the
        # embedder and store open once per run instead of once per step in a process each.
        executor=dg.in_process_executor,
    )


defs = build_definitions()
