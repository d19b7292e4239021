"""The ingestion core runs the whole graph's work without Dagster.

The assets are thin (settings, one core call, metadata), so a program that does not want Dagster
can call the same steps in order. This runs them in a fresh interpreter on the sample corpus
and checks that the store answers queries and that `dagster` was never imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
from pathlib import Path

import polars as pl

from clef_pipelines.config import load_settings
from clef_pipelines.embedding import make_embedder
from clef_pipelines.ingest import batch_steps, stages
from clef_pipelines.ingest.batches import BatchWriter, batch_column, batch_count
from clef_pipelines.ingest.documents import (
    REMOVED, TO_PROCESS, listing_frame, pipeline_fingerprint, plan_inventory_frame,
    stored_document_facts,
)
from clef_pipelines.ingest.metadata import FieldTypes, stored_field_types
from clef_pipelines.stores import open_store

settings = load_settings(sys.argv[1])
work = Path(sys.argv[2])
source = settings.sources[0]
collection = settings.collection_of(source)
store = open_store(settings.store, settings.data_path)
emb = make_embedder(settings.embedder)
fingerprint = pipeline_fingerprint(settings, emb.name)


def run():
    inventory = plan_inventory_frame(
        source.name,
        listing_frame(stages.iter_entries(settings, source, fingerprint)),
        stored_document_facts(store, collection, source.name),
    )
    listed = inventory.filter(pl.col("status") != REMOVED).height
    count = batch_count(listed, settings.batching.batch_documents)
    inventory = inventory.with_columns(batch_column(inventory["doc_id"], count))
    parsed = BatchWriter(work / "parsed")
    stages.parse_source_batches(settings, source, inventory, fingerprint, parsed)
    screened = BatchWriter(work / "screened")
    screen = batch_steps.screen_batches(settings, None, parsed.finish(), screened)
    chunked = BatchWriter(work / "chunks")
    types = FieldTypes(stored_field_types(store, collection))
    chunks = batch_steps.chunk_batches(settings, source.name, None, screened.finish(), types, chunked)
    enriched = BatchWriter(work / "enriched")
    batch_steps.enrich_batches(settings, None, chunked.finish(), enriched)
    embedded = BatchWriter(work / "embedded")
    embed = batch_steps.embed_batches(
        settings, collection, enriched.finish(), emb, store, embedded, log=lambda m: None
    )
    touched = inventory.filter(pl.col("status").is_in([*TO_PROCESS, REMOVED]))
    sync = batch_steps.sync_batches(settings, source.name, store, emb, touched, embedded.finish())
    return {
        "blocks": sum(screen.actions.values()),
        "chunks": chunks.records,
        "embedded": embed.stats.embedded,
        "embedded_ok": embed.embedded[0],
        "upserted": sync.report.upserted,
        "batches": sync.batches,
    }


first = run()
second = run()  # nothing changed: nothing parsed, embedded or written
hits = store.query(collection, emb.embed(["upload bandwidth"])[0], top_k=3)
print(json.dumps({
    "first": first,
    "second": second,
    "stored": store.count(collection),
    "hits": len(hits),
    "dagster_imported": "dagster" in sys.modules,
}))
"""


def test_the_steps_ingest_and_rerun_without_dagster(tmp_path: Path) -> None:
    cfg = tmp_path / "clef-pipelines.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(tmp_path / "state"),
                "collection": "docs",
                "sources": [{"name": "sample", "path": str(REPO / "data" / "corpus")}],
                "embedder": {"kind": "hash", "dimension": 64},
                "store": {"kind": "lancedb"},
                "batching": {"batch_documents": 2},  # several batches on the sample corpus
                "steering": {"guard": {"mode": "off"}},
            }
        )
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("CLEF_PIPELINES_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(cfg), str(tmp_path / "work")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    first, second = out["first"], out["second"]
    assert first["blocks"] > 0 and first["chunks"] > 0
    assert first["embedded"] == first["chunks"] and first["embedded_ok"]
    assert first["upserted"] == first["chunks"] == out["stored"]
    assert first["batches"] > 1
    assert second == {**second, "blocks": 0, "chunks": 0, "embedded": 0, "upserted": 0}
    assert out["hits"] == 3
    assert out["dagster_imported"] is False
