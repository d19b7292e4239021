"""The CLI round trip: init, ingest, query, inspect, delete; and the UI's GraphQL API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from clef_pipelines.cli.main import app
from tests.ingest.conftest import Ingested, Workspace
from tests.pg import free_port

runner = CliRunner()


def test_init_writes_a_config_that_loads(tmp_path: Path) -> None:
    target = tmp_path / "c.yaml"
    result = runner.invoke(app, ["init", str(target), "--source", "docs"])
    assert result.exit_code == 0, result.output
    from clef_pipelines.config import load_settings

    settings = load_settings(target)
    assert settings.sources[0].path == "docs"
    again = runner.invoke(app, ["init", str(target)])
    assert again.exit_code != 0 and "exists" in again.output


def test_unknown_config_key_names_key_and_suggestion(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("chunking:\n  target_tokenz: 100\n")
    result = runner.invoke(app, ["query", "x", "--config", str(cfg)])
    assert result.exit_code == 2
    assert "chunking.target_tokenz" in result.output
    assert "chunking.target_tokens" in result.output


def test_cli_round_trip(workspace: Workspace) -> None:
    cfg = str(workspace.config_path)
    dry = runner.invoke(app, ["ingest", "--config", cfg, "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    planned = json.loads(dry.output)
    assert planned[0]["documents"]["new"] > 0
    assert workspace.records() == []  # a dry run writes nothing

    result = runner.invoke(app, ["ingest", "--config", cfg, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report[0]["success"] and report[0]["assets"]["store_sync"]["upserted"] > 0

    q = runner.invoke(
        app, ["query", "how do I rotate an access token", "--config", cfg, "--json", "--top-k", "3"]
    )
    assert q.exit_code == 0, q.output
    (answer,) = json.loads(q.output)
    assert answer["query"] == "how do I rotate an access token"
    assert answer["degraded"]  # no Clef configured: vector order, said so
    passages = answer["passages"]
    assert len(passages) == 3
    assert [p["n"] for p in passages] == [1, 2, 3]
    assert passages[0]["vector_score"] >= passages[1]["vector_score"] >= passages[2]["vector_score"]
    assert all(p["citation"] and p["source_uri"] for p in passages)

    first_doc = passages[0]["doc_id"]
    filtered = runner.invoke(
        app,
        ["query", "token", "--config", cfg, "--json", "--where", json.dumps({"doc_id": first_doc})],
    )
    assert filtered.exit_code == 0, filtered.output
    (only,) = json.loads(filtered.output)
    assert {p["doc_id"] for p in only["passages"]} == {first_doc}

    human = runner.invoke(app, ["query", "token", "--config", cfg])
    assert human.exit_code == 0 and "[1]" in human.output

    some_file = sorted(workspace.corpus.rglob("*.md"))[0]
    ins = runner.invoke(app, ["inspect", str(some_file), "--config", cfg, "--json"])
    assert ins.exit_code == 0, ins.output
    shown = json.loads(ins.output)
    assert shown["chunks"] and shown["blocks"]

    coll = runner.invoke(app, ["inspect", "--collection", "docs", "--config", cfg, "--json"])
    assert coll.exit_code == 0, coll.output
    summary = json.loads(coll.output)
    assert summary["manifest"]["embedder"] == "hash:v1:64"
    assert summary["sources"]["sample"]["records"] == len(workspace.records())
    assert summary["index"]["rows"] == len(workspace.records())
    assert summary["index"]["ann_index"] is None  # below the LanceDB threshold: exact search

    gone = runner.invoke(
        app, ["delete", "--collection", "docs", "--doc", first_doc, "--config", cfg]
    )
    assert gone.exit_code == 0, gone.output
    assert not any(r["doc_id"] == first_doc for r in workspace.records())

    bad = runner.invoke(app, ["query", "x", "--config", cfg, "--collection", "nope"])
    assert bad.exit_code == 2 and "does not exist" in bad.output


def test_ingest_names_the_settings_that_changed(workspace: Workspace) -> None:
    """After a change of settings every document shows as changed; the dry run and the run
    both say which settings did it (the manifest keeps a hash per part beside the source)."""
    cfg = str(workspace.config_path)
    assert runner.invoke(app, ["ingest", "--config", cfg, "--json"]).exit_code == 0
    workspace.write_config(chunking={"target_tokens": 120})
    dry = runner.invoke(app, ["ingest", "--config", cfg, "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    (planned,) = json.loads(dry.output)
    assert planned["settings_changed"] == "chunking"
    assert planned["documents"]["changed"] > 0
    assert planned["documents"]["unchanged"] == planned["documents"]["new"] == 0
    run = runner.invoke(app, ["ingest", "--config", cfg])
    assert run.exit_code == 0, run.output
    assert "settings changed" in run.output and "chunking" in run.output
    again = runner.invoke(app, ["ingest", "--config", cfg, "--dry-run", "--json"])
    assert json.loads(again.output)[0]["settings_changed"] == "none"


def test_ingest_adhoc_path_into_named_collection(workspace: Workspace) -> None:
    extra = workspace.root / "extra"
    extra.mkdir()
    (extra / "a.md").write_text("# Extra\n\nAn extra document about offline mode.\n")
    result = runner.invoke(
        app,
        [
            "ingest",
            str(extra),
            "--collection",
            "more",
            "--config",
            str(workspace.config_path),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert {r["doc_id"] for r in workspace.records("more")} == {"a.md"}
    assert workspace.records("docs") == []


def test_webserver_lists_the_ingestion_assets(workspace: Workspace) -> None:
    port = free_port()
    env = dict(os.environ)
    env["DAGSTER_HOME"] = str(workspace.root / "dagster")
    env["CLEF_PIPELINES_CONFIG"] = str(workspace.config_path)
    env["DAGSTER_DG_UPDATE_CHECK_ENABLED"] = "0"
    (workspace.root / "dagster").mkdir(exist_ok=True)
    (workspace.root / "dagster" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dagster_webserver",
            "-m",
            "clef_pipelines.definitions",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        body = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read().decode()[-3000:])  # type: ignore[union-attr]
            try:
                r = httpx.post(
                    f"http://127.0.0.1:{port}/graphql",
                    json={"query": "{ assetNodes { assetKey { path } groupName } }"},
                    timeout=10,
                )
                if r.status_code == 200 and r.json().get("data", {}).get("assetNodes"):
                    body = r.json()
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        assert body is not None, "webserver did not answer"
        keys = {"/".join(n["assetKey"]["path"]) for n in body["data"]["assetNodes"]}
        assert {
            f"clef/{name}"
            for name in (
                "source_documents",
                "parsed_blocks",
                "screened_paragraphs",
                "chunks",
                "enrichments",
                "embeddings",
                "store_sync",
            )
        } <= keys
        # The ingestion assets are in their group (the evaluation assets have their own).
        groups = {
            "/".join(n["assetKey"]["path"]): n["groupName"] for n in body["data"]["assetNodes"]
        }
        assert {groups[k] for k in ("clef/source_documents", "clef/store_sync")} == {"ingestion"}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def test_query_with_another_embedder_is_refused(ingested: Ingested) -> None:
    workspace = ingested.workspace
    workspace.write_config(embedder={"kind": "hash", "dimension": 32})
    result = runner.invoke(app, ["query", "token", "--config", str(workspace.config_path)])
    assert result.exit_code == 2
    assert "was built with embedder hash:v1:64" in result.output


def test_dotenv_is_loaded_shell_wins_and_loose_permissions_warn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from clef_pipelines.cli.common import load_env_file

    env_file = tmp_path / ".env"
    env_file.write_text("CLEF_TEST_FROM_FILE=file\nCLEF_TEST_BOTH=file\n")
    env_file.chmod(0o644)
    monkeypatch.delenv("CLEF_TEST_FROM_FILE", raising=False)
    monkeypatch.setenv("CLEF_TEST_BOTH", "shell")
    load_env_file(env_file)
    assert os.environ["CLEF_TEST_FROM_FILE"] == "file"
    assert os.environ["CLEF_TEST_BOTH"] == "shell"
    assert "readable by other users" in capsys.readouterr().err
    monkeypatch.delenv("CLEF_TEST_FROM_FILE")
    env_file.chmod(0o600)
    load_env_file(env_file)
    assert "readable by other users" not in capsys.readouterr().err
