"""The ingestion job and `query` work on every store kind, chosen by `store.kind` alone."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clef_pipelines.cli.main import app
from tests.ingest.conftest import make_workspace

runner = CliRunner()


@pytest.mark.parametrize("kind", ["lancedb", "qdrant", "pgvector", "memory"])
def test_ingest_and_query_on_each_store(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    store: dict[str, object] = {"kind": kind}
    if kind == "pgvector":
        monkeypatch.setenv("CLEF_PG_DSN", request.getfixturevalue("pg_dsn"))
        store["pgvector"] = {"schema_name": "ingest_" + uuid.uuid4().hex[:10]}
    if kind == "memory":
        from clef_pipelines.stores import factory

        monkeypatch.setattr(factory, "_MEMORY_STORE", None)
    ws = make_workspace(tmp_path, monkeypatch, store=store)

    (first,) = ws.ingest()
    assert first.success, first.error
    upserted = first.assets["store_sync"]["upserted"]
    assert upserted == first.assets["chunks"]["chunks"] > 0
    assert first.assets["store_sync"]["store"] == kind

    (again,) = ws.ingest()
    # Nothing changed: every step materialises an empty change; the inventory shows the state.
    assert again.assets["store_sync"]["changed"] is False
    assert again.assets["embeddings"]["embedded"] == 0
    assert again.assets["source_documents"]["store/records"] == upserted

    target = sorted(ws.corpus.rglob("*.md"))[0]
    target.unlink()
    (removed,) = ws.ingest()
    assert removed.assets["store_sync"]["deleted_removed"] > 0
    doc_id = target.relative_to(ws.corpus).as_posix()
    assert not any(r["doc_id"] == doc_id for r in ws.records())

    result = runner.invoke(
        app, ["query", "how do I rotate a token", "--config", str(ws.config_path), "--json"]
    )
    assert result.exit_code == 0, result.output
    (answer,) = json.loads(result.output)
    assert answer["query"] == "how do I rotate a token"
    passages = answer["passages"]
    assert 0 < len(passages) <= 5
    # Recall is hybrid by default: a passage's score is its fused score (z-score fusion:
    # >= 0, not capped at 1). Clef is off here: recall order.
    assert all(p["vector_score"] >= 0.0 for p in passages)
    scores = [p["vector_score"] for p in passages]
    assert scores == sorted(scores, reverse=True)
    assert all(p["doc_id"] != doc_id for p in passages)
