"""What the store_sync step reports after a sync (the source's totals and the stale-document
check) is exact when the source's records are read in many slices.

Real parts: a LanceDB store in a temporary folder, the hash embedder, the sync's own code. The
slice is cut to 3 records so that documents span slices and slices repeat documents.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clef_pipelines.ingest import documents, totals
from clef_pipelines.ingest.documents import NEW, REMOVED
from clef_pipelines.ingest.totals import source_totals
from clef_pipelines.steering import checks
from clef_pipelines.stores.lancedb_store import LanceDBStore
from tests.ingest.test_sync_append import chunks, inventory, sync


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LanceDBStore:
    monkeypatch.setattr(totals, "_SLICE", 3)
    return LanceDBStore(tmp_path / "db")


def docs(n: int, per_doc: int, tag: str = "") -> dict[str, list[str]]:
    return {f"d{i}": [f"doc {i} chunk {j} {tag}" for j in range(per_doc)] for i in range(n)}


def test_totals_count_each_document_once_across_slices(store: LanceDBStore) -> None:
    sync(store, "s", inventory("s", dict.fromkeys(docs(7, 4), NEW)), chunks("s", docs(7, 4)))
    # Another source in the same collection is not counted.
    sync(store, "t", inventory("t", dict.fromkeys(docs(2, 1), NEW)), chunks("t", docs(2, 1)))
    got = source_totals(store, "c", "s")
    assert (got.documents, got.records, got.chunks, got.quarantined) == (7, 28, 28, 0)
    assert got.tokens == 0  # (the test's chunks carry no token counts)


def test_stale_document_check_finds_exactly_the_stored_documents_the_source_lost(
    store: LanceDBStore,
) -> None:
    sync(store, "s", inventory("s", dict.fromkeys(docs(5, 4), NEW)), chunks("s", docs(5, 4)))
    sync(store, "t", inventory("t", {"d9": NEW}), chunks("t", {"d9": ["other source"]}))
    # The inventory now says d1 is removed and no longer lists d3: both are still stored.
    current = {"d0": NEW, "d1": REMOVED, "d2": NEW, "d4": NEW}
    passed, facts = checks.no_removed_documents(store, "c", "s", inventory("s", current))
    assert not passed
    assert facts == {"stored_documents": 5, "stale_documents": 2, "examples": ["d1", "d3"]}
    full = inventory("s", dict.fromkeys(docs(5, 4), NEW))
    assert checks.no_removed_documents(store, "c", "s", full) == (
        True,
        {"stored_documents": 5, "stale_documents": 0, "examples": []},
    )


def test_stored_document_facts_fold_documents_that_span_slices(
    store: LanceDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync(store, "s", inventory("s", dict.fromkeys(docs(7, 4), NEW)), chunks("s", docs(7, 4)))
    sync(store, "t", inventory("t", {"d9": NEW}), chunks("t", {"d9": ["other source"]}))
    monkeypatch.setattr(documents, "_SCAN_FOLD", 10**6)
    whole = documents.stored_document_facts(store, "c", "s").sort("doc_id")
    monkeypatch.setattr(documents, "_SCAN_FOLD", 3)  # every document spans two slices
    sliced = documents.stored_document_facts(store, "c", "s").sort("doc_id")
    assert sliced.equals(whole)
    assert sliced["doc_id"].to_list() == [f"d{i}" for i in range(7)]
    assert sliced["records"].to_list() == [4] * 7
