"""`clef-pipelines ingest` skips a source unchanged since its last clean run (no Dagster run,
no Dagster, store or model imported), runs it after an edit and with --force, and a run that
fails leaves no clean run behind, so the next `ingest` runs and repairs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from typer.testing import CliRunner

from clef_pipelines.cli.main import app
from clef_pipelines.ingest.clean_runs import (
    forget_collection,
    record_clean_run,
    recorded_clean_run,
    run_signal,
    unchanged_since_clean_run,
)
from clef_pipelines.ingest.sync import FAIL_AFTER_UPSERTS_ENV
from clef_pipelines.steering.release_file import release_path
from tests.ingest.conftest import Workspace

runner = CliRunner()

#: Runs `ingest` in a fresh process and says which heavy packages it imported.
_INGEST_AND_LIST_IMPORTS = """
import json, sys
from clef_pipelines.cli.main import app
code = 0
try:
    app(["ingest", "--config", sys.argv[1]])
except SystemExit as exc:
    code = exc.code or 0
heavy = ("dagster", "torch", "lancedb", "polars", "transformers")
print(json.dumps({"code": code, "imported": [m for m in heavy if m in sys.modules]}))
"""


def _runs(workspace: Workspace) -> int:
    with dg.DagsterInstance.get() as instance:  # $DAGSTER_HOME: the workspace's
        return instance.get_runs_count()


def _ingest(workspace: Workspace, *args: str) -> dict:
    result = runner.invoke(app, ["ingest", "--config", str(workspace.config_path), "--json", *args])
    (report,) = json.loads(result.stdout)
    return {"exit_code": result.exit_code, **report}


def test_an_unchanged_ingest_starts_no_run_and_an_edit_or_force_does(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _ingest(workspace)
    assert first["exit_code"] == 0 and first["success"]
    assert recorded_clean_run(workspace.settings(), "sample")["run_id"] == first["run_id"]
    runs = _runs(workspace)

    # A fresh process, as a user runs it: one line, no run, nothing heavy imported.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        [sys.executable, "-c", _INGEST_AND_LIST_IMPORTS, str(workspace.config_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    *said, facts = proc.stdout.strip().splitlines()
    assert json.loads(facts) == {"code": 0, "imported": []}
    assert len(said) == 1 and "unchanged since its last clean run" in said[0], said
    assert _runs(workspace) == runs

    edited = workspace.corpus / "faq.txt"
    edited.write_text(edited.read_text(encoding="utf-8") + "\nA new answer about sync.\n")
    again = _ingest(workspace)
    assert again["success"] and _runs(workspace) == runs + 1
    assert again["assets"]["source_documents"]["documents_changed"] == 1

    # --force runs although nothing changed; this run fails (a full disk in its sync), so no
    # clean run is left, and the next plain `ingest` runs again and repairs.
    monkeypatch.setenv(FAIL_AFTER_UPSERTS_ENV, "1")
    failed = _ingest(workspace, "--force")
    assert failed["exit_code"] == 1 and not failed["success"]
    assert _runs(workspace) == runs + 2
    assert recorded_clean_run(workspace.settings(), "sample") is None
    monkeypatch.delenv(FAIL_AFTER_UPSERTS_ENV)
    repaired = _ingest(workspace)
    assert repaired["success"] and _runs(workspace) == runs + 3
    assert recorded_clean_run(workspace.settings(), "sample")["run_id"] == repaired["run_id"]


def test_the_signal_sees_a_removed_file_and_changed_settings(workspace: Workspace) -> None:
    settings = workspace.settings()
    source = settings.source("sample")
    record_clean_run(settings, "sample", run_signal(settings, source), "run-1")
    assert unchanged_since_clean_run(settings, source) is not None

    (workspace.corpus / "admin.rst").unlink()
    assert unchanged_since_clean_run(settings, source) is None
    record_clean_run(settings, "sample", run_signal(settings, source), "run-2")

    workspace.write_config(chunking={"target_tokens": 120})
    changed = workspace.settings()
    assert unchanged_since_clean_run(changed, changed.source("sample")) is None
    workspace.write_config(collection="other")  # another collection: its records are not there
    moved = workspace.settings()
    assert unchanged_since_clean_run(moved, moved.source("sample")) is None

    # A release (or its undoing) changes what the screen keeps.
    assert unchanged_since_clean_run(settings, source) is not None
    path = release_path(settings.data_path, "docs")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"records": [], "documents": []}')
    assert unchanged_since_clean_run(settings, source) is None

    path.unlink()
    assert unchanged_since_clean_run(settings, source) is not None
    # The collection's table appears (restored from a backup, say) after the clean run that
    # left none: what the store holds changed.
    table = settings.data_path / "lancedb" / "docs.lance" / "_versions"
    table.mkdir(parents=True)
    (table / "1.manifest").write_bytes(b"restored")
    assert unchanged_since_clean_run(settings, source) is None
    # The in-process memory store starts empty in every process: never unchanged.
    memory = settings.model_copy(
        update={"store": settings.store.model_copy(update={"kind": "memory"})}
    )
    record_clean_run(memory, "sample", run_signal(memory, source), "run-3")
    assert unchanged_since_clean_run(memory, source) is None

    forget_collection(settings, "other")
    assert recorded_clean_run(settings, "sample") is not None
    forget_collection(settings, "docs")  # `delete` from the source's collection
    assert recorded_clean_run(settings, "sample") is None
