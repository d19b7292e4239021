"""Adapter specifics the conformance suite cannot express: persistence across handles, the
factory, LanceDB maintenance, the pgvector schema."""

from __future__ import annotations

import contextlib
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from clef_pipelines.stores import open_store
from clef_pipelines.stores.base import CollectionSpec, StoreError, VectorStore
from clef_pipelines.stores.config import StoreConfig
from tests.stores.test_conformance import DATA, FIELDS, FILTER_FIELDS, spec, uid, vec


def _reopen(kind: str, tmp_path: pathlib.Path, pg_dsn: Any | None, schema: str) -> VectorStore:
    if kind == "lancedb":
        from clef_pipelines.stores.lancedb_store import LanceDBStore

        return LanceDBStore(tmp_path / "lance")
    if kind == "qdrant":
        from clef_pipelines.stores.qdrant_store import QdrantStore

        return QdrantStore(path=str(tmp_path / "qdrant"))
    from clef_pipelines.stores.pgvector_store import PgVectorStore

    return PgVectorStore(pg_dsn, schema=schema)


@contextlib.contextmanager
def _pg_store(pg_dsn: str, prefix: str, **kwargs: Any) -> Iterator[Any]:
    """A PgVectorStore in a fresh schema, dropped with everything in it afterwards."""
    import psycopg
    from psycopg import sql

    from clef_pipelines.stores.pgvector_store import PgVectorStore

    schema = prefix + uuid.uuid4().hex[:8]
    store = PgVectorStore(pg_dsn, schema=schema, **kwargs)
    try:
        yield store
    finally:
        store.close()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.parametrize("kind", ["lancedb", "qdrant", "pgvector"])
