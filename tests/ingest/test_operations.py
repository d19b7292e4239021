"""Operating the pipeline: typed run config, skipped no-change steps that keep the assets'
state, the generated instance config, and the CLI's --version, commented init, delete of a
removed source and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml
from typer.testing import CliRunner

from clef_pipelines.cli.main import app
from clef_pipelines.config import Settings, load_settings
from tests.ingest.conftest import Ingested, Workspace, make_workspace

runner = CliRunner()


def test_run_config_is_typed_and_force_documents_reprocesses_only_matches(
    ingested: Ingested,
) -> None:
    from clef_pipelines.assets.ingestion import source_documents

    fields = source_documents.op.config_schema.config_type.fields  # type: ignore[union-attr]
    assert {"force", "force_documents"} <= set(fields)
    assert fields["force"].description and fields["force"].default_value is False

    workspace = ingested.workspace
    (some,) = workspace.ingest(force_documents=["*.md"])
    n_md = sum(1 for _ in workspace.corpus.glob("*.md"))
    assert some.assets["source_documents"]["documents_changed"] == n_md
    assert some.assets["parsed_blocks"]["documents_parsed"] == n_md
    (everything,) = workspace.ingest(force=True)
    n_files = sum(1 for p in workspace.corpus.rglob("*") if p.is_file())
    assert everything.assets["source_documents"]["documents_changed"] == n_files


def test_no_change_run_materialises_every_asset_and_says_what_each_holds(
    ingested: Ingested,
) -> None:
    workspace, first = ingested.workspace, ingested.report
    stored = first.assets["store_sync"]["store/chunks"]
    assert first.assets["chunks"]["dagster/row_count"] > 0
    # A delta intermediate says it holds the run's change, with the whole-state counts beside.
    assert first.assets["chunks"]["holds"] == "this run's change"
    (again,) = workspace.ingest()
    assert again.success
    docs = again.assets["source_documents"]
    assert docs["changed"] is False
    assert docs["store/records"] == first.assets["store_sync"]["store/records"] > 0
    assert docs["store/documents"] == docs["documents"]
    assert docs["store/tokens"] > 0 and docs["store/quarantined"] == 0
    for name in ("parsed_blocks", "screened_paragraphs", "chunks", "enrichments", "embeddings"):
        meta = again.assets[name]
        assert meta["changed"] is False and meta["dagster/row_count"] == 0, name
        assert meta["holds"] == "this run's change", name
        assert meta["state/documents"] == docs["documents"], name
        assert meta["store/chunks"] == stored, name
    # The sync and the index describe the whole state, not the empty change.
    assert again.assets["store_sync"]["changed"] is False
    assert (
        again.assets["store_sync"]["dagster/row_count"]
        == first.assets["store_sync"]["dagster/row_count"]
    )
    assert "vector_index" in again.assets["vector_indexes"]
    with dg.DagsterInstance.get() as instance:
        schema = instance.get_latest_materialization_event(dg.AssetKey(["clef", "chunks"]))
        columns = schema.asset_materialization.metadata["dagster/column_schema"].value  # type: ignore[union-attr]
        # An empty change keeps the columns: the schema still says what a step reads.
        assert "embed_text" in {c.name for c in columns.columns}
        assert instance.get_runs()[0].tags["dagster/partition"] == "sample"


def test_generated_instance_config_keeps_user_settings_and_limits_runs_per_source(
    workspace: Workspace,
) -> None:
    from clef_pipelines.jobs.launch import ensure_dagster_home

    home = workspace.root / "dagster"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("run_monitoring:\n  enabled: true\n")
    ensure_dagster_home(workspace.settings())
    written = yaml.safe_load((home / "dagster.yaml").read_text())
    assert written["run_monitoring"] == {"enabled": True}
    assert written["telemetry"] == {"enabled": False}
    (limit,) = written["concurrency"]["runs"]["tag_concurrency_limits"]
    assert limit == {
        "key": "dagster/partition",
        "value": {"applyLimitPerUniqueValue": True},
        "limit": 1,
    }
    with dg.DagsterInstance.get() as instance:  # Dagster accepts the file
        assert instance.get_concurrency_config().run_queue_config.tag_concurrency_limits


def test_version_and_commented_init(tmp_path: Path) -> None:
    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.output.startswith("clef-pipelines ")
    assert "dagster 1.13" in version.output

    target = tmp_path / "c.yaml"
    assert runner.invoke(app, ["init", str(target), "--source", "docs"]).exit_code == 0
    lines = target.read_text().splitlines()
    settings = load_settings(target)
    assert settings.sources[0].path == "docs"
    exclude = {"sources", "base_dir"}
    assert settings.model_dump(exclude=exclude) == Settings().model_dump(exclude=exclude)
    # Every setting line (a key with a value) comes right after a comment with its default.
    in_sources = False
    for i, line in enumerate(lines):
        stripped = line.strip()
        if line.startswith("sources:"):
            in_sources = True  # its entries' fields are described before `sources:`
        elif not stripped:
            in_sources = False
        if in_sources or stripped.startswith("#") or not stripped or stripped.endswith(":"):
            continue
        comment = lines[i - 1].strip()
        assert comment.startswith("#"), f"no comment before {line!r}"
        block = " ".join(lines[j] for j in range(max(0, i - 3), i))
        assert "default:" in block, f"no default before {line!r}"


def test_delete_a_removed_sources_records(ingested: Ingested) -> None:
    workspace = ingested.workspace
    workspace.write_config(sources=[])
    result = runner.invoke(
        app,
        [
            "delete",
            "--collection",
            "docs",
            "--source",
            "sample",
            "--config",
            str(workspace.config_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert workspace.records() == []


@pytest.mark.stress  # a CLI subprocess timed by the test: the lane after the suite
def test_ctrl_c_stops_with_one_line_and_a_canceled_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace(
        tmp_path, monkeypatch, sources=[{"name": "big", "path": "big.jsonl", "kind": "jsonl"}]
    )
    with (ws.root / "big.jsonl").open("w") as out:
        for i in range(1500):
            text = " ".join(f"Sentence {j} of document {i} about syncing." for j in range(40))
            out.write(json.dumps({"id": f"d{i}", "title": f"Doc {i}", "text": text}) + "\n")
    from clef_pipelines.jobs.launch import ensure_dagster_home

    ensure_dagster_home(ws.settings())
    with dg.DagsterInstance.get() as instance:  # its storage exists before two processes use it
        assert instance.get_runs() == []
    env = dict(os.environ, DAGSTER_HOME=str(ws.root / "dagster"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "clef_pipelines", "ingest", "--config", str(ws.config_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        started = False
        while not started and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            with dg.DagsterInstance.get() as instance:
                started = any(r.status == dg.DagsterRunStatus.STARTED for r in instance.get_runs())
        assert started, "the run never started"
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "DagsterExecutionInterruptedError" not in err
    # The interruption is one line, the last; lines before it are the run's own notices
    # (e.g. which Clef backend `auto` chose), not the interruption's.
    lines = [x for x in err.splitlines() if x.strip()]
    line = lines[-1]
    assert [x for x in lines if "interrupt" in x.lower()] == [line]
    assert line.startswith("interrupted: run ") and line.endswith("marked canceled")
    with dg.DagsterInstance.get() as instance:
        (run,) = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.CANCELED
