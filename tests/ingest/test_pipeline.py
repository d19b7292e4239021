"""The ingestion graph materialised in-process on the sample corpus, and its incremental rules."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import dagster as dg
import pytest

from clef_pipelines.ingest.sync import KILL_AFTER_UPSERTS_ENV
from clef_pipelines.records import PIPELINE_VERSION, RECORD_FIELDS
from tests.ingest.conftest import Ingested, Workspace, make_workspace

INGESTION_ASSETS = {
    "source_documents",
    "parsed_blocks",
    "screened_paragraphs",
    "chunks",
    "enrichments",
    "embeddings",
    "store_sync",
    "vector_indexes",
}


def test_definitions_load_with_described_grouped_assets() -> None:
    from clef_pipelines.definitions import defs

    repo = defs.get_repository_def()
    graph = repo.asset_graph
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys >= {f"clef/{name}" for name in INGESTION_ASSETS}
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert key.path[0] == "clef", f"{key} lacks the location's key prefix"
        assert node.kinds, f"{key} has no kinds"
        assert node.description and len(node.description) > 40
        assert node.owners, f"{key} has no owners"
        if key.path[-1] in INGESTION_ASSETS:  # other groups (evaluation) have their own
            assert node.group_name == "ingestion"
            assert isinstance(node.partitions_def, dg.DynamicPartitionsDefinition)
            # The records' pipeline version is the assets' code version.
            assert node.code_version == PIPELINE_VERSION
    checks = {f"{k.asset_key.path[-1]}:{k.name}" for k in graph.asset_check_keys}
    assert {
        "screened_paragraphs:screen_rates_within_bounds",
        "screened_paragraphs:guard_coverage",
        "chunks:chunks_within_max_tokens",
        "enrichments:enrichment_drop_rate_within_bounds",
        "embeddings:every_chunk_embedded",
        "store_sync:no_removed_documents_stored",
        "store_sync:queries_never_return_quarantined",
    } <= checks
    assert defs.resolve_job_def("ingestion_job")
    assert defs.resolve_sensor_def("source_change_sensor")
    assert defs.resolve_schedule_def("source_refresh_schedule")


def test_sample_corpus_materialises_into_store(ingested: Ingested) -> None:
    workspace, report = ingested.workspace, ingested.report
    assert report.success, report.error
    assert set(report.assets) >= INGESTION_ASSETS
    docs = report.assets["source_documents"]
    n_files = sum(1 for p in workspace.corpus.rglob("*") if p.is_file())
    assert docs["documents_new"] == n_files
    assert docs["documents_failed"] == 0
    records = workspace.records()
    assert (
        len(records) == report.assets["chunks"]["chunks"] == report.assets["store_sync"]["upserted"]
    )
    # The index step ran after the sync and saw every record (below LanceDB's threshold: exact).
    assert report.assets["vector_indexes"]["rows"] == len(records)
    assert report.assets["vector_indexes"]["ann_index"] == "none (exact search)"
    # It shows the process's memory around the build (an in-process index can set the peak).
    idx = report.assets["vector_indexes"]
    assert 0 < idx["process_rss_gb_trimmed"] <= idx["process_peak_gb_after"]
    assert 0 < idx["process_peak_gb_before"] <= idx["process_peak_gb_after"]
    assert {r["doc_id"] for r in records} == {
        p.relative_to(workspace.corpus).as_posix()
        for p in workspace.corpus.rglob("*")
        if p.is_file()
    }
    for r in records:
        uuid.UUID(r["id"])  # valid in every store
        for field in RECORD_FIELDS:
            assert field in r, f"record lacks {field}"
        assert r["quarantined"] is False
        assert (
            r["text"].strip()
            and r["embed_text"].endswith(r["text"])
            or r["text"] in r["embed_text"]
        )
        assert r["title"] in r["embed_text"]
        assert 0 <= r["char_start"] < r["char_end"] or r["char_start"] == -1
    # With Clef and the guard off nothing judges the paragraphs: the planted instruction is
    # ingested as is (tests/steering shows it quarantined by either judge).
    assert any(
        "ignore" in r["text"].lower() and "instruction" in r["text"].lower() for r in records
    )
    # Every chunk's offsets point back into its source file.
    for r in records:
        if r["char_start"] < 0:
            continue
        path = workspace.corpus / r["doc_id"]
        if path.suffix in {".md", ".txt", ".rst"}:
            original = path.read_text(encoding="utf-8")
            first_words = r["text"].split()[0]
            assert first_words in original[r["char_start"] : r["char_end"]]


def test_rerun_without_changes_embeds_and_writes_nothing(ingested: Ingested) -> None:
    workspace = ingested.workspace
    store = workspace.store()
    manifest_before = store.get_manifest("docs")
    store.close()
    (again,) = workspace.ingest()
    assert again.success
    assert again.assets["source_documents"]["documents_unchanged"] > 0
    assert again.assets["source_documents"]["documents_new"] == 0
    # Nothing to change: every step materialises (the partition is up to date), passes an
    # empty change on and says so.
    assert set(again.assets) == INGESTION_ASSETS
    assert all(
        again.assets[name]["changed"] is False
        for name in INGESTION_ASSETS
        if name != "vector_indexes"
    )
    store = workspace.store()
    assert store.get_manifest("docs") == manifest_before  # not even the manifest was rewritten
    store.close()


def _first_md(workspace: Workspace) -> Path:
    return sorted(workspace.corpus.rglob("*.md"))[0]


def test_editing_one_document_reembeds_only_its_new_chunks(ingested: Ingested) -> None:
    workspace = ingested.workspace
    before = {r["id"]: r for r in workspace.records()}
    target = _first_md(workspace)
    doc_id = target.relative_to(workspace.corpus).as_posix()
    text = target.read_text(encoding="utf-8")
    target.write_text(text + "\n\nA brand new closing paragraph about rotating tokens.\n")
    (report,) = workspace.ingest()
    assert report.success, report.error
    docs = report.assets["source_documents"]
    assert docs["documents_changed"] == 1 and docs["documents_new"] == 0
    after = {r["id"]: r for r in workspace.records()}
    new_ids = set(after) - set(before)
    stale_ids = set(before) - set(after)
    assert new_ids and all(after[i]["doc_id"] == doc_id for i in new_ids)
    assert all(before[i]["doc_id"] == doc_id for i in stale_ids)
    assert report.assets["embeddings"]["embedded"] == len(new_ids)
    assert report.assets["embeddings"]["reused"] == report.assets["chunks"]["chunks"] - len(new_ids)
    # Other documents' records are untouched, down to their ingestion time.
    for i, rec in before.items():
        if rec["doc_id"] != doc_id:
            assert after[i]["ingested_at"] == rec["ingested_at"]
    assert len({r["doc_hash"] for r in after.values() if r["doc_id"] == doc_id}) == 1


def test_removing_a_file_removes_its_records(ingested: Ingested) -> None:
    workspace = ingested.workspace
    target = _first_md(workspace)
    doc_id = target.relative_to(workspace.corpus).as_posix()
    assert any(r["doc_id"] == doc_id for r in workspace.records())
    target.unlink()
    (report,) = workspace.ingest()
    assert report.assets["source_documents"]["documents_removed"] == 1
    assert report.assets["store_sync"]["deleted_removed"] > 0
    assert not any(r["doc_id"] == doc_id for r in workspace.records())


def test_sources_sharing_a_collection_do_not_touch_each_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace(
        tmp_path,
        monkeypatch,
        sources=[{"name": "alpha", "path": "corpus"}, {"name": "beta", "path": "beta"}],
    )
    beta = ws.root / "beta"
    beta.mkdir()
    (beta / "notes.md").write_text("# Beta notes\n\nBeta has its own paragraph about syncing.\n")
    ws.ingest()
    beta_before = {r["id"] for r in ws.records() if r["source"] == "beta"}
    assert beta_before
    for p in ws.corpus.rglob("*"):
        if p.is_file():
            p.unlink()
    (report,) = ws.ingest(["alpha"])
    assert report.success
    remaining = ws.records()
    assert {r["source"] for r in remaining} == {"beta"}
    assert {r["id"] for r in remaining} == beta_before


def _cli_env(ws: Workspace) -> dict[str, str]:
    env = dict(os.environ)
    env["DAGSTER_HOME"] = str(ws.root / "dagster")
    return env


@pytest.mark.stress  # a CLI subprocess timed by the test: the lane after the suite
def test_killed_sync_converges_on_rerun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Reference: a clean ingestion of the edited corpus.
    ref = make_workspace(tmp_path / "ref", monkeypatch, sync_batch_rows=2)
    ws = make_workspace(tmp_path / "ws", monkeypatch, sync_batch_rows=2)
    ws.ingest()
    for target_ws in (ref, ws):
        target = _first_md(target_ws)
        target.write_text(
            target.read_text(encoding="utf-8").replace("\n\n", "\n\nEdited. ", 3), encoding="utf-8"
        )
        gone = sorted(target_ws.corpus.rglob("*.txt"))[0]
        gone.unlink()
    ref.ingest()
    expected = {(r["id"], r["doc_id"]) for r in ref.records()}

    # A real process, SIGKILLed by fault injection after its second upsert batch.
    env = _cli_env(ws)
    env[KILL_AFTER_UPSERTS_ENV] = "2"
    proc = subprocess.run(
        [sys.executable, "-m", "clef_pipelines", "ingest", "--config", str(ws.config_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    half = {(r["id"], r["doc_id"]) for r in ws.records()}
    assert half != expected  # the kill left the store in between

    (report,) = ws.ingest()
    assert report.success, report.error
    assert (
        report.assets["source_documents"]["documents_repair"]
        + report.assets["source_documents"]["documents_changed"]
        >= 1
    )
    records = ws.records()
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)), "duplicates after repair"
    assert {(r["id"], r["doc_id"]) for r in records} == expected
    (settled,) = ws.ingest()
    # Nothing left to repair: the sync materialises and says it changed nothing.
    assert settled.assets["store_sync"]["changed"] is False


def test_embedder_change_is_refused(ingested: Ingested) -> None:
    workspace = ingested.workspace
    workspace.write_config(embedder={"kind": "hash", "dimension": 32})
    (report,) = workspace.ingest()
    assert not report.success
    assert "was built with embedder hash:v1:64" in (report.error or "")
    assert len(workspace.records()) > 0  # nothing lost
