"""Stable batches: a source streams through a run a batch at a time (issue 13).

Real Dagster runs in-process on real LanceDB; a JSONL source small enough to be quick, split
into several batches by a tiny `batching.batch_documents`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from clef_pipelines.ingest.batches import (
    BATCH,
    BatchWriter,
    FrameBatches,
    batch_count,
    batch_of,
)
from clef_pipelines.ingest.sync import KILL_AFTER_UPSERTS_ENV
from tests.ingest.conftest import make_workspace

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
]


def _text(i: int, edit: str = "") -> str:
    sentences = [
        " ".join(WORDS[(i * 7 + k * 3 + j) % len(WORDS)] for j in range(12)) + "."
        for k in range(4 + i % 5)
    ]
    return edit + "\n\n".join(sentences)


def _write_jsonl(path: Path, docs: dict[str, str]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for doc_id, text in docs.items():
            f.write(json.dumps({"id": doc_id, "title": doc_id.title(), "text": text}) + "\n")


def _corpus(n: int) -> dict[str, str]:
    return {f"doc-{i:03d}": _text(i) for i in range(n)}


def _batched_workspace(root: Path, monkeypatch: pytest.MonkeyPatch, docs: dict[str, str]):
    ws = make_workspace(root, monkeypatch, batching={"batch_documents": 8}, sync_batch_rows=4)
    _write_jsonl(root / "big.jsonl", docs)
    ws.write_config(
        sources=[
            {"name": "big", "path": "big.jsonl", "kind": "jsonl"},
            {"name": "sample", "path": "corpus"},
        ]
    )
    return ws


def _by_doc(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r["doc_id"], []).append(r)
    return out


def test_batch_of_is_stable_and_doubling_only_splits() -> None:
    ids = [f"doc-{i}" for i in range(2000)]
    assert batch_count(0, 8) == 1 and batch_count(8, 8) == 1 and batch_count(9, 8) == 2
    assert batch_count(100, 8) == 16  # ceil(100 / 8) = 13, up to the next power of two
    at8 = {d: batch_of(d, 8) for d in ids}
    assert at8 == {d: batch_of(d, 8) for d in ids}  # a pure function of the id
    assert set(at8.values()) == set(range(8))
    # Doubling the count splits each batch in two; no document moves anywhere else.
    assert all(batch_of(d, 16) in (at8[d], at8[d] + 8) for d in ids)


def test_frame_batches_read_one_batch_from_mixed_files(tmp_path: Path) -> None:
    out = BatchWriter(tmp_path / "staged")
    out.write(pl.DataFrame({"doc_id": ["a", "b", "c"], BATCH: [2, 0, 2]}))
    out.write(pl.DataFrame({"doc_id": ["d", "e"], BATCH: [1, 2]}))
    out.write_batch(5, pl.DataFrame({"doc_id": ["f"]}))
    batches = out.finish()
    assert batches.keys() == [0, 1, 2, 5]
    assert sorted(batches.read(2)["doc_id"].to_list()) == ["a", "c", "e"]
    assert batches.read(5)[BATCH].to_list() == [5]
    assert batches.read(3).height == 0
    assert batches.rows() == 6
    assert FrameBatches(tmp_path / "missing").keys() == []


@pytest.mark.parametrize("max_open", [1, 2, 256])
def test_regroup_leaves_one_file_per_batch_with_the_same_rows_in_order(
    tmp_path: Path, max_open: int
) -> None:
    """Files written in source order hold a row group of nearly every batch; after `regroup`
    each batch is one file, with the same rows in the same order (and rounds of at most
    `max_open` open files give the same result)."""
    out = BatchWriter(tmp_path / "staged")
    out.write(pl.DataFrame({"doc_id": ["a", "b", "c", "d"], BATCH: [2, 0, 2, 1]}))
    out.write(pl.DataFrame({"doc_id": ["e", "f", "g"], BATCH: [1, 2, 0]}))
    out.write(pl.DataFrame({"doc_id": ["h"], BATCH: [2]}))
    before = {k: f["doc_id"].to_list() for k, f in FrameBatches(tmp_path / "staged")}
    out.regroup(max_open=max_open)
    batches = out.finish()
    assert {k: f["doc_id"].to_list() for k, f in batches} == before
    assert before[2] == ["a", "c", "f", "h"]
    assert sorted(p.name for p in batches.files()) == [
        "batch-00000.parquet",
        "batch-00001.parquet",
        "batch-00002.parquet",
    ]
    assert all({path for path, _ in pairs} == {pairs[0][0]} for pairs in batches.index().values())
    assert not (tmp_path / "staged" / ".regroup").exists()


def test_regroup_writes_row_groups_by_size_not_one_per_input_file(tmp_path: Path) -> None:
    """An open writer keeps each row group's metadata, so a batch file must not get a row
    group per input file (their number grows with the source): pieces are held up to the
    buffer, then written together; a tiny buffer still gives the same rows in order."""

    def staged(name: str) -> BatchWriter:
        out = BatchWriter(tmp_path / name)
        for f in range(12):  # twelve input files, each with a piece of batches 0 to 2
            ids = [f"{f:02d}-{i}" for i in range(6)]
            out.write(pl.DataFrame({"doc_id": ids, BATCH: [i % 3 for i in range(6)]}))
        return out

    roomy, tight = staged("roomy"), staged("tight")
    before = {k: f["doc_id"].to_list() for k, f in FrameBatches(tmp_path / "roomy")}
    roomy.regroup()
    tight.regroup(buffer_bytes=1)  # every piece written as soon as it is read
    for out, row_groups in ((roomy, 1), (tight, 12)):
        batches = out.finish()
        assert {k: f["doc_id"].to_list() for k, f in batches} == before
        assert [pq.ParquetFile(p).metadata.num_row_groups for p in batches.files()] == [
            row_groups
        ] * 3


def test_batch_files_keep_statistics_of_the_batch_and_document_id_only(tmp_path: Path) -> None:
    """A text column's min and max would be whole passages in every row group's footer entry
    (held by each open writer until it closes); the batch key's are what the index reads."""
    out = BatchWriter(tmp_path / "staged")
    text = ["x" * 3000, "y" * 3000, "z" * 3000]
    out.write(pl.DataFrame({"doc_id": ["a", "b", "c"], "text": text, BATCH: [1, 0, 1]}))
    out.write(pl.DataFrame({"doc_id": ["d"], "text": ["w" * 3000], BATCH: [0]}))
    out.regroup()
    batches = out.finish()
    assert {k: f["doc_id"].to_list() for k, f in batches} == {0: ["b", "d"], 1: ["a", "c"]}
    for path in batches.files():
        meta = pq.ParquetFile(path).metadata
        for rg in range(meta.num_row_groups):
            stats = {
                meta.row_group(rg).column(i).path_in_schema: meta.row_group(rg).column(i)
                for i in range(meta.num_columns)
            }
            assert stats[BATCH].is_stats_set and stats["doc_id"].is_stats_set
            assert not stats["text"].is_stats_set
        assert meta.serialized_size < 3000  # no passage in the footer


