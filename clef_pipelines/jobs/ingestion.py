"""The ingestion job, the sensor that keeps partitions equal to the sources, and the refresh.

Partitions follow the configured sources: the sensor (every tick), the schedule and the CLI add
a partition for each new source and delete the partition of a source that left the config. A
removed source's records stay in its collection until the user deletes them
(`clef-pipelines delete --collection C --source NAME`); the sensor's tick log says so.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import dagster as dg

from clef_pipelines.assets.ingestion import GROUP, asset_key, source_partitions
from clef_pipelines.config import Settings
from clef_pipelines.ingest import stages
from clef_pipelines.ingest.fingerprints import configured_pipeline_fingerprint
from clef_pipelines.resources.settings import PipelineSettings

PARTITIONS = source_partitions.name or "sources"

ingestion_job = dg.define_asset_job(
    name="ingestion_job",
    selection=dg.AssetSelection.groups(GROUP),
    description="Ingest one source into its collection: parse, screen, chunk, enrich, embed, sync.",
    # No executor of its own: the location's (`executor` setting, `jobs.location`), in-process
    # by default, so every launch of these assets runs its steps the same way.
)


def partition_changes(registered: Iterable[str], settings: Settings) -> tuple[list[str], list[str]]:
    """(to add, to remove) so that the partitions are exactly the configured sources. A config
    with no sources removes nothing: that is what a process sees that loaded another file, or
    none (the UI once started without the user's config), not a user who removed every
    source; `no_sources_message` says so in the tick's log."""
    have = set(registered)
    configured = [s.name for s in settings.sources]
    if not configured:
        return [], []
    return [n for n in configured if n not in have], sorted(have - set(configured))


#: In a Dagster home: the data folder of the project whose commands use it (`record_project`).
PROJECT_FILE = "clef-project.json"


def record_project(home: Path, settings: Settings) -> None:
    """Remember which project (its data folder) uses this Dagster home: a code location that
    loaded another project's config must not reconcile this project's partitions."""
    path = home / PROJECT_FILE
    wanted = {"data_dir": str(settings.data_path.resolve())}
    try:
        if path.exists() and json.loads(path.read_text(encoding="utf-8")) == wanted:
            return
        path.write_text(json.dumps(wanted) + "\n", encoding="utf-8")
    except (OSError, ValueError):  # a marker that cannot be kept only loses this safeguard
        return


def _recorded_data_dir(root: str | None) -> str | None:
    if not root:
        return None
    try:
        return json.loads((Path(root) / PROJECT_FILE).read_text(encoding="utf-8"))["data_dir"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def keep_partitions_reason(
    settings: Settings, registered: Iterable[str], instance_root: str | None = None
) -> str | None:
    """Why no partition may be removed on this tick (None: partitions follow the config).
    A config with no sources, or one of another project than the one whose commands use this
    Dagster home, is what a process sees that loaded the wrong file (the UI once started
    without the user's config and removed every partition), not a user who removed sources."""
    kept = sorted(registered)
    if not kept:
        return None
    from clef_pipelines.config import CONFIG_ENV

    origin = os.environ.get(CONFIG_ENV) or f"{settings.base_dir} (no config file named)"
    fix = (
        "if this is not your config, start the UI with `clef-pipelines ui` from the folder of "
        f"your clef-pipelines.yaml or set ${CONFIG_ENV}"
    )
    if not settings.sources:
        return (
            f"the config loaded here ({origin}) has no sources: partition(s) {', '.join(kept)} "
            f"are kept, not removed; {fix}; to remove a source, delete its entry and keep at "
            "least one other"
        )
    recorded = _recorded_data_dir(instance_root)
    here = str(settings.data_path.resolve())
    if recorded is not None and recorded != here:
        return (
            f"the config loaded here ({origin}) keeps its data in {here}, but this Dagster "
            f"instance belongs to the project whose data is in {recorded}: no partition is "
            f"removed; {fix}"
        )
    return None


def removed_source_message(names: Iterable[str]) -> str:
    listed = ", ".join(names)
    return (
        f"source(s) {listed} left the config: their partitions are removed; their records stay "
        "in the store until you delete them (clef-pipelines delete --collection C --source NAME)"
    )


def unknown_partition_message(names: Iterable[str], settings: Settings) -> str:
    """Why partitions that never named a configured source (one added with "Add a partition"
    in the UI, say) are removed."""
    listed = ", ".join(repr(n) for n in names)
    configured = ", ".join(s.name for s in settings.sources) or "none"
    return (
        f"partition(s) {listed} name no configured source (configured: {configured}): removed. "
        "Partitions follow the config's `sources:`; to ingest a folder or JSONL file, add it "
        "there (name and path) and reload the code location"
    )


def pruned_partitions(
    instance: dg.DagsterInstance, names: Iterable[str], settings: Settings
) -> list[str]:
    """The log lines for removing `names`: sources that left the config (their partition was
    ingested: records may be in the store) apart from partitions that never named a source."""
    names = sorted(names)
    if not names:
        return []
    ingested = set(instance.get_materialized_partitions(asset_key("source_documents")))
    left = [n for n in names if n in ingested]
    unknown = [n for n in names if n not in ingested]
    lines = [removed_source_message(left)] if left else []
    return lines + ([unknown_partition_message(unknown, settings)] if unknown else [])


def reconcile_partitions(instance: dg.DagsterInstance, settings: Settings) -> tuple[list, list]:
    """Make the instance's partitions the configured sources now; returns (added, removed)."""
    added, removed = partition_changes(instance.get_dynamic_partitions(PARTITIONS), settings)
    if added:
        instance.add_dynamic_partitions(PARTITIONS, added)
    for name in removed:
        instance.delete_dynamic_partition(PARTITIONS, name)
    return added, removed


#: The cursor's count of the runs the sensor requested (no source name holds '#').
_REQUESTED = "#requested"


def change_signal(source_fingerprint: str, pipeline_fingerprint: str) -> str:
    """What the sensor compares between ticks: the source's files and the settings that shape
    its chunks (`documents.pipeline_fingerprint`: chunking, steering thresholds, the guard's
    weights, the embedder, ...)."""
    return f"{source_fingerprint}:{pipeline_fingerprint}"


def _last_signal(instance: dg.DagsterInstance, source: str) -> str | None:
    """The change signal of the latest inventory of the source, if any (an inventory from
    before it recorded its pipeline fingerprint gives a signal that differs: one run)."""
    result = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key("source_documents"), asset_partitions=[source]),
        limit=1,
    )
    for record in result.records:
        mat = record.asset_materialization
        if mat is None or "source_fingerprint" not in mat.metadata:
            continue
        values = [mat.metadata.get(k) for k in ("source_fingerprint", "pipeline_fingerprint")]
        return change_signal(*(str(getattr(v, "value", v) or "") for v in values))
    return None


