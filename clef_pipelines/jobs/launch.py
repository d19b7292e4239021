"""Run the ingestion job in-process against a persistent Dagster instance.

The CLI, the benchmarks and the tests launch runs through here, so every run they make is a real
Dagster run that shows in the UI (when DAGSTER_HOME is the same).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from clef_pipelines.assets.ingestion import source_partitions
from clef_pipelines.config import Settings

DAGSTER_YAML = """\
telemetry:
  enabled: false
nux:
  enabled: false
"""


def ensure_dagster_home(settings: Settings) -> Path:
    """Use $DAGSTER_HOME, or <data_dir>/dagster, so runs and partitions persist between calls."""
    home = Path(os.environ.get("DAGSTER_HOME") or settings.data_path / "dagster")
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    if not cfg.exists():
        cfg.write_text(DAGSTER_YAML, encoding="utf-8")
    os.environ["DAGSTER_HOME"] = str(home)
    os.environ.setdefault("DAGSTER_DG_UPDATE_CHECK_ENABLED", "0")
    return home


@dataclass
class SourceRunReport:
    source: str
    run_id: str
    success: bool
    assets: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Asset check results: "asset:check" -> passed.
    checks: dict[str, bool] = field(default_factory=dict)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "run_id": self.run_id,
            "success": self.success,
            "error": self.error,
            "assets": self.assets,
            "checks": self.checks,
        }


def _plain(value: Any) -> Any:
    """Dagster metadata values -> JSON-friendly Python values."""
    inner = getattr(value, "value", value)
    if isinstance(inner, (str, int, float, bool)) or inner is None:
        return inner
    if isinstance(inner, (dict, list)):
        return inner
    return str(inner)


def run_ingestion(
    settings: Settings,
    sources: list[str],
    *,
    config_path: str | None,
    overrides: dict[str, Any] | None = None,
    force: bool = False,
    log_level: str = "WARNING",
) -> list[SourceRunReport]:
    """One run of `ingestion_job` per source partition, in this process, in order."""
    from clef_pipelines.definitions import build_definitions, build_resources

    ensure_dagster_home(settings)
    instance = dg.DagsterInstance.get()
    registered = set(instance.get_dynamic_partitions(source_partitions.name or "sources"))
    missing = [s for s in sources if s not in registered]
    if missing:
        instance.add_dynamic_partitions(source_partitions.name or "sources", missing)
    job = build_definitions(config_path).resolve_job_def("ingestion_job")
    resources = build_resources(config_path, json.dumps(overrides or {}))
    reports: list[SourceRunReport] = []
    for source in sources:
        result = job.execute_in_process(
            partition_key=source,
            instance=instance,
            resources=resources,
            raise_on_error=False,
            tags={"clef/force": "true" if force else "false", "clef/launched_by": "cli"},
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
        )
        report = SourceRunReport(source=source, run_id=result.run_id, success=result.success)
        for event in result.all_events:
            if event.event_type_value == "ASSET_MATERIALIZATION":
                mat = event.event_specific_data.materialization  # type: ignore[union-attr]
                report.assets[mat.asset_key.to_user_string()] = {
                    k: _plain(v) for k, v in mat.metadata.items()
                }
            elif event.event_type_value == "ASSET_CHECK_EVALUATION":
                check = event.event_specific_data  # type: ignore[union-attr]
                key = f"{check.asset_key.to_user_string()}:{check.check_name}"
                report.checks[key] = bool(check.passed)
            elif event.event_type_value == "STEP_FAILURE" and report.error is None:
                err = event.event_specific_data.error  # type: ignore[union-attr]
                report.error = _root_message(err)
        reports.append(report)
    return reports


def _root_message(err: Any) -> str:
    """The innermost user error message of a Dagster step failure."""
    while getattr(err, "cause", None) is not None:
        err = err.cause
    return f"{getattr(err, 'cls_name', 'Error')}: {getattr(err, 'message', str(err)).strip()}"