def test_parse_finds_the_wanted_documents_once_with_their_batches(tmp_path: Path) -> None:
    """The parse step looks the listing up in the inventory's sorted columns (not Python sets
    and dicts): only wanted documents are parsed, a duplicate id once, each block carries
    its document's batch from the inventory, and a wanted document the source no longer
    lists fails as vanished."""
    from clef_pipelines.config import Settings, SourceConfig
    from clef_pipelines.ingest import stages

    docs = [("a", 0), ("b", 1), ("c", 2), ("c", 3), ("d", 4)]
    with (tmp_path / "s.jsonl").open("w", encoding="utf-8") as f:
        for doc_id, i in docs:
            f.write(json.dumps({"id": doc_id, "text": _text(i)}) + "\n")
    inventory = pl.DataFrame(
        {
            "doc_id": ["d", "c", "zz", "a", "b"],
            "status": ["new", "changed", "new", "unchanged", "failed"],
            BATCH: [7, 5, 3, 1, 2],
        }
    )
    source = SourceConfig(name="s", path=str(tmp_path / "s.jsonl"), kind="jsonl")
    out = BatchWriter(tmp_path / "parsed")
    stats, failures = stages.parse_source_batches(Settings(), source, inventory, "fp", out)
    blocks = out.finish().read_all()
    assert stats.documents == 2
    assert dict(blocks.group_by("doc_id").agg(pl.col(BATCH).unique()).iter_rows()) == {
        "c": [5],
        "d": [7],
    }
    # The first "c" only (six paragraphs; the duplicate has seven).
    assert blocks.filter(pl.col("doc_id") == "c").height == 6
    assert failures.select("doc_id", "reason").rows() == [("zz", "unreadable")]