@dg.sensor(
    job=ingestion_job,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=(
        "Keeps one partition per configured source (adds new sources, removes sources that "
        "left the config and partitions that name no configured source, saying why) and requests an ingestion run when a source's files change (names, "
        "sizes, modification times) or the settings that shape its chunks (chunking, "
        "steering, guard weights, embedder) change since its last inventory."
    ),
)
def source_change_sensor(
    context: dg.SensorEvaluationContext, pipeline_settings: PipelineSettings
) -> dg.SensorResult:
    settings = pipeline_settings.settings
    registered = context.instance.get_dynamic_partitions(PARTITIONS)
    kept = keep_partitions_reason(settings, registered, context.instance.root_directory)
    if kept:
        context.log.warning(kept)
        return dg.SensorResult(skip_reason=kept, cursor=context.cursor)
    to_add, to_remove = partition_changes(registered, settings)
    previous = json.loads(context.cursor) if context.cursor else {}
    # Counted into each run key: Dagster drops a request whose key it has seen, and a setting
    # changed and then changed back gives a signal seen before.
    requested = int(previous.pop(_REQUESTED, 0))
    current: dict[str, str | int] = {}
    requests: list[dg.RunRequest] = []
    pipeline = configured_pipeline_fingerprint(settings) if settings.sources else ""
    for source in settings.sources:
        signal = change_signal(stages.source_fingerprint(settings, source), pipeline)
        current[source.name] = signal
        # Without a cursor entry (first tick, new source), the last inventory's signal says
        # whether the CLI or another launch already ingested these files with these settings.
        before = previous.get(source.name) or _last_signal(context.instance, source.name)
        if before != signal:
            requested += 1
            requests.append(
                dg.RunRequest(
                    partition_key=source.name, run_key=f"{source.name}:{signal}:{requested}"
                )
            )
    partition_requests: list = []
    if to_add:
        partition_requests.append(source_partitions.build_add_request(to_add))
    if to_remove:
        partition_requests.append(source_partitions.build_delete_request(to_remove))
        for line in pruned_partitions(context.instance, to_remove, settings):
            context.log.warning(line)
    return dg.SensorResult(
        run_requests=requests,
        cursor=json.dumps({**current, _REQUESTED: requested}, sort_keys=True),
        dynamic_partitions_requests=partition_requests,
    )


def build_refresh_schedule(cron: str) -> dg.ScheduleDefinition:
    @dg.schedule(
        job=ingestion_job,
        cron_schedule=cron,
        name="source_refresh_schedule",
        description=(
            "Re-ingests every configured source (and only those); unchanged documents cost nothing."
        ),
    )
    def source_refresh_schedule(
        context: dg.ScheduleEvaluationContext, pipeline_settings: PipelineSettings
    ):  # type: ignore[no-untyped-def]
        settings = pipeline_settings.settings
        registered = context.instance.get_dynamic_partitions(PARTITIONS)
        kept = keep_partitions_reason(settings, registered, context.instance.root_directory)
        if kept or not settings.sources:
            return dg.SkipReason(kept or "no sources configured")
        lines = pruned_partitions(
            context.instance, partition_changes(registered, settings)[1], settings
        )
        reconcile_partitions(context.instance, settings)
        for line in lines:
            context.log.warning(line)
        tick = (
            context.scheduled_execution_time.isoformat() if context.scheduled_execution_time else ""
        )
        return [
            dg.RunRequest(partition_key=s.name, run_key=f"{s.name}:{tick}")
            for s in settings.sources
        ]

    return source_refresh_schedule
