"""Run the ingestion and evaluation jobs in-process against a persistent Dagster instance.

The CLI, the benchmarks and the tests launch runs through here, so every run they make is a real
Dagster run that shows in the UI (when DAGSTER_HOME is the same). Sources given as paths on the
command line (not in the config) run in a throwaway instance instead: they never become
partitions of the shared one.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Collection, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import dagster as dg
import yaml

from clef_pipelines.assets.evaluation import dataset_partitions
from clef_pipelines.child_signals import let_children_be_terminated
from clef_pipelines.config import Settings
from clef_pipelines.deploy import ONE_RUN_PER_SOURCE
from clef_pipelines.evals.sources import with_eval_sources
from clef_pipelines.ingest.clean_runs import record_clean_run, run_signal
from clef_pipelines.ingest.fingerprints import configured_pipeline_fingerprint
from clef_pipelines.ingest.locks import CollectionBusy, collection_lock, held, lock_path
from clef_pipelines.jobs.ingestion import PARTITIONS, reconcile_partitions, record_project
from clef_pipelines.jobs.location import build_definitions, build_resources
from clef_pipelines.jobs.results import SourceRunReport
from clef_pipelines.jobs.source_runs import (
    HOST_TAG,
    PID_TAG,
    SourceBusy,
    process_tags,
    wait_for_source,
)
from clef_pipelines.privacy import apply_file_privacy

# What the generated dagster.yaml must hold; other settings in an existing file are kept.
INSTANCE_DEFAULTS: dict[str, Any] = {
    "telemetry": {"enabled": False},
    "nux": {"enabled": False},
    "concurrency": {"runs": {"tag_concurrency_limits": [ONE_RUN_PER_SOURCE]}},
}

LAUNCHED_BY_TAG = "clef/launched_by"
__all__ = ["HOST_TAG", "PID_TAG", "SourceBusy", "wait_for_source"]


def _with_defaults(config: dict[str, Any]) -> dict[str, Any]:
    out = dict(config)
    out.setdefault("telemetry", INSTANCE_DEFAULTS["telemetry"])
    out.setdefault("nux", INSTANCE_DEFAULTS["nux"])
    concurrency = dict(out.get("concurrency") or {})
    runs = dict(concurrency.get("runs") or {})
    limits = list(runs.get("tag_concurrency_limits") or [])
    if not any(limit.get("key") == ONE_RUN_PER_SOURCE["key"] for limit in limits):
        limits.append(ONE_RUN_PER_SOURCE)
    runs["tag_concurrency_limits"] = limits
    concurrency["runs"] = runs
    out["concurrency"] = concurrency
    return out


def ensure_dagster_home(settings: Settings) -> Path:
    """Use $DAGSTER_HOME, or <data_dir>/dagster, so runs and partitions persist between calls;
    make sure its dagster.yaml has telemetry off and one run per source at a time."""
    apply_file_privacy(settings)
    home = Path(os.environ.get("DAGSTER_HOME") or settings.data_path / "dagster")
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    current = (yaml.safe_load(cfg.read_text(encoding="utf-8")) or {}) if cfg.exists() else {}
    wanted = _with_defaults(current)
    if wanted != current:
        header = (
            "# Written by clef-pipelines: telemetry off, and at most one run per source\n"
            "# (partition) at a time. Other settings you add here are kept.\n"
        )
        cfg.write_text(header + yaml.safe_dump(wanted, sort_keys=False), encoding="utf-8")
    record_project(home, settings)
    os.environ["DAGSTER_HOME"] = str(home)
    os.environ.setdefault("DAGSTER_DG_UPDATE_CHECK_ENABLED", "0")
    return home


class RunInterrupted(Exception):
    """Ctrl-C during a run: the run is marked canceled in the instance."""

    def __init__(self, source: str, run_id: str) -> None:
        super().__init__(f"interrupted: run {run_id} of source {source!r} marked canceled")
        self.source = source
        self.run_id = run_id


def cancel_runs_of_this_process(reason: str = "interrupted (Ctrl-C)") -> list[tuple[str, str]]:
    """Mark every run this process started and that is still going as canceled in the
    persistent instance; returns (source, run id) pairs."""
    canceled: list[tuple[str, str]] = []
    with dg.DagsterInstance.get() as instance:
        for record in instance.get_run_records(
            dg.RunsFilter(
                statuses=[dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED],
                tags={PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()},
            )
        ):
            run = record.dagster_run
            instance.report_run_canceled(run, reason)
            canceled.append((run.tags.get("dagster/partition", "?"), run.run_id))
    return canceled


def run_config(
    force: bool = False, force_documents: Sequence[str] = (), log_level: str = "WARNING"
) -> dict[str, Any]:
    """The typed run config of `ingestion_job` (what the launchpad shows)."""
    from clef_pipelines.assets.ingestion import asset_key

    op = "__".join(asset_key("source_documents").path)
    return {
        "ops": {op: {"config": {"force": force, "force_documents": list(force_documents)}}},
        "loggers": {"console": {"config": {"log_level": log_level}}},
    }


def _check_lancedb_tables(settings: Settings, sources: list[str]) -> None:
    """Refuse, in one line (`DamagedTable`), to run into a LanceDB table whose files are
    damaged: from metadata alone (`stores.lancedb_health`), before any step, where the
    failure would otherwise surface as a step's traceback from Lance's runtime."""
    if settings.store.kind != "lancedb":
        return
    from clef_pipelines.objectstore import is_cloud_url
    from clef_pipelines.stores.factory import lancedb_location
    from clef_pipelines.stores.lancedb_health import check_tables

    location = lancedb_location(settings.store, settings.data_path)
    if is_cloud_url(location):  # the check compares local files' sizes with the manifest
        return
    names = {settings.collection_of(settings.source(name)) for name in sources}
    check_tables(Path(location), names)


def run_ingestion(
    settings: Settings,
    sources: list[str],
    *,
    adhoc: Collection[str] = (),
    force: bool = False,
    force_documents: Sequence[str] = (),
    log_level: str = "WARNING",
    on_wait: Callable[[str], None] | None = None,
    wait_timeout_s: float = 600.0,
) -> list[SourceRunReport]:
    """One run of `ingestion_job` per source partition, in this process, in order.

    `settings` are the caller's validated settings, every source to run among them (the
    configured ones, and whatever the command merged in: paths from its command line, a
    configured source sent to another collection, an eval dataset); the runs' resources hold
    this very object. Sources named in `adhoc` (paths given on the command line) run in a
    throwaway instance; the others in the persistent instance, whose partitions are first made
    equal to them and the other configured sources.
    """
    settings = with_eval_sources(settings)
    ensure_dagster_home(settings)
    _check_lancedb_tables(settings, sources)
    partitioned = settings.model_copy(
        update={"sources": [s for s in settings.sources if s.name not in adhoc]}
    )
    job = build_definitions(settings).resolve_job_def("ingestion_job")
    resources = build_resources(settings)
    reports: list[SourceRunReport] = []
    wait_s = settings.ingest_lock_timeout_s
    pipeline = _or_none(lambda: configured_pipeline_fingerprint(settings))
    # Two first runs in a fresh data folder must not race to create the instance's tables.
    with held(
        lock_path(settings.data_path, "dagster-instance"),
        what="the Dagster instance",
        timeout_s=wait_s,
    ):
        shared = dg.DagsterInstance.get()
    adhoc_instance: dg.DagsterInstance | None = None
    try:
        if any(s not in adhoc for s in sources):
            reconcile_partitions(shared, partitioned)
        for source in sources:
            if source not in adhoc:
                instance = shared
                if source not in instance.get_dynamic_partitions(PARTITIONS):
                    instance.add_dynamic_partitions(PARTITIONS, [source])
                wait_for_source(instance, source, timeout_s=wait_timeout_s, on_wait=on_wait)
            else:
                adhoc_instance = adhoc_instance or dg.DagsterInstance.ephemeral()
                instance = adhoc_instance
                instance.add_dynamic_partitions(PARTITIONS, [source])
            collection = settings.collection_of(settings.source(source))
            try:
                # One ingest at a time per collection, for the whole run: its plan is made
                # against a store no other run is changing.
                with collection_lock(settings.data_path, collection, timeout_s=wait_s):
                    # Taken before the run: files edited while it runs differ from it.
                    signal = (
                        _or_none(partial(run_signal, settings, settings.source(source), pipeline))
                        if pipeline is not None
                        else None
                    )
                    report = _run_one(
                        job, instance, resources, source, force, force_documents, log_level
                    )
                    if report.clean and signal is not None:
                        failed = sorted(k for k, ok in report.checks.items() if not ok)
                        record_clean_run(settings, source, signal, report.run_id, failed)
                    reports.append(report)
            except CollectionBusy as exc:
                reports.append(
                    SourceRunReport(source=source, run_id="", success=False, error=str(exc))
                )
    finally:
        if adhoc_instance is not None:
            adhoc_instance.dispose()
    return reports


def _or_none(compute: Callable[[], str]) -> str | None:
    """A clean-run signal, or None where it cannot be computed: a guard whose weights file is
    missing, say. That source's run then goes on and reports the error itself (naming the
    setting), and no record is kept, so the next `ingest` runs it again."""
    try:
        return compute()
    except Exception:  # noqa: BLE001 - whatever stops the signal, the run reports
        return None


def run_evaluation(
    settings: Settings, dataset: str, *, log_level: str = "WARNING"
) -> SourceRunReport:
    """Ingest the dataset's source (when it has documents), then run `eval_job` for it.

    `settings` are the caller's validated settings with the dataset among `evals.datasets`
    (`cli.eval_cmds.eval_overrides` adds one given on the command line)."""
    settings = with_eval_sources(settings)
    if any(s.name == dataset for s in settings.sources):
        ingested = run_ingestion(settings, [dataset], log_level=log_level)[0]
        if not ingested.success:
            return ingested
    ensure_dagster_home(settings)
    instance = dg.DagsterInstance.get()
    name = dataset_partitions.name or "eval_datasets"
    if dataset not in instance.get_dynamic_partitions(name):
        instance.add_dynamic_partitions(name, [dataset])
    job = build_definitions(settings).resolve_job_def("eval_job")
    let_children_be_terminated()
    result = job.execute_in_process(
        partition_key=dataset,
        instance=instance,
        resources=build_resources(settings),
        raise_on_error=False,
        tags={LAUNCHED_BY_TAG: "cli"},
        run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
    )
    return SourceRunReport.from_run(dataset, result)


def _run_one(
    job: dg.JobDefinition,
    instance: dg.DagsterInstance,
    resources: dict[str, Any],
    source: str,
    force: bool,
    force_documents: Sequence[str],
    log_level: str,
) -> SourceRunReport:
    run_id = str(uuid.uuid4())
    let_children_be_terminated()  # each step's log tails are stopped with SIGTERM
    try:
        result = job.execute_in_process(
            partition_key=source,
            instance=instance,
            resources=resources,
            raise_on_error=False,
            run_id=run_id,
            tags={LAUNCHED_BY_TAG: "cli", **process_tags()},
            run_config=run_config(force, force_documents, log_level),
        )
    except (KeyboardInterrupt, dg.DagsterExecutionInterruptedError):
        run = instance.get_run_by_id(run_id)
        if run is not None and not run.is_finished:
            instance.report_run_canceled(run, "interrupted (Ctrl-C)")
        raise RunInterrupted(source, run_id) from None
    run = instance.get_run_by_id(run_id)
    return SourceRunReport.from_run(source, result, run.status.value if run is not None else "")
