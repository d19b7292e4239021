"""The ingestion asset checks: recorded per source, runnable alone, blocking where a bad result
must not reach the index, restated (not cleared) by a run that changed nothing, and naming the
documents behind a failure."""

from __future__ import annotations

import math
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from dagster._core.event_api import PartitionKeyFilter

from clef_pipelines.assets.checks import ingestion_checks
from clef_pipelines.assets.ingestion import asset_key, ingestion_assets
from clef_pipelines.jobs.location import build_resources
from clef_pipelines.steering import checks
from clef_pipelines.steering.config import ChecksConfig
from tests.ingest.conftest import Ingested, Workspace, make_workspace

SIZES = dg.AssetCheckKey(asset_key("chunks"), "chunks_within_max_tokens")


def _two_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    ws = make_workspace(tmp_path, monkeypatch)
    other = ws.root / "other"
    other.mkdir()
    (other / "b.md").write_text("# Other\n\nA second source about rotating API keys.\n")
    ws.write_config(
        sources=[{"name": "sample", "path": "corpus"}, {"name": "other", "path": "other"}]
    )
    return ws


def _latest(key: dg.AssetCheckKey, partition: str) -> bool | None:
    with dg.DagsterInstance.get() as instance:
        found = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [key], partition_filter=PartitionKeyFilter(key=partition)
        )
    record = found.get(key)
    evaluation = record.evaluation if record else None
    return None if evaluation is None else evaluation.passed


def test_checks_are_per_source_and_the_two_that_guard_the_index_block() -> None:
    by_name = {}
    for definition in ingestion_checks:
        (spec,) = definition.check_specs
        by_name[spec.name] = spec
        assert spec.partitions_def is not None, spec.name
    assert {n for n, s in by_name.items() if s.blocking} == {
        "every_chunk_embedded",
        "queries_never_return_quarantined",
    }
    # The asset's own check (it needs the screen's report) is per source too.
    screened = next(a for a in ingestion_assets if a.key == asset_key("screened_paragraphs"))
    (coverage,) = screened.check_specs
    assert coverage.name == "guard_coverage" and coverage.partitions_def is not None


def test_a_failure_stays_with_its_source_until_that_source_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = _two_sources(tmp_path, monkeypatch)
    real = checks.chunk_sizes_over

    def failing(batches, max_tokens):  # noqa: ANN001, ANN202
        passed, facts = real(batches, max_tokens)
        return False, {**facts, "documents_over": ["guide.md: 9999 tokens"]}

    monkeypatch.setattr(checks, "chunk_sizes_over", failing)
    (sample,) = ws.ingest(["sample"])
    assert sample.checks["chunks:chunks_within_max_tokens"] is False
    monkeypatch.setattr(checks, "chunk_sizes_over", real)
    (other,) = ws.ingest(["other"])
    assert other.checks["chunks:chunks_within_max_tokens"] is True
    # Each source keeps its own result: the other source passing cleared nothing.
    assert _latest(SIZES, "sample") is False and _latest(SIZES, "other") is True

    # A refresh where nothing changed restates the failure (it is still there) ...
    (again,) = ws.ingest(["sample"])
    assert again.success
    assert again.checks["chunks:chunks_within_max_tokens"] is False
    facts = again.check_facts["chunks:chunks_within_max_tokens"]
    assert facts["standing"] is True and facts["judged_in_run"] == sample.run_id
    assert facts["documents_over"] == ["guide.md: 9999 tokens"]
    assert _latest(SIZES, "sample") is False

    # ... until the source passes: its chunks judged again.
    (fixed,) = ws.ingest(["sample"], force=True)
    assert fixed.checks["chunks:chunks_within_max_tokens"] is True
    assert _latest(SIZES, "sample") is True


def test_checks_run_alone_on_what_the_assets_hold(ingested: Ingested) -> None:
    workspace, first = ingested.workspace, ingested.report
    settings = workspace.settings()
    alone = dg.Definitions(
        assets=ingestion_assets,
        asset_checks=ingestion_checks,
        jobs=[
            dg.define_asset_job(
                "checks_alone", selection=dg.AssetSelection.checks(*ingestion_checks)
            )
        ],
        resources=build_resources(settings),
        executor=dg.in_process_executor,
    )
    with dg.DagsterInstance.get() as instance:
        # As the UI launches a check of one partition: the run's partition tag.
        result = alone.resolve_job_def("checks_alone").execute_in_process(
            instance=instance, tags={"dagster/partition": "sample"}
        )
    assert result.success
    assert not result.get_asset_materialization_events()  # no asset ran
    evaluations = result.get_asset_check_evaluations()
    assert {e.check_name for e in evaluations} == {
        spec.name for d in ingestion_checks for spec in d.check_specs
    }
    assert all(e.passed for e in evaluations), evaluations
    # Run alone, they judged what the source's last run left and the store: no restatement.
    assert not any("standing" in e.metadata for e in evaluations)
    assert first.checks["chunks:chunks_within_max_tokens"] is True


@pytest.mark.parametrize(
    ("check", "stopped"),
    [("embedded_over", "store_sync"), ("quarantine_hidden", "vector_indexes")],
)
def test_a_blocking_check_stops_the_index_step(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch, check: str, stopped: str
) -> None:
    monkeypatch.setattr(checks, check, lambda *a, **k: (False, {"documents_missing": ["a.md"]}))
    (report,) = workspace.ingest()
    assert not report.success
    assert stopped not in report.assets
    assert "vector_indexes" not in report.assets


def test_failing_checks_name_their_documents() -> None:
    bounds = ChecksConfig(max_quarantine_rate=0.0, max_drop_rate=0.0)
    embedded = pl.DataFrame(
        {"id": ["1", "2"], "doc_id": ["a.md", "b.md"], "vector": [[0.1, 0.2], [math.nan, 0.0]]}
    )
    ok, facts = checks.embedded_over([embedded], dimension=2)
    assert not ok and facts["documents_missing"] == ["b.md: 1"]

    chunks = pl.DataFrame(
        {
            "id": ["1", "2"],
            "doc_id": ["a.md", "b.md"],
            "tokens": [10, 900],
            "quarantined": [False] * 2,
        }
    )
    ok, facts = checks.chunk_sizes_over([chunks], max_tokens=512)
    assert not ok and facts["documents_over"] == ["b.md: 900 tokens"]

    ok, facts = checks.enrichment_drops_over([(chunks, chunks.head(1))], bounds)
    assert not ok and facts["documents_most_dropped"] == ["b.md: 1"]

    screened = pl.DataFrame(
        {
            "source": ["s", "s", "s"],
            "doc_id": ["a.md", "a.md", "b.md"],
            "source_uri": ["a.md", "a.md", "b.md"],
            "screened": [True, True, True],
            "screen_action": ["keep", "drop", "drop"],
        }
    )
    ok, facts = checks.screen_rates_over([screened], bounds)
    assert not ok and facts["documents_most_dropped"] == ["s/a.md: 1", "s/b.md: 1"]
