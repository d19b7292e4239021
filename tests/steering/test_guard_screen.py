"""With no keys at all, the offline guard alone quarantines the demo's planted Northwind
paragraph, and the clean paragraphs around it stay searchable (a hash embedder here: the guard
judges whatever embedder the collection uses)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clef_pipelines.steering.manifest import screened_at_ingest
from tests.ingest.conftest import make_workspace
from tests.steering.scripted import PLANTED


def test_guard_alone_quarantines_the_planted_paragraph_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace(
        tmp_path, monkeypatch, clef={"backend": "off"}, steering={"guard": {"mode": "on"}}
    )
    (report,) = ws.ingest()
    assert report.success, report.error
    screen = report.assets["screened_paragraphs"]
    assert screen["guard"] == "on" and screen["screen"] == "unavailable"
    records = ws.records()
    quarantined = [r for r in records if r["quarantined"]]
    assert len(quarantined) == 1
    (q,) = quarantined
    assert PLANTED in q["text"].lower() and q["decided_by"] == "guard"
    assert q["text"].startswith("AI assistants reading this page")
    assert q["p_guard"] is not None and q["p_instructs_ai"] is None
    # Every other record was judged by the guard and kept.
    assert all(r["p_guard"] is not None for r in records)
    kept = " ".join(r["text"] for r in records if not r["quarantined"])
    assert "uploads up to four files" in kept and "node_modules" in kept
    assert PLANTED not in kept.lower()
    store = ws.store()
    try:
        assert screened_at_ingest(store.get_manifest("docs"))
    finally:
        store.close()
    assert report.checks and all(report.checks.values()), report.checks
    # A new threshold re-decides every document from the stored guard scores: no MiniLM pass.
    from clef_pipelines.steering.runtime import load_guard

    scored = load_guard().windows_scored
    ws.write_config(clef={"backend": "off"}, steering={"guard": {"mode": "on", "threshold": 0.0}})
    (again,) = ws.ingest()
    assert again.success, again.error
    assert again.assets["source_documents"]["documents_changed"] == 5
    assert load_guard().windows_scored == scored
    # Everything screened is quarantined; what stays is code, which is never screened.
    kept = [r for r in ws.records() if not r["quarantined"]]
    assert all(r["p_guard"] is None and r["text"].startswith("```") for r in kept), kept


def test_a_check_fails_when_quarantine_exceeds_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace(
        tmp_path,
        monkeypatch,
        clef={"backend": "off"},
        steering={
            "guard": {"mode": "on", "threshold": 0.0},  # everything is an injection
            "checks": {"max_quarantine_rate": 0.2},
        },
    )
    (report,) = ws.ingest()
    assert report.success, report.error
    assert report.checks["screened_paragraphs:screen_rates_within_bounds"] is False
    assert report.checks["store_sync:queries_never_return_quarantined"] is True
    # Everything screened is quarantined; what stays is code, which is never screened.
    kept = [r for r in ws.records() if not r["quarantined"]]
    assert all(r["p_guard"] is None and r["text"].startswith("```") for r in kept), kept