def test_source_streams_in_batches_and_a_refresh_touches_only_changed_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = _corpus(40)
    ws = _batched_workspace(tmp_path, monkeypatch, docs)
    first = {r.source: r for r in ws.ingest()}
    assert all(r.success for r in first.values()), [r.error for r in first.values()]
    inventory = first["big"].assets["source_documents"]
    assert inventory["batches"] == 8  # 40 documents at 8 per batch: 5, up to a power of two
    assert inventory["batches_to_process"] == 8
    assert first["big"].assets["embeddings"]["batches_written"] == 8
    assert first["big"].assets["store_sync"]["batches_synced"] == 8
    folder = ws.settings().data_path / "intermediates" / "clef" / "chunks" / "big"
    assert len(list(folder.glob("batch-*.parquet"))) == 8  # one Parquet file per batch
    stored = _by_doc(ws.records())
    assert {d for d in stored if d in docs} == set(docs)
    other_before = {r["id"]: r["ingested_at"] for r in ws.records() if r["source"] == "sample"}
    assert other_before

    # Edit one document, remove one, add one: only their batches are read and written.
    edited, removed, added = "doc-003", "doc-017", "doc-new"
    docs[edited] = _text(3, edit="Edited opening line. ")
    del docs[removed]
    docs[added] = _text(41)
    _write_jsonl(tmp_path / "big.jsonl", docs)
    touched = {batch_of(d, 8) for d in (edited, removed, added)}
    (refresh,) = ws.ingest(["big"])
    assert refresh.success, refresh.error
    counts = refresh.assets["source_documents"]
    assert counts["batches"] == 8
    assert counts["batches_to_process"] == len(touched) < 8
    assert counts["documents_new"] == counts["documents_changed"] == 1
    assert counts["documents_removed"] == 1
    assert refresh.assets["store_sync"]["batches_synced"] == len(touched)
    assert refresh.assets["embeddings"]["batches_written"] <= len(touched)
    assert refresh.assets["parsed_blocks"]["documents_parsed"] == 2
    assert len(list(folder.glob("batch-*.parquet"))) <= len(touched)
    assert refresh.checks["store_sync:no_removed_documents_stored"]

    records = ws.records()
    stored = _by_doc([r for r in records if r["source"] == "big"])
    assert set(stored) == set(docs)  # the removed one is gone, the new one is in
    assert any("Edited opening line" in r["text"] for r in stored[edited])
    for doc_id, recs in stored.items():  # every document complete, no leftovers
        assert len(recs) == recs[0]["doc_chunk_count"], doc_id
        assert len({r["doc_hash"] for r in recs}) == 1, doc_id
    # The other source in the same collection was not touched.
    assert {r["id"]: r["ingested_at"] for r in records if r["source"] == "sample"} == other_before


@pytest.mark.stress  # a CLI subprocess timed by the test: the lane after the suite
def test_killed_batched_sync_is_repaired_by_a_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = _corpus(24)
    ref = _batched_workspace(tmp_path / "ref", monkeypatch, docs)
    ref.write_config(sources=[{"name": "big", "path": "big.jsonl", "kind": "jsonl"}])
    ws = _batched_workspace(tmp_path / "ws", monkeypatch, docs)
    ws.write_config(sources=[{"name": "big", "path": "big.jsonl", "kind": "jsonl"}])
    (clean,) = ref.ingest()
    assert clean.success, clean.error
    expected = {(r["id"], r["doc_id"]) for r in ref.records()}

    # A real process, SIGKILLed by fault injection in the middle of its batches.
    env = dict(os.environ, DAGSTER_HOME=str(ws.root / "dagster"))
    env[KILL_AFTER_UPSERTS_ENV] = "5"
    proc = subprocess.run(
        [sys.executable, "-m", "clef_pipelines", "ingest", "--config", str(ws.config_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    half = {(r["id"], r["doc_id"]) for r in ws.records()}
    assert half and half < expected  # some batches landed, not all

    monkeypatch.setenv("DAGSTER_HOME", str(ws.root / "dagster"))
    (repair,) = ws.ingest()
    assert repair.success, repair.error
    # Batches the killed run finished are complete: the repair reads only the others.
    assert repair.assets["source_documents"]["batches_to_process"] < 4
    records = ws.records()
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)), "duplicates after repair"
    assert {(r["id"], r["doc_id"]) for r in records} == expected
    (settled,) = ws.ingest()
    # Nothing left to repair: the sync materialises and says it changed nothing.
    assert settled.assets["store_sync"]["changed"] is False
