"""The sync appends the chunks of new documents (no id lookup) and upserts the rest; an
inventory older than the store must not make it store a record twice.

Real parts: a LanceDB store in a temporary folder, the hash embedder, the sync's own code.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from clef_pipelines.ingest.documents import CHANGED, NEW, REPAIR
from clef_pipelines.ingest.sync import confirm_new_documents, sync_source
from clef_pipelines.stores.lancedb_store import LanceDBStore
from tests.stores.refresh import EMBEDDER, chunk_frame, inventory


def chunks(source: str, docs: dict[str, list[str]], doc_hash: str = "h1") -> pl.DataFrame:
    """Embedded chunks of `docs` (doc id -> chunk texts), all of one document hash."""
    return chunk_frame(source, {doc_id: (doc_hash, texts) for doc_id, texts in docs.items()})


def sync(store: LanceDBStore, source: str, inv: pl.DataFrame, frame: pl.DataFrame) -> None:
    sync_source(store, "c", source, inv, frame, EMBEDDER, chunker="structural", batch_rows=2)


def stored_ids(store: LanceDBStore, source: str) -> Counter[str]:
    return Counter(r["id"] for r in store.scan("c", where={"source": source}, fields=["id"]))


@pytest.fixture
def store(tmp_path: Path) -> LanceDBStore:
    return LanceDBStore(tmp_path / "lancedb")


def test_new_documents_are_appended_and_read_back(store: LanceDBStore) -> None:
    frame = chunks("a", {"d1": ["one", "two", "three"], "d2": ["four"]})
    appended: list[int] = []
    real = store.insert

    def counted(collection: str, records: list) -> int:  # type: ignore[type-arg]
        appended.append(len(records))
        return real(collection, records)

    store.insert = counted  # type: ignore[method-assign]
    sync(store, "a", inventory("a", {"d1": NEW, "d2": NEW}), frame)
    assert sum(appended) == 4  # every chunk went through the append path
    assert stored_ids(store, "a") == Counter(frame["id"].to_list())


def test_a_stale_inventory_does_not_store_records_twice(store: LanceDBStore) -> None:
    """The same NEW inventory synced twice (the sync step re-run on an earlier run's
    intermediates): the second sync finds the documents stored and upserts them."""
    frame = chunks("a", {"d1": ["one", "two", "three"], "d2": ["four"]})
    inv = inventory("a", {"d1": NEW, "d2": NEW})
    sync(store, "a", inv, frame)
    sync(store, "a", inv, frame)
    assert stored_ids(store, "a") == Counter(frame["id"].to_list())  # each id once
    assert store.count("c") == frame.height


def test_a_stale_new_document_is_repaired(store: LanceDBStore) -> None:
    """A document the inventory calls new but the store holds older chunks of (a sync of
    another version ran since the inventory): it ends holding exactly the current chunks."""
    old = chunks("a", {"d1": ["old one", "old two"], "d2": ["kept"]}, doc_hash="h0")
    sync(store, "a", inventory("a", {"d1": NEW, "d2": NEW}), old)
    current = chunks("a", {"d1": ["new one"], "d3": ["fresh"]}, doc_hash="h1")
    inv = inventory("a", {"d1": NEW, "d3": NEW})
    confirmed = confirm_new_documents(store, "c", "a", inv)
    assert dict(zip(confirmed["doc_id"], confirmed["status"], strict=True)) == {
        "d1": REPAIR,
        "d3": NEW,
    }
    sync(store, "a", inv, current)
    expected = Counter(current["id"].to_list()) + Counter(
        old.filter(pl.col("doc_id") == "d2")["id"]
    )
    assert stored_ids(store, "a") == expected


def test_another_sources_documents_are_not_touched(store: LanceDBStore) -> None:
    """The same document id in another source neither demotes a new document nor is
    changed by its sync."""
    theirs = chunks("b", {"d1": ["theirs one", "theirs two"]})
    sync(store, "b", inventory("b", {"d1": NEW}), theirs)
    ours = chunks("a", {"d1": ["ours"]})
    inv = inventory("a", {"d1": NEW})
    assert confirm_new_documents(store, "c", "a", inv)["status"].to_list() == [NEW]
    sync(store, "a", inv, ours)
    assert stored_ids(store, "b") == Counter(theirs["id"].to_list())
    assert stored_ids(store, "a") == Counter(ours["id"].to_list())
    # A changed document of ours is upserted and its stale chunk deleted; theirs stays.
    edited = chunks("a", {"d1": ["ours edited"]}, doc_hash="h2")
    sync(store, "a", inventory("a", {"d1": CHANGED}), edited)
    assert stored_ids(store, "a") == Counter(edited["id"].to_list())
    assert stored_ids(store, "b") == Counter(theirs["id"].to_list())


def test_changed_documents_are_written_before_their_stale_chunks_go(
    store: LanceDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clef_pipelines.ingest import sync as sync_module

    before = {
        "d1": ["kept one", "old one"],
        "d2": ["old two"],
        "d3": ["kept three", "old three a", "old three b"],
        "d4": ["old four"],  # changes to nothing at all: keeps none
        "d5": ["untouched five"],
    }
    sync(store, "a", inventory("a", dict.fromkeys(before, NEW)), chunks("a", before))
    sync(store, "b", inventory("b", {"d1": NEW}), chunks("b", {"d1": ["old one"]}))

    after = {"d1": ["kept one", "new one"], "d2": ["new two"], "d3": ["kept three"]}
    changed = dict.fromkeys(["d1", "d2", "d3", "d4"], CHANGED)
    monkeypatch.setattr(sync_module, "_STALE_IDS_PER_DELETE", 3)
    calls: list[tuple[str, object]] = []
    for name in ("delete", "insert", "upsert"):
        real = getattr(store, name)

        def counted(collection: str, *args, _real=real, _name=name, **kwargs):  # type: ignore[no-untyped-def]
            ids = kwargs.get("ids") if _name == "delete" else [r["id"] for r in args[0]]
            calls.append((_name, ids))
            return _real(collection, *args, **kwargs)

        setattr(store, name, counted)
    report = sync_source(
        store,
        "c",
        "a",
        inventory("a", changed),
        chunks("a", after, doc_hash="h2"),
        EMBEDDER,
        chunker="structural",
        batch_rows=2,
    )

    # Every current chunk is written before anything is deleted: new texts appended, the two
    # kept texts (ids the store holds) upserted; then the stale ids deleted, three a delete.
    names = [name for name, _ in calls]
    first_delete = names.index("delete")
    assert set(names[:first_delete]) == {"insert", "upsert"}
    assert set(names[first_delete:]) == {"delete"}
    assert [len(ids) for name, ids in calls if name == "delete"] == [3, 2]  # type: ignore[arg-type]
    kept = chunks("a", after, doc_hash="h2").filter(pl.col("text").str.starts_with("kept"))
    upserted = [i for name, ids in calls if name == "upsert" for i in ids]  # type: ignore[union-attr]
    assert sorted(upserted) == sorted(kept["id"])
    # Stale: old one, old two, old three a and b, old four (not the two kept chunks).
    assert report.deleted_stale == 5
    expected = chunks("a", {**after, "d5": before["d5"]}, doc_hash="h2")
    assert stored_ids(store, "a") == Counter(expected["id"].to_list())
    stored = {r["id"]: r for r in store.scan("c", where={"source": "a"})}
    # A kept chunk carries its document's new hash: it was rewritten, not left as it was.
    kept = expected.filter(pl.col("text") == "kept one")["id"].item()
    assert stored[kept]["doc_hash"] == "h2"
    # The other source's record with the same document id and text is untouched.
    assert stored_ids(store, "b") == Counter(chunks("b", {"d1": ["old one"]})["id"].to_list())


def test_a_refresh_of_many_documents_never_hides_one(tmp_path: Path) -> None:
    """A real LanceDB table refreshed in many write batches: after every write, every
    document that exists before and after the refresh is in the table."""
    from tests.stores.refresh import watched_refresh

    missing = watched_refresh(LanceDBStore(tmp_path / "many"), 400, batch_rows=32)
    assert len(missing) > 20 and max(missing) == 0, missing


class _CrashBeforeDeletes(Exception):
    """The run dies between the sync's writes and its deletes."""


