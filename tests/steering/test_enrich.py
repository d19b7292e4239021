"""Chunk enrichment and `reenrich` in real Dagster runs against the fake System One server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from clef_pipelines.cli.main import app
from tests.clef.fake_server import FakeServer, Reply
from tests.ingest.conftest import Workspace, make_workspace
from tests.steering.scripted import PLANTED, by_text, choice, clef_config, subject_text

TAXONOMY = {
    "fields": [
        {
            "name": "topic",
            "description": "Which topic is it about?",
            "options": {"security": "passwords, sign-in", "sync": "syncing files", "other": None},
        }
    ]
}
QUESTIONS = [{"name": "mentions_limit", "type": "noul", "instructions": "Does it name a limit?"}]


def answers(qid: str, q: dict[str, Any], state: Any) -> Any:
    text = subject_text(q, state).lower()
    if qid.endswith(".tag_topic"):
        if "password" in text or "sign in" in text:
            return choice({"security": 0.8, "sync": 0.1, "other": 0.1})
        return choice({"security": 0.3, "sync": 0.3, "other": 0.4})  # below 0.5: no tag
    if qid.endswith(".tag_audience"):
        return choice(
            {"admins": 0.7, "other": 0.3}
            if "administrator" in text
            else {"admins": 0.2, "other": 0.8}
        )
    if qid.endswith(".x_mentions_limit"):
        return 0.9 if "limit" in text else 0.1
    return by_text(qid, q, state)


@pytest.fixture
def enrich_ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeServer) -> Workspace:
    monkeypatch.setenv("KEY", "test-key")
    fake.answer_with(answers)
    (tmp_path / "taxonomy.yaml").write_text(yaml.safe_dump(TAXONOMY))
    ws = make_workspace(
        tmp_path,
        monkeypatch,
        clef=clef_config(fake, max_concurrency=1, max_retries=0),
        steering={
            "guard": {"mode": "off"},
            "screen": {"mode": "off"},  # the enrichment alone meets the planted paragraph
            "enrich": {"taxonomy_file": "taxonomy.yaml", "questions": QUESTIONS},
        },
    )
    (ws.corpus / "thin.md").write_text("# Thin\n\nThin words, nothing to learn here.\n")
    return ws


def test_enrichment_fields_tags_drop_and_quarantine(enrich_ws: Workspace, fake: FakeServer) -> None:
    (report,) = enrich_ws.ingest()
    assert report.success, report.error
    meta = report.assets["enrichments"]
    assert meta["enrich"] == "on" and meta["dropped"] == 1 and meta["quarantined"] == 1
    records = enrich_ws.records()
    assert "thin.md" not in {r["doc_id"] for r in records}  # low information: dropped
    planted = [r for r in records if PLANTED in r["text"].lower()]
    assert len(planted) == 1 and planted[0]["quarantined"] is True
    assert planted[0]["decided_by"] == "clef:enrichment"
    for r in records:
        assert r["q_self_contained"] is not None and r["q_instructs_ai"] is not None
        assert r["p_tag_topic"] is not None and r["enrich_version"]
        # A tag is stored only at or above tag_min_confidence; its probability always.
        assert (r["tag_topic"] is None) == (r["p_tag_topic"] < 0.5)
        assert r["x_mentions_limit"] in (pytest.approx(0.9), pytest.approx(0.1))
        assert r["needs_reenrich"] is False
    assert any(r["tag_topic"] == "security" for r in records)
    # Several chunks share a request.
    assert max(len(b["state"]) for b in fake.requests) > 1
    # Every document's stored record count matches what its records say (nothing missing).
    by_doc: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_doc.setdefault(r["doc_id"], []).append(r)
    for recs in by_doc.values():
        assert {r["doc_chunk_count"] for r in recs} == {len(recs)}
    (again,) = enrich_ws.ingest()
    # thin.md stores nothing (dropped whole), yet is recognised as unchanged (issue 56).
    assert again.assets["source_documents"]["documents_unchanged"] == 6
    assert again.assets["source_documents"]["documents_new"] == 0


def test_failed_enrichment_keeps_chunks_with_needs_reenrich(
    enrich_ws: Workspace, fake: FakeServer
) -> None:
    fake.script(*[Reply(status=503)] * 20)
    (first,) = enrich_ws.ingest()
    assert first.success, first.error
    assert first.assets["enrichments"]["needs_reenrich"] > 0
    assert first.assets["enrichments"]["failed_requests"]
    records = enrich_ws.records()
    assert records and all(r["needs_reenrich"] for r in records)
    fake.answer_with(answers)
    with fake._lock:
        fake._script.clear()
    (second,) = enrich_ws.ingest()
    assert second.success, second.error
    assert second.assets["source_documents"]["documents_rescreen"] == len(
        {r["doc_id"] for r in records}
    )
    assert not any(r["needs_reenrich"] for r in enrich_ws.records())


def test_reenrich_applies_a_new_taxonomy_without_reembedding(
    enrich_ws: Workspace, fake: FakeServer
) -> None:
    (report,) = enrich_ws.ingest()
    assert report.success, report.error
    before = {r["id"]: r for r in enrich_ws.records()}
    store = enrich_ws.store()
    vectors = {r["id"]: r["vector"] for r in store.get("docs", list(before), with_vectors=True)}
    store.close()
    taxonomy = {
        "fields": [
            *TAXONOMY["fields"],
            {"name": "audience", "options": {"admins": "administrators", "other": None}},
        ]
    }
    (enrich_ws.root / "taxonomy.yaml").write_text(yaml.safe_dump(taxonomy))
    n = len(fake.requests)
    result = CliRunner().invoke(app, ["reenrich", "--config", str(enrich_ws.config_path), "--json"])
    assert result.exit_code == 0, result.output
    # Only the new question was sent: the others are answered from the per-text cache.
    asked = {qid.split(".", 1)[1] for b in fake.requests[n:] for qid in b["questions"]}
    assert asked == {"tag_audience"}
    store = enrich_ws.store()
    try:
        after = {r["id"]: r for r in store.scan("docs")}
        assert set(after) == set(before)  # nothing re-chunked
        new_vectors = {
            r["id"]: r["vector"] for r in store.get("docs", list(after), with_vectors=True)
        }
        assert all(new_vectors[i] == pytest.approx(vectors[i]) for i in vectors)
        live = [r for r in after.values() if not r["quarantined"]]
        assert all(r["p_tag_audience"] is not None for r in live)
        admins = [r["id"] for r in live if r["tag_audience"] == "admins"]
        assert admins
        # The new field filters with --where.
        filtered = store.list_ids("docs", where={"tag_audience": "admins", "quarantined": False})
        assert sorted(filtered) == sorted(admins)
    finally:
        store.close()
    out = CliRunner().invoke(
        app,
        [
            "query",
            "administrators",
            "--config",
            str(enrich_ws.config_path),
            "--where",
            '{"tag_audience": "admins"}',
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    # Nothing left to re-enrich.
    again = CliRunner().invoke(app, ["reenrich", "--config", str(enrich_ws.config_path), "--json"])
    assert again.exit_code == 0 and '"asked": 0' in again.output