def test_data_survives_a_new_handle(
    kind: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    dsn = request.getfixturevalue("pg_dsn") if kind == "pgvector" else None
    schema = f"persist_{tmp_path.name[-8:].replace('-', '_')}"
    first = _reopen(kind, tmp_path, dsn, schema)
    try:
        first.ensure_collection(spec())
        first.upsert("docs", DATA)
        first.put_manifest("docs", {"v": 3})
    finally:
        first.close()
    second = _reopen(kind, tmp_path, dsn, schema)
    try:
        assert second.list_collections() == ["docs"]
        assert second.count("docs") == len(DATA)
        assert second.get_manifest("docs") == {"v": 3}
        assert second.query("docs", vec(1), top_k=1)[0].id == uid(1)
        assert set(second.list_ids("docs", where={"doc_id": "a"})) == {uid(0), uid(1)}
        second.drop("docs")
    finally:
        second.close()


def test_factory(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str) -> None:
    s = open_store(StoreConfig(), tmp_path)
    assert s.kind == "lancedb" and (tmp_path / "lancedb").is_dir()
    s = open_store(StoreConfig(kind="memory"), tmp_path)
    assert s.kind == "memory"
    s = open_store(StoreConfig.model_validate({"kind": "qdrant"}), tmp_path)
    assert s.kind == "qdrant" and (tmp_path / "qdrant").is_dir()
    s.close()
    s = open_store(
        StoreConfig.model_validate({"kind": "qdrant", "qdrant": {"path": ":memory:"}}), tmp_path
    )
    s.close()
    monkeypatch.delenv("CLEF_TEST_MISSING_DSN", raising=False)
    cfg = StoreConfig.model_validate(
        {"kind": "pgvector", "pgvector": {"dsn_env": "CLEF_TEST_MISSING_DSN"}}
    )
    with pytest.raises(StoreError, match="CLEF_TEST_MISSING_DSN"):
        open_store(cfg, tmp_path)
    cfg = StoreConfig.model_validate(
        {"kind": "qdrant", "qdrant": {"url": "http://127.0.0.1:1", "api_key_env": "CLEF_NO_KEY"}}
    )
    monkeypatch.delenv("CLEF_NO_KEY", raising=False)
    with pytest.raises(StoreError, match="CLEF_NO_KEY"):
        open_store(cfg, tmp_path)
    monkeypatch.setenv("CLEF_TEST_DSN", pg_dsn)
    cfg = StoreConfig.model_validate(
        {"kind": "pgvector", "pgvector": {"dsn_env": "CLEF_TEST_DSN", "schema_name": "factory_t"}}
    )
    s = open_store(cfg, tmp_path)
    assert s.kind == "pgvector"
    s.ensure_collection(spec())
    s.drop("docs")
    s.close()


def test_lancedb_indexes_and_version_cleanup(tmp_path: pathlib.Path) -> None:
    from clef_pipelines.stores.lancedb_store import LanceDBStore

    store = LanceDBStore(
        tmp_path / "l", index_threshold=50, optimize_every=5, cleanup_older_than_s=0
    )
    store.ensure_collection(spec(dim=16))
    rng = np.random.default_rng(0)
    for round_ in range(30):
        recs = [
            {"id": uid(f"{round_}-{i}"), "vector": rng.standard_normal(16), "doc_id": f"d{round_}"}
            for i in range(20)
        ]
        store.upsert("docs", recs)
        store.delete("docs", where={"doc_id": f"d{round_ - 3}"})
    table = store._table("docs")
    assert not any("vector" in ix.columns for ix in table.list_indices())  # never in a write
    assert store.build_indexes("docs")["vector_index"].endswith("built")
    indexed = {c for ix in table.list_indices() for c in ix.columns}
    assert {"vector", "id", *FILTER_FIELDS, "quarantined"} <= indexed
    assert len(table.list_versions()) <= 12  # not one per write
    done = store.maintain("docs")
    assert done["optimized"] and done["rows"] == 60
    assert len(table.list_versions()) <= 2
    hits = store.query("docs", rng.standard_normal(16), where={"doc_id": "d29"}, top_k=30)
    assert len(hits) == 20


def test_lancedb_complete_indexes_folds_in_rows_an_interrupted_upkeep_left(
    tmp_path: pathlib.Path,
) -> None:
    """Rows appended with no upkeep after (a run that died before it): `complete_indexes`
    finds every scalar index short of the table and folds them in; `build_indexes` does too
    (a collection without text fields, whose text index step would not)."""
    from clef_pipelines.stores.lancedb_store import LanceDBStore

    def uncovered(store: LanceDBStore) -> dict[str, int]:
        t = store._table("docs")
        return {ix.name: t.index_stats(ix.name).num_unindexed_rows for ix in t.list_indices()}

    store = LanceDBStore(tmp_path / "l", optimize_every=0)
    store.ensure_collection(spec())
    store.upsert("docs", DATA)
    store.maintain("docs")
    assert store.complete_indexes("docs") == {}  # complete: nothing done
    extra = [{**r, "id": uid(f"extra-{r['id']}")} for r in DATA]
    t = store._table("docs")
    t.add(store._arrow_records(store.get_spec("docs"), extra))  # no index update
    gaps = {name: n for name, n in uncovered(store).items() if n}
    assert gaps and set(gaps.values()) == {len(extra)}
    assert store.complete_indexes("docs")["rows_folded_in"] == gaps
    assert not any(uncovered(store).values())
    t = store._table("docs")
    t.add(
        store._arrow_records(
            store.get_spec("docs"), [{**r, "id": uid(f"more-{r['id']}")} for r in DATA]
        )
    )
    assert store.build_indexes("docs")["rows_folded_in"] == gaps
    assert not any(uncovered(store).values())
    assert store.count("docs", where={"doc_id": "a"}) == 6


def test_lancedb_upkeep_during_writes_follows_the_table_size(tmp_path: pathlib.Path) -> None:
    """Each upkeep updates every index of the table, so during a load it waits for a share of
    the table to be written: a load of N rows in small writes takes O(log N) upkeeps, not
    N / optimize_every, and every record stays readable and findable by an exact search in
    between."""
    from clef_pipelines.stores.lancedb_store import LanceDBStore

    upkeeps: dict[float, int] = {}
    for fraction in (0.0, 0.5):
        store = LanceDBStore(tmp_path / f"l{fraction}", optimize_every=2, upkeep_fraction=fraction)
        real = store._optimize

        def counted(name: str, real: Any = real, fraction: float = fraction) -> None:
            upkeeps[fraction] = upkeeps.get(fraction, 0) + 1
            real(name)

        store._optimize = counted  # type: ignore[method-assign]
        store.ensure_collection(spec())
        for w in range(64):
            store.upsert("docs", [_rec(w * 10 + i) for i in range(10)])
        assert store.count("docs") == 640
        assert store.get("docs", [uid(0), uid(639)])[1]["id"] == uid(639)
        hits = store.query("docs", vec(639), top_k=1)
        assert hits[0].id == uid(639)
    assert upkeeps[0.0] == 32  # every optimize_every (2) writes
    # At 20, 40, 70, 110, 170, 260, 390, 590 rows: each when half the table is new.
    assert upkeeps[0.5] <= 10

    # A new process refreshing part of the loaded table: the table as found counts as upkept.
    later = LanceDBStore(tmp_path / "l0.5", optimize_every=2, upkeep_fraction=0.5)
    versions = len(later._table("docs").list_versions())
    for w in range(8):  # 80 rows rewritten, less than half of 640
        later.upsert("docs", [_rec(w * 10 + i) for i in range(10)])
    assert len(later._table("docs").list_versions()) == versions + 8  # writes only, no upkeep
    assert later.count("docs") == 640


def _rec(i: int) -> dict[str, Any]:
    return {"id": uid(i), "vector": vec(i), "doc_id": f"d{i // 10}", "n": i}


def test_lancedb_upkeep_comes_every_upkeep_rows_on_a_large_table(tmp_path: pathlib.Path) -> None:
    """Upkeep during writes waits for a share of the table, but never past `upkeep_rows` rows:
    its index update holds memory in proportion to the rows it folds in, so with the share
    alone a large load's upkeeps folded in ever more rows (the sync's memory grew with the
    table)."""
    from clef_pipelines.stores.lancedb_store import LanceDBStore

    store = LanceDBStore(tmp_path / "l", optimize_every=2, upkeep_fraction=0.5, upkeep_rows=40)
    folded: list[int] = []
    real = store._optimize

    def counted(name: str) -> None:
        folded.append(store._since_upkeep[name][1])
        real(name)

    store._optimize = counted  # type: ignore[method-assign]
    store.ensure_collection(spec())
    for w in range(64):
        store.upsert("docs", [_rec(w * 10 + i) for i in range(10)])
    # Half the table (at least `optimize_every` writes) while that is under 40 rows, then
    # every 40 rows up to 640 (the share alone: 9 upkeeps, the last folding in 200 rows).
    first = folded.index(40)
    assert all(n < 40 for n in folded[:first]) and set(folded[first:]) == {40}
    assert len(folded[first:]) == 13  # 120 rows first, 13 x 40, 0 left
    assert sum(folded) + store._since_upkeep["docs"][1] == 640
    assert store.count("docs") == 640
    assert store.query("docs", vec(639), top_k=1)[0].id == uid(639)


def test_lancedb_index_updates_keep_deltas_of_bounded_rows(tmp_path: pathlib.Path) -> None:
    """Upkeep folds new rows into a scalar or full-text index's latest delta while it covers
    fewer than `index_delta_rows` rows, else into a new delta (merging into one index rewrote
    it whole, with memory that grew with the table). The results are those of one merged
    index: text scores, filtered queries, reads and deletes by id and by document."""
    from dataclasses import replace

    from clef_pipelines.stores.lancedb_store import LanceDBStore

    stores = {
        rows: LanceDBStore(tmp_path / f"l{rows}", optimize_every=0, index_delta_rows=rows)
        for rows in (0, 30)
    }
    words = ["alpha beta", "beta gamma", "gamma delta zanzibar", "alpha"]
    for store in stores.values():
        store.ensure_collection(replace(spec(), text_fields=("text",)))
        for round_ in range(4):  # 20 rows a round, then an upkeep
            rows = range(round_ * 20, round_ * 20 + 20)
            store.upsert("docs", [{**_rec(i), "text": words[i % 4] + f" w{i}"} for i in rows])
            store.maintain("docs")

    def segments(store: LanceDBStore) -> dict[str, int]:
        ds = store._table("docs").to_lance()
        return {d.name: len(d.segments) for d in ds.describe_indices()}

    # 20 rows; 40 (merged: 20 < 30); then 40 >= 30, so a new delta of 20; merged into it: 40.
    assert set(segments(stores[30]).values()) == {2}
    assert set(segments(stores[0]).values()) == {1}
    for store in stores.values():
        table = store._table("docs")
        assert all(
            table.index_stats(ix.name).num_unindexed_rows == 0 for ix in table.list_indices()
        )

    def answers(store: LanceDBStore) -> list[Any]:
        text = [(h.id, round(h.raw_score, 6)) for h in store.text_query("docs", "gamma", top_k=50)]
        near = [h.id for h in store.query("docs", vec(70), where={"doc_id": "d7"}, top_k=5)]
        got = sorted(r["id"] for r in store.get("docs", [uid(5), uid(45), uid(75)]))
        return [text, near, got, store.count("docs", where={"doc_id": {"in": ["d1", "d6"]}})]

    assert answers(stores[30]) == answers(stores[0])
    assert len(answers(stores[30])[0]) == 40
    for store in stores.values():
        assert store.delete("docs", where={"doc_id": {"in": ["d1", "d6"]}}) == 20
        store.maintain("docs")
    assert answers(stores[30]) == answers(stores[0])
    assert answers(stores[30])[3] == 0


def test_lancedb_upkeep_leaves_large_fragments_alone(tmp_path: pathlib.Path) -> None:
    """Upkeep compacts only fragments below `compaction_target_rows`. LanceDB's own optimize
    (a 1M-row target) merged every indexed fragment below it into one at each upkeep, so
    each rewrote the whole table with memory that grew with it. Here a fragment at the target
    keeps its id and rows through upkeeps, the small ones written since are merged, every
    index covers the new rows afterwards, and a fragment with deleted rows is still
    rewritten."""
    from dataclasses import replace

    from clef_pipelines.stores.lancedb_store import LanceDBStore

    store = LanceDBStore(tmp_path / "l", optimize_every=0, compaction_target_rows=50)
    store.ensure_collection(replace(spec(), text_fields=("text",)))

    def row(i: int, text: str = "common words") -> dict[str, Any]:
        return {**_rec(i), "text": text}

    def fragments() -> list[tuple[int, int, bool]]:
        ds = store._table("docs").to_lance()
        return [
            (f.fragment_id, f.count_rows(), f.metadata.deletion_file is not None)
            for f in ds.get_fragments()
        ]

    store.upsert("docs", [row(i) for i in range(120)])  # one fragment above the target
    store.maintain("docs")
    (big,) = fragments()
    assert big[1] == 120
    table = store._table("docs")
    for round_ in range(2):
        for w in range(8):  # eight small fragments, written after the indexes exist
            store.upsert("docs", [row(200 + round_ * 100 + w * 5 + i) for i in range(5)])
        if round_ == 0:
            store.upsert("docs", [row(190, "zanzibar")])
        new_rows = 41 if round_ == 0 else 40
        assert all(
            table.index_stats(ix.name).num_unindexed_rows == new_rows for ix in table.list_indices()
        )
        store.maintain("docs")
        after = fragments()
        # Not rewritten: the same fragment with the same rows (LanceDB's optimize merged it
        # with the first round's fragment, indexed alike, in the second round).
        assert after[0] == big
        assert after[-1][1] == new_rows  # the round's small fragments merged into one
        assert len(after) == 2 + round_
        assert all(
            table.index_stats(ix.name).num_unindexed_rows == 0 for ix in table.list_indices()
        )
    assert [h.id for h in store.text_query("docs", "zanzibar", top_k=5)] == [uid(190)]
    hits = store.query("docs", vec(0), where={"doc_id": "d19"}, top_k=5)
    assert [h.id for h in hits] == [uid(190)]

    # A tenth or more of the big fragment deleted: the deletions are materialised.
    store.delete("docs", where={"doc_id": {"in": ["d0", "d1"]}})
    assert fragments()[0][2]
    store.maintain("docs")
    assert not any(deleted for _, _, deleted in fragments())
    assert store.count("docs") == 201 - 20
    assert [r["id"] for r in store.get("docs", [uid(0), uid(20)])] == [uid(20)]


def test_lancedb_one_trip_search_equals_the_builder_path(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unindexed searches run in one trip to LanceDB's loop and check the quarantine
    exclusion on their result: they must give what the query builder with a prefilter gives
    (ids, scores, records; refs too), with quarantined records near every query."""
    from clef_pipelines.stores import lancedb_store
    from clef_pipelines.stores.lancedb_store import LanceDBStore, _async_table

    store = LanceDBStore(tmp_path / "l")
    store.ensure_collection(spec())
    recs = [
        {**r, "quarantined": r.get("quarantined", False) or i % 3 == 0}
        for i, r in enumerate(
            {"id": uid(f"q-{i}"), "vector": vec(i), "doc_id": "ab"[i % 2], "n": i}
            for i in range(60)
        )
    ]
    store.upsert("docs", recs)
    # The installed LanceDB keeps its async table where the fast path looks for it.
    assert _async_table(store._table("docs")) is not None
    cases = [
        (where, include, k)
        for where in (None, {"doc_id": "a"}, {"n": {"gte": 30}}, {"quarantined": True})
        for include in (False, True)
        for k in (1, 5, 100)
    ]

    def run() -> list[Any]:
        out = []
        for i in range(0, 60, 7):
            for where, include, k in cases:
                kw = {"where": where, "top_k": k, "include_quarantined": include}
                out.append([(h.id, h.score, h.record) for h in store.query("docs", vec(i), **kw)])
                refs = store.query_refs("docs", vec(i), **kw)
                out.append([(h.id, h.score) for h in refs])
                out.append([(h.id, h.record) for h in store.fill_records("docs", refs)])
        return out

    fast = run()
    monkeypatch.setattr(lancedb_store, "_async_table", lambda t: None)
    assert run() == fast
    monkeypatch.undo()
    quarantined = {r["id"] for r in recs if r["quarantined"]}
    assert quarantined and not any(
        h.id in quarantined for i in range(60) for h in store.query("docs", vec(i), top_k=3)
    )


def test_lancedb_one_trip_text_search_equals_the_builder_path(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Full-text searches and reads by row id also run in one trip to LanceDB's loop: the
    same hits, scores and records as through the query builder."""
    from dataclasses import replace

    from clef_pipelines.stores import lancedb_store
    from clef_pipelines.stores.lancedb_store import LanceDBStore

    store = LanceDBStore(tmp_path / "l")
    store.ensure_collection(replace(spec(), text_fields=("text",)))
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    store.upsert(
        "docs",
        [
            {
                "id": uid(f"t-{i}"),
                "vector": vec(i),
                "doc_id": "ab"[i % 2],
                "text": " ".join(words[(i + j) % 6] for j in range(i % 4 + 1)),
                "quarantined": i % 5 == 0,
            }
            for i in range(40)
        ],
    )

    def run() -> list[Any]:
        out = []
        for text in ("alpha", "beta gamma", "zeta epsilon alpha", "nothing"):
            for where in (None, {"doc_id": "b"}):
                for include in (False, True):
                    kw = {"where": where, "top_k": 7, "include_quarantined": include}
                    hits = store.text_query("docs", text, **kw)
                    out.append([(h.id, h.raw_score, h.record) for h in hits])
                    refs = store.text_query_refs("docs", text, **kw)
                    out.append([(h.id, h.raw_score) for h in refs])
                    out.append([(h.id, h.record) for h in store.fill_records("docs", refs)])
        return out

    fast = run()
    assert any(fast)
    monkeypatch.setattr(lancedb_store, "_async_table", lambda t: None)
    assert run() == fast


def test_lancedb_refuses_foreign_table(tmp_path: pathlib.Path) -> None:
    import lancedb

    from clef_pipelines.stores.lancedb_store import LanceDBStore

    lancedb.connect(str(tmp_path / "l")).create_table("docs", data=[{"id": "x", "vector": [1.0]}])
    with pytest.raises(StoreError, match="not created by this store"):
        LanceDBStore(tmp_path / "l").ensure_collection(spec())


def test_pgvector_schema(pg_dsn: str) -> None:
    import psycopg

    from clef_pipelines.stores.pgvector_store import PgVectorStore

    store = PgVectorStore(pg_dsn, schema="schema_check")
    try:
        for metric, opclass in [
            ("cosine", "vector_cosine_ops"),
            ("l2", "vector_l2_ops"),
            ("dot", "vector_ip_ops"),
        ]:
            store.ensure_collection(
                CollectionSpec(
                    name=f"m_{metric}",
                    dimension=4,
                    metric=metric,
                    fields=dict(FIELDS),
                    filter_fields=FILTER_FIELDS,
                )  # type: ignore[arg-type]
            )
            store.build_indexes(f"m_{metric}")
            with psycopg.connect(pg_dsn) as conn:
                defs = [
                    r[0]
                    for r in conn.execute(
                        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'schema_check' AND tablename = %s",
                        (f"m_{metric}",),
                    ).fetchall()
                ]
            assert any("hnsw" in d and opclass in d for d in defs), defs
            assert sum("btree" in d for d in defs) >= len(FILTER_FIELDS) + 1  # + primary key
    finally:
        for m in ("cosine", "l2", "dot"):
            store.drop(f"m_{m}")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA schema_check CASCADE")
        store.close()


def test_pgvector_first_load_is_copied_then_indexed(pg_dsn: str) -> None:
    """A first load goes straight into the table with no HNSW to maintain; queries are exact
    until the index step builds it; later upserts still replace by id."""
    with _pg_store(pg_dsn, "bulk_") as store:
        store.ensure_collection(spec(dim=8))
        rng = np.random.default_rng(3)
        vecs = rng.standard_normal((300, 8)).astype(np.float32)
        recs = [{"id": uid(f"b{i}"), "vector": vecs[i], "doc_id": f"d{i}"} for i in range(300)]
        assert store.upsert("docs", recs[:150]) == 150  # empty table: direct COPY
        assert store.upsert("docs", recs[100:]) == 200  # overlaps: staged upsert
        assert store.count("docs") == 300
        assert store.index_status("docs")["ann_index"] is None
        q = vecs[7]
        exact = np.argsort(1 - (vecs @ q) / (np.linalg.norm(vecs, axis=1) * np.linalg.norm(q)))
        assert [h.id for h in store.query("docs", q, top_k=5)] == [uid(f"b{i}") for i in exact[:5]]
        done = store.build_indexes("docs")
        assert done["vector_index"] == "hnsw built" and done["ann_index"] == "hnsw"
        assert store.build_indexes("docs")["vector_index"].startswith("hnsw up to date")
        store.upsert("docs", [{**recs[0], "doc_id": "moved"}])
        assert store.get("docs", [uid("b0")])[0]["doc_id"] == "moved"
        assert store.query("docs", q, top_k=1)[0].id == uid("b7")


def test_pgvector_bounded_text_leg(pg_dsn: str) -> None:
    """The bounded full-text leg (store.pgvector.text_candidates) ranks as the unbounded one:
    without statistics it takes every term (the same list), after ANALYZE a list whose rows
    all hold a rare term is the same list; terms are weighted by IDF once ANALYZE has counted
    them; quoting is safe."""
    import psycopg
    from psycopg import sql

    from clef_pipelines.stores.pgvector_store import PgVectorStore, _ix

    schema = "tb_" + uuid.uuid4().hex[:8]
    store = PgVectorStore(pg_dsn, schema=schema, text_candidates=50)
    try:
        store.ensure_collection(
            CollectionSpec(
                name="t",
                dimension=4,
                fields={"body": "str", "doc_id": "str"},
                filter_fields=("doc_id",),
                text_fields=("body",),
            )  # fmt: skip
        )
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # no statistics until asked
            conn.execute(
                sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(
                    sql.Identifier(schema, "t")
                )
            )
            # _tsv is kept in the row (STORAGE MAIN), not in TOAST: the leg reads every
            # candidate's.
            storage = conn.execute(
                "SELECT attstorage FROM pg_attribute WHERE attrelid = %s::regclass "
                "AND attname = '_tsv'",
                (f"{schema}.t",),
            ).fetchone()
            assert storage == ("m",), storage
        # Every row holds one of cell/kinase and one of membrane/signal/protein; every 50th
        # holds zebrafish, cell and kinase.
        recs = []
        for i in range(400):
            body = "zebrafish cell kinase" if i % 50 == 0 else (
                f"{('cell', 'kinase')[i % 2]} {('membrane', 'signal', 'protein')[i % 3]}"
            )  # fmt: skip
            recs.append(
                {"id": uid(f"t{i}"), "vector": [1.0, 0.0, 0.0, float(i)], "doc_id": f"d{i % 7}",
                 "body": f"{body} note {i}"}
            )  # fmt: skip
        store.upsert("t", recs)
        by_id = {r["id"]: r for r in recs}

        def ids(text: str, budget: int, *, idf: bool = False, **kw: Any) -> list[str]:
            store.text_candidates, store.text_idf = budget, idf
            return [h.id for h in store.text_query("t", text, top_k=5, **kw)]

        for q in ("zebrafish cell kinase", "membrane signal", "O'Reilly's \\ zebrafish", "the"):
            assert ids(q, 50) == ids(q, 0), q  # no statistics yet: every term taken

        # Plain ts_rank (and text_idf before any statistics: every weight 1): the shorter
        # protein rows outrank the rows holding the rare zebrafish.
        def holds(got: list[str], term: str) -> bool:
            return len(got) == 5 and all(term in by_id[i]["body"].split() for i in got)

        assert holds(ids("zebrafish protein", 0), "protein")
        assert ids("zebrafish protein", 0, idf=True) == ids("zebrafish protein", 0)
        assert ids("zebrafish protein", 50, idf=True) == ids("zebrafish protein", 50)
        store.maintain("t")  # ANALYZE: the term frequencies the bound reads (read again now)
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute(
                "SELECT array_length(most_common_elem_freqs, 1) FROM pg_stats "
                "WHERE schemaname = %s AND tablename = 't' AND attname = '_tsv'",
                (schema,),
            ).fetchone()
        assert row and row[0] > 6, row  # zebrafish's frequency is known
        with psycopg.connect(pg_dsn) as conn:  # maintain folded GIN's pending list in
            left = conn.execute(
                "SELECT gin_clean_pending_list(indexrelid) FROM pg_index WHERE indrelid = "
                "%s::regclass AND indexrelid::regclass::text LIKE %s",
                (f"{schema}.t", f"%{_ix('t', '_tsv')}%"),
            ).fetchall()
        assert left == [(0,)], left
        # With them, text_idf weighs each term's ts_rank by its IDF: zebrafish (8 of 400
        # rows) outweighs protein (133), bounded or not; plain ts_rank does not.
        assert holds(ids("zebrafish protein", 0, idf=True), "zebrafish")
        assert ids("zebrafish protein", 50, idf=True) == ids("zebrafish protein", 0, idf=True)
        assert holds(ids("zebrafish protein", 0), "protein")
        assert ids("O'Reilly's \\ zebrafish", 50, idf=True)  # quoting holds with IDF too
        rare = ids("zebrafish cell kinase", 0)
        assert len(rare) == 5 and ids("zebrafish cell kinase", 50) == rare  # all hold zebrafish
        # A filter that leaves 2 zebrafish rows: those first, then rows of the common term.
        d0 = ids("zebrafish cell", 50, where={"doc_id": "d0"})
        assert d0[:2] == ids("zebrafish cell", 0, where={"doc_id": "d0"})[:2]
        assert {by_id[i]["body"].split()[0] for i in d0[:2]} == {"zebrafish"}
        assert len(d0) == 5 and all(
            by_id[i]["doc_id"] == "d0" and "cell" in by_id[i]["body"] for i in d0
        )
        common = ids("membrane signal", 50)  # common terms only: still k rows that hold one
        assert len(common) == 5
        assert all({"membrane", "signal"} & set(by_id[i]["body"].split()) for i in common)
        assert "zebrafish" in by_id[ids("O'Reilly's \\ zebrafish", 50)[0]]["body"]
    finally:
        store.close()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_pgvector_hnsw_settings_are_set_once_per_session(pg_dsn: str) -> None:
    """A vector query sets hnsw.ef_search (at least top_k) and the iterative scan on the
    session the first time, not in a transaction per query; a larger top_k raises ef_search
    for the session; the index answers (the query's own vector comes first)."""
    from psycopg import sql

    with _pg_store(pg_dsn, "hnsw_", ef_search=20) as store:
        store.ensure_collection(spec(dim=8))
        rng = np.random.default_rng(5)
        vecs = rng.standard_normal((200, 8)).astype(np.float32)
        store.upsert("docs", [{"id": uid(f"h{i}"), "vector": vecs[i]} for i in range(200)])
        store.build_indexes("docs")

        def setting(name: str) -> str:
            with store._conn.cursor() as cur:
                cur.execute(sql.SQL("SHOW {}").format(sql.SQL(name)))
                return str(cur.fetchone()[0])

        q = vecs[11]
        hits = store.query("docs", q, top_k=5)
        assert len(hits) == 5 and hits[0].id == uid("h11")
        assert setting("hnsw.ef_search") == "20"
        if store.iterative_scan:
            assert setting("hnsw.iterative_scan") == "relaxed_order"
        assert not store._conn.info.transaction_status  # idle: no transaction left open
        refs = store.query_refs("docs", q, top_k=40)
        assert len(refs) == 40 and refs[0].id == uid("h11")
        assert setting("hnsw.ef_search") == "40"
        assert store.index_status("docs")["ann_index"] == "hnsw"


def test_pgvector_fill_records_reuses_the_lists_spec(pg_dsn: str) -> None:
    """Ref hits carry the spec their list was read with: `fill_records` reads the records
    in one statement without reading the spec again, and a record removed meanwhile is
    dropped."""
    with _pg_store(pg_dsn, "fill_") as store:
        store.ensure_collection(spec(dim=8))
        rng = np.random.default_rng(6)
        vecs = rng.standard_normal((20, 8)).astype(np.float32)
        store.upsert(
            "docs", [{"id": uid(f"f{i}"), "vector": vecs[i], "doc_id": f"d{i}"} for i in range(20)]
        )
        full = store.query("docs", vecs[3], top_k=6)
        refs = store.query_refs("docs", vecs[3], top_k=6)
        assert [h.record for h in refs] == [{"id": h.id} for h in full]
        store.delete("docs", ids=[full[2].id])

        def no_spec_read(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("fill_records read the spec again")

        store.get_spec = no_spec_read  # type: ignore[method-assign]
        filled = store.fill_records("docs", refs)
        assert [h.id for h in filled] == [h.id for i, h in enumerate(full) if i != 2]
        assert [h.record for h in filled] == [h.record for i, h in enumerate(full) if i != 2]


def test_lancedb_ann_index_built_in_bounded_segments(tmp_path: pathlib.Path) -> None:
    """The index step builds LanceDB's ANN index in segments of at most
    `index_segment_rows` rows (one build over the whole table needs memory that grows with
    it). Every row is in the index afterwards and queries find their nearest rows through it;
    upkeep keeps working with several segments (Lance cannot merge segments trained apart);
    rows written later are searched exactly until the index step gives them a segment of
    their own, the smallest segment rebuilt with them when both fit; a compaction that
    rewrites an indexed fragment keeps its rows in the index."""
    from clef_pipelines.stores.lancedb_store import LanceDBStore

    store = LanceDBStore(
        tmp_path / "l",
        index_threshold=1_000,
        index_segment_rows=1_000,
        optimize_every=0,
        compaction_target_rows=100,  # the 250-row fragments below are left as they are
    )
    store.ensure_collection(spec(dim=16))
    vecs = np.random.default_rng(0).standard_normal((4_000, 16)).astype(np.float32)

    def write(lo: int, hi: int) -> None:
        for start in range(lo, hi, 250):
            store.upsert(
                "docs",
                [
                    {"id": uid(i), "vector": vecs[i], "doc_id": f"d{i // 100}", "n": i}
                    for i in range(start, start + 250)
                ],
            )

    def segments() -> list[int]:
        """Live rows under each segment of the ANN index."""
        ds = store._table("docs").to_lance()
        rows = {f.fragment_id: f.count_rows() for f in ds.get_fragments()}
        (ann,) = [d for d in ds.describe_indices() if "vector" in d.field_names]
        return sorted(sum(rows.get(f, 0) for f in s.fragment_ids) for s in ann.segments)

    def finds(ids: range) -> bool:
        return all(store.query("docs", vecs[i], top_k=1)[0].id == uid(i) for i in ids)

    write(0, 3_000)  # twelve fragments of 250 rows
    store.maintain("docs")
    assert store.index_status("docs")["ann_index"] is None
    done = store.build_indexes("docs")
    assert done["vector_index"] == "IVF_HNSW_SQ built"
    assert done["unindexed_rows"] == 0 and done["indexed_rows"] == 3_000
    assert segments() == [1_000, 1_000, 1_000]
    assert store._has_vector_index(store._table("docs"))
    assert finds(range(0, 3_000, 97))
    hits = store.query("docs", vecs[5], where={"doc_id": "d20"}, top_k=5)
    assert len(hits) == 5 and {h.record["doc_id"] for h in hits} == {"d20"}

    write(3_000, 3_500)
    store.maintain("docs")  # upkeep with a segmented index: no merge of segments attempted
    assert store.index_status("docs")["unindexed_rows"] == 500
    assert finds(range(3_000, 3_500, 31))  # searched exactly until the index step
    assert store.build_indexes("docs")["vector_index"] == "updated (1 segments built)"
    assert segments() == [500, 1_000, 1_000, 1_000]  # 1,000 + 500 do not fit in one
    write(3_500, 3_750)
    done = store.build_indexes("docs")
    assert done["unindexed_rows"] == 0 and done["index_segments"] == 4
    assert segments() == [750, 1_000, 1_000, 1_000]  # the 500 rebuilt with the 250 new rows
    assert finds(range(3_000, 3_750, 23))

    # A fifth of one indexed fragment deleted: upkeep rewrites it, its rows stay indexed.
    assert store.delete("docs", where={"n": {"in": list(range(250, 300))}}) == 50
    store.maintain("docs")
    status = store.index_status("docs")
    assert status["rows"] == 3_700 and status["unindexed_rows"] == 0, status
    assert sum(segments()) == 3_700
    assert finds(range(300, 500, 17))
    assert not store.query("docs", vecs[260], where={"n": 260}, top_k=1)


def test_lancedb_index_cache_is_bounded(tmp_path: pathlib.Path) -> None:
    """The store bounds LanceDB's index cache (`index_cache_mb`) as it bounds the metadata
    cache: LanceDB's own 6 GB default kept the index pages a refresh's deletes by document id
    read (the 1% refresh of a 7.6M-row table peaked at 3.0 GB, 1.4 GB with 128 MB)."""
    from clef_pipelines.stores.lancedb_store import LanceDBStore

    def work(index_cache_mb: int) -> int:
        return _fill_lancedb_caches(
            LanceDBStore(
                tmp_path / f"l{index_cache_mb}", index_cache_mb=index_cache_mb, metadata_cache_mb=1
            )
        )

    bounded, unbounded = work(1), work(2048)
    assert bounded <= 2 * 1024 * 1024  # 1 MB of index pages and 1 MB of metadata at most
    assert unbounded > bounded  # the same work keeps more with room: the bound is what held it


def test_lancedb_upkeep_drops_the_caches_of_old_versions(tmp_path: pathlib.Path) -> None:
    """Every append is a table version and LanceDB caches what it read per version, so a
    load's caches filled with entries of versions nobody reads again (20 MB per 256 appends
    at 3.8M rows). An upkeep starts the store on a fresh session: what the caches hold after
    it is only what was read since, and the table reads and writes on as before."""
    from clef_pipelines.stores.lancedb_store import LanceDBStore

    store = LanceDBStore(tmp_path / "l", optimize_every=0)
    store.ensure_collection(spec())
    for w in range(30):
        store.insert("docs", [_rec(w * 100 + i) for i in range(100)])
    store.maintain("docs")
    for w in range(30, 60):
        store.insert("docs", [_rec(w * 100 + i) for i in range(100)])
    before = int(store._session.size_bytes)
    assert before > 0  # the appends' versions were read and cached
    store.maintain("docs")
    assert int(store._session.size_bytes) < before / 4
    assert store.count("docs") == 6000
    assert store.count("docs", where={"doc_id": "d7"}) == 10
    store.insert("docs", [_rec(6000 + i) for i in range(10)])
    assert store.count("docs") == 6010
    store.close()


def _fill_lancedb_caches(store: Any) -> int:
    """Writes, index upkeep, deletes by document id and filtered queries on a LanceDB store:
    the bytes its caches hold afterwards."""
    store.ensure_collection(spec())
    for w in range(10):
        store.upsert("docs", [_rec(w * 3000 + i) for i in range(3000)])
    store.maintain("docs")  # scalar indexes on the filter fields, doc_id's among them
    for k in range(200):
        store.delete("docs", where={"doc_id": f"d{k * 7}"})
    for k in range(50):
        store.query("docs", vec(k), where={"doc_id": f"d{k * 13 + 1}"}, top_k=3)
    assert store.count("docs") == 28_000
    size = int(store._session.size_bytes)
    store.close()
    return size


def test_dagster_steps_open_lancedb_with_the_pipeline_metadata_cache(
    tmp_path: pathlib.Path,
) -> None:
    """The store resource the Dagster steps use sizes LanceDB's metadata cache by
    `pipeline_metadata_cache_mb`; a query process (open_store's default) by
    metadata_cache_mb. A load writes a version per batch and never reads old ones back, and
    the query side's 128 MB made the sync's memory grow with the table."""
    import yaml

    from clef_pipelines.config import load_settings
    from clef_pipelines.resources.settings import PipelineSettings
    from clef_pipelines.resources.store import VectorStoreResource

    lance = {"pipeline_metadata_cache_mb": 1, "metadata_cache_mb": 2048, "index_cache_mb": 1}
    config = tmp_path / "clef-pipelines.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(tmp_path / "state"),
                "embedder": {"kind": "hash", "dimension": 8},
                "store": {"kind": "lancedb", "lancedb": lance},
            }
        )
    )
    resource = VectorStoreResource(settings=PipelineSettings(validated=load_settings(config)))
    in_steps = _fill_lancedb_caches(resource.get())
    cfg = StoreConfig.model_validate({"kind": "lancedb", "lancedb": lance})
    for_queries = _fill_lancedb_caches(open_store(cfg, tmp_path / "queries"))
    assert in_steps <= 2 * 1024 * 1024  # 1 MB of metadata and 1 MB of index pages at most
    assert for_queries > in_steps  # the same work keeps more with the query side's room
