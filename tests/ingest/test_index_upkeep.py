"""Index upkeep cut short (disk full, kill -9 during it) is found and finished by the next run,
even when every document is unchanged and the run writes nothing else.

Real parts: the sample corpus ingested into LanceDB by the pipeline; the interruption is the
state it leaves (rows the scalar and full-text indexes do not cover), made with LanceDB's own
API: rows deleted and appended back as they were, with no index update after.
"""

from __future__ import annotations

from typing import Any

import lancedb

from clef_pipelines.stores.lancedb_store import LanceDBStore
from tests.ingest.conftest import Ingested

QUERIES = ("sync folder devices", "install the desktop client", "conflict copy error")


def coverage(store: LanceDBStore) -> dict[str, tuple[int, int]]:
    """Per index but the ANN one: (indexed, unindexed) rows, as Lance counts them."""
    t = lancedb.connect(store.path).open_table("docs")
    out = {}
    for ix in t.list_indices():
        if "vector" not in ix.columns:
            stats = t.index_stats(ix.name)
            out[ix.name] = (stats.num_indexed_rows, stats.num_unindexed_rows)
    return out


def rankings(store: LanceDBStore) -> list[list[tuple[str, float]]]:
    return [
        [(h.id, round(h.score, 6)) for h in store.text_query("docs", q, top_k=20)] for q in QUERIES
    ]


def interrupt_upkeep(store: LanceDBStore) -> int:
    """Three quarters of the rows rewritten as they were, outside every index: what a run
    that wrote them and died before its upkeep leaves. Returns the table's rows."""
    t = lancedb.connect(store.path).open_table("docs")
    rows = t.to_arrow()
    moved = rows.slice(rows.num_rows // 4)
    ids = ", ".join(f"'{i}'" for i in moved.column("id").to_pylist())
    t.delete(f"id IN ({ids})")
    t.add(moved)
    return rows.num_rows


def test_an_unchanged_rerun_finishes_interrupted_index_upkeep(ingested: Ingested) -> None:
    workspace = ingested.workspace
    store: Any = workspace.store()
    try:
        clean = rankings(store)
        assert any(clean)
        n = interrupt_upkeep(store)
        damaged = coverage(store)
        assert damaged and all(unindexed > 0 for _, unindexed in damaged.values()), damaged
    finally:
        store.close()

    (report,) = workspace.ingest()
    assert report.success, report

    store = workspace.store()
    try:
        # Every scalar and full-text index covers every row again, and text search ranks as
        # the clean build did.
        assert coverage(store) == {name: (n, 0) for name in damaged}
        assert rankings(store) == clean
    finally:
        store.close()
    # The run found the gap and said so (every document was unchanged: nothing else ran).
    upkeep = report.assets["source_documents"]["index_upkeep"]
    assert upkeep["rows_folded_in"] == {name: u for name, (_, u) in damaged.items()}, upkeep