def test_a_run_killed_between_write_and_delete_is_repaired_by_the_rerun(
    store: LanceDBStore,
) -> None:
    """New chunks written, stale ones not yet deleted: the next inventory sees the document as
    incomplete (two hashes), and its sync finds the stale chunks and removes them."""
    from clef_pipelines.ingest.documents import stored_document_facts

    before = {"d1": ["kept", "old a", "old b"], "d2": ["untouched"]}
    sync(store, "a", inventory("a", dict.fromkeys(before, NEW)), chunks("a", before))
    after = chunks("a", {"d1": ["kept", "new a"]}, doc_hash="h2")
    real_delete = store.delete

    def crash(*args: object, **kwargs: object) -> int:
        raise _CrashBeforeDeletes

    store.delete = crash  # type: ignore[method-assign,assignment]
    with pytest.raises(_CrashBeforeDeletes):
        sync(store, "a", inventory("a", {"d1": CHANGED}), after)
    store.delete = real_delete  # type: ignore[method-assign]
    # The new chunks are there beside the stale ones: d1 is visibly incomplete.
    assert set(after["id"]) <= set(stored_ids(store, "a"))
    facts = stored_document_facts(store, "c", "a").sort("doc_id")
    assert facts["hash_min"].to_list() != facts["hash_max"].to_list()
    # The rerun (the inventory says REPAIR) removes the stale chunks.
    sync(store, "a", inventory("a", {"d1": REPAIR}), after)
    untouched = chunks("a", {"d2": before["d2"]})
    assert stored_ids(store, "a") == Counter([*after["id"], *untouched["id"]])
