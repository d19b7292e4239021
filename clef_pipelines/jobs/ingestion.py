"""The ingestion job, the sensor that registers sources and watches them, and the refresh."""

import json

import dagster as dg

from clef_pipelines.assets.ingestion import GROUP, source_partitions
from clef_pipelines.ingest import stages
from clef_pipelines.resources.settings import PipelineSettings

ingestion_job = dg.define_asset_job(
    name="ingestion_job",
    selection=dg.AssetSelection.groups(GROUP),
    partitions_def=source_partitions,
    description="Ingest one source into its collection: parse, screen, chunk, enrich, embed, sync.",
    # In-process: the steps share one process, so the embedder loads once per run and the
    # default multiprocess executor's seconds of start-up per step are avoided.
    executor_def=dg.in_process_executor,
)


@dg.sensor(
    job=ingestion_job,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=(
        "Registers a partition for every configured source and requests an ingestion run "
        "when a source's files change (names, sizes, modification times)."
    ),
)
def source_change_sensor(
    context: dg.SensorEvaluationContext, pipeline_settings: PipelineSettings
) -> dg.SensorResult:
    settings = pipeline_settings.settings
    registered = set(context.instance.get_dynamic_partitions(source_partitions.name or "sources"))
    to_add = [s.name for s in settings.sources if s.name not in registered]
    previous = json.loads(context.cursor) if context.cursor else {}
    current: dict[str, str] = {}
    requests: list[dg.RunRequest] = []
    for source in settings.sources:
        fingerprint = stages.source_fingerprint(settings, source)
        current[source.name] = fingerprint
        if previous.get(source.name) != fingerprint:
            requests.append(
                dg.RunRequest(partition_key=source.name, run_key=f"{source.name}:{fingerprint}")
            )
    return dg.SensorResult(
        run_requests=requests,
        cursor=json.dumps(current, sort_keys=True),
        dynamic_partitions_requests=[source_partitions.build_add_request(to_add)] if to_add else [],
    )


def build_refresh_schedule(cron: str) -> dg.ScheduleDefinition:
    @dg.schedule(
        job=ingestion_job,
        cron_schedule=cron,
        name="source_refresh_schedule",
        description="Re-ingests every registered source; unchanged documents cost nothing.",
    )
    def source_refresh_schedule(context: dg.ScheduleEvaluationContext):  # type: ignore[no-untyped-def]
        keys = context.instance.get_dynamic_partitions(source_partitions.name or "sources")
        if not keys:
            return dg.SkipReason("no sources registered yet (the source sensor registers them)")
        tick = (
            context.scheduled_execution_time.isoformat() if context.scheduled_execution_time else ""
        )
        return [dg.RunRequest(partition_key=k, run_key=f"{k}:{tick}") for k in keys]

    return source_refresh_schedule
