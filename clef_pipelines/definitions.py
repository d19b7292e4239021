"""The Dagster code location: `dagster dev -m clef_pipelines.definitions` or workspace.yaml."""

from __future__ import annotations

import dagster as dg

from clef_pipelines.assets.evaluation import evaluation_assets
from clef_pipelines.assets.ingestion import ingestion_assets
from clef_pipelines.config import load_settings
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


def build_resources(
    config_path: str | None = None, overrides_json: str = "{}"
) -> dict[str, dg.ConfigurableResource | dg.ConfigurableIOManager]:
    settings = PipelineSettings(config_path=config_path, overrides_json=overrides_json)
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
    )


defs = build_definitions()
