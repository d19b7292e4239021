"""One conformance suite, the same cases against every adapter (memory, LanceDB, Qdrant,
pgvector). The in-memory store and `filters.evaluate` are the reference."""

from __future__ import annotations

import math
import uuid
from typing import Any

import numpy as np
import pytest

from clef_pipelines.stores.base import CollectionSpec, Record, StoreError, VectorStore
from clef_pipelines.stores.filters import FilterError, matches

FIELDS: dict[str, Any] = {
    "doc_id": "str",
    "source": "str",
    "n": "int",
    "x": "float",
    "flag": "bool",
    "text": "str",
}
FILTER_FIELDS = ("doc_id", "source", "n", "flag")
DIM = 8


def uid(i: int | str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"clef-test-{i}"))


def spec(name: str = "docs", metric: str = "cosine", dim: int = DIM) -> CollectionSpec:
    return CollectionSpec(
        name=name,
        dimension=dim,
        metric=metric,
        fields=dict(FIELDS),
        filter_fields=FILTER_FIELDS,  # type: ignore[arg-type]
    )


def vec(i: int, dim: int = DIM) -> list[float]:
    rng = np.random.default_rng(i)
    return [float(v) for v in rng.standard_normal(dim)]


def rec(i: int, **fields: Any) -> Record:
    r: Record = {"id": uid(i), "vector": vec(i)}
    r.update(fields)
    return r


# A small fixed data set that exercises missing fields, booleans, quotes and unicode.
DATA: list[Record] = [
    rec(0, doc_id="a", source="web", n=1, x=0.5, flag=True, text="plain"),
    rec(1, doc_id="a", source="web", n=2, x=1.5, flag=False, text="it's"),
    rec(2, doc_id="b", source="pdf", n=3, x=-2.0, flag=True, text='quote " and \\ back'),
    rec(3, doc_id="b", source="pdf", n=0, flag=False, text="é ü 中文"),  # x missing
    rec(4, doc_id="c", source="web", x=3.25, text="no n, no flag"),  # n, flag missing
    rec(5, doc_id="c", n=10, x=10.0, flag=True),  # source, text missing
    rec(6, doc_id="d", source="O'Reilly", n=-5, x=0.0, flag=False, text="%_like"),
    rec(7, doc_id="d", source="web", n=7, x=7.5, flag=True, text="", quarantined=True),
]
BY_ID = {r["id"]: r for r in DATA}


def loaded(store: VectorStore, metric: str = "cosine") -> VectorStore:
    store.ensure_collection(spec(metric=metric))
    assert store.upsert("docs", DATA) == len(DATA)
    return store


def expected_ids(flt: dict[str, Any] | None) -> set[str]:
    fields = {**FIELDS, "quarantined": "bool"}
    return {r["id"] for r in DATA if matches(flt, r, fields)}


# ------------------------------------------------------------------------------ collections


def test_ensure_collection_is_idempotent_and_checked(store: VectorStore) -> None:
    assert not store.has_collection("docs")
    store.ensure_collection(spec())
    store.ensure_collection(spec())
    assert store.has_collection("docs")
    assert "docs" in store.list_collections()
    with pytest.raises(StoreError):
        store.ensure_collection(spec(dim=DIM + 1))
    with pytest.raises(StoreError):
        store.ensure_collection(spec(metric="l2"))
    with pytest.raises(StoreError):
        store.ensure_collection(CollectionSpec(name="docs", dimension=DIM, fields={"n": "str"}))


def test_ensure_collection_adds_fields(store: VectorStore) -> None:
    loaded(store)
    bigger = CollectionSpec(
        name="docs",
        dimension=DIM,
        fields={**FIELDS, "lang": "str"},
        filter_fields=(*FILTER_FIELDS, "lang"),
    )
    store.ensure_collection(bigger)
    assert store.get("docs", [uid(0)])[0]["lang"] is None
    store.upsert("docs", [rec(20, doc_id="z", lang="fr")])
    assert store.list_ids("docs", where={"lang": "fr"}) == [uid(20)]
    assert store.count("docs") == len(DATA) + 1


def test_drop(store: VectorStore) -> None:
    loaded(store)
    store.put_manifest("docs", {"v": 1})
    store.drop("docs")
    assert not store.has_collection("docs")
    assert "docs" not in store.list_collections()
    assert store.get_manifest("docs") is None
    store.drop("docs")  # missing: not an error
    store.ensure_collection(spec())
    assert store.count("docs") == 0


# ---------------------------------------------------------------------------------- writes


def test_round_trip(store: VectorStore) -> None:
    loaded(store)
    ids = [r["id"] for r in DATA]
    got = {r["id"]: r for r in store.get("docs", ids + [uid(999)], with_vectors=True)}
    assert set(got) == set(ids)
    for rid, original in BY_ID.items():
        out = got[rid]
        for f in FIELDS:
            assert out[f] == original.get(f), (rid, f)
            if original.get(f) is not None:
                assert type(out[f]) is type(original[f]), (rid, f)
        assert out["quarantined"] == original.get("quarantined")
        v, w = np.asarray(out["vector"]), np.asarray(original["vector"])
        # cosine stores may keep the unit vector (Qdrant): compare directions
        assert np.allclose(v / np.linalg.norm(v), w / np.linalg.norm(w), atol=1e-5)
    plain = store.get("docs", [uid(0)])[0]
    assert "vector" not in plain
    assert sorted(store.list_ids("docs")) == sorted(ids)
    assert store.count("docs") == len(DATA)
    scanned = {r["id"]: r for r in store.scan("docs")}
    assert set(scanned) == set(ids)
    assert scanned[uid(2)]["text"] == 'quote " and \\ back'
    assert all("vector" not in r for r in scanned.values())
    only = list(store.scan("docs", where={"doc_id": "a"}, fields=["n"]))
    assert sorted(r["n"] for r in only) == [1, 2]
    assert all(set(r) == {"id", "n"} for r in only)


def test_round_trip_exact_vectors_l2(store: VectorStore) -> None:
    store.ensure_collection(spec(metric="l2"))
    store.upsert("docs", DATA)
    for r in store.get("docs", [uid(3), uid(6)], with_vectors=True):
        assert np.allclose(r["vector"], BY_ID[r["id"]]["vector"], atol=1e-6)


def test_undeclared_fields_round_trip(store: VectorStore) -> None:
    store.ensure_collection(spec())
    store.upsert("docs", [rec(30, doc_id="e", m_lang="fr", m_year=2024)])
    out = store.get("docs", [uid(30)])[0]
    assert out["m_lang"] == "fr" and out["m_year"] == 2024
    with pytest.raises(FilterError, match="m_lang"):
        store.list_ids("docs", where={"m_lang": "fr"})


def test_idempotent_upsert(store: VectorStore) -> None:
    loaded(store)
    assert store.upsert("docs", DATA) == len(DATA)
    assert store.count("docs") == len(DATA)
    assert store.get("docs", [uid(1)])[0]["text"] == "it's"


def test_insert_of_new_ids_reads_back_like_an_upsert(store: VectorStore) -> None:
    """`insert` (records with ids not stored: LanceDB appends without an id lookup) leaves
    the same collection as `upsert`: reads, filters, vector and text search, later upserts."""
    store.ensure_collection(spec())
    assert store.insert("docs", DATA[:5]) == 5
    assert store.insert("docs", DATA[5:]) == len(DATA) - 5  # a second append, after the first
    assert sorted(store.list_ids("docs")) == sorted(BY_ID)
    assert store.count("docs", where={"doc_id": "b"}) == 2
    assert store.get("docs", [uid(2)])[0]["text"] == 'quote " and \\ back'
    assert store.query("docs", vec(6), top_k=1)[0].id == uid(6)
    assert uid(7) not in [h.id for h in store.query("docs", vec(7), top_k=3)]  # quarantined
    store.upsert("docs", [rec(1, doc_id="a", n=42)])  # replaces the appended record
    assert store.count("docs") == len(DATA)
    assert store.get("docs", [uid(1)])[0]["n"] == 42
    store.ensure_collection(text_spec())
    assert store.insert("notes", NOTES[:3]) == 3
    assert store.insert("notes", NOTES[3:]) == len(NOTES) - 3
    assert set(text_ids(store, "zebra")) == {uid(100), uid(101)}
    assert text_ids(store, "mitosis") == [uid(102)]
    assert text_ids(store, "athletes") == [uid(103)]  # appended after the text index was made


def test_replace(store: VectorStore) -> None:
    loaded(store)
    new_vec = vec(100)
    store.upsert("docs", [{"id": uid(0), "vector": new_vec, "doc_id": "a", "n": 42}])
    out = store.get("docs", [uid(0)], with_vectors=True)[0]
    assert out["n"] == 42
    assert out["source"] is None and out["flag"] is None and out["text"] is None  # replaced
    v = np.asarray(out["vector"])
    assert np.allclose(
        v / np.linalg.norm(v), np.asarray(new_vec) / np.linalg.norm(new_vec), atol=1e-5
    )
    assert store.count("docs") == len(DATA)
    hits = store.query("docs", new_vec, top_k=1)
    assert hits[0].id == uid(0)


def test_duplicate_ids_in_one_batch_last_wins(store: VectorStore) -> None:
    store.ensure_collection(spec())
    n = store.upsert("docs", [rec(1, n=1), rec(2, n=2), rec(1, n=3)])
    assert n == 2
    assert store.get("docs", [uid(1)])[0]["n"] == 3


def test_invalid_records_are_refused(store: VectorStore) -> None:
    store.ensure_collection(spec())
    with pytest.raises(StoreError):
        store.upsert("docs", [{"id": "not-a-uuid", "vector": vec(1)}])
    with pytest.raises(StoreError):
        store.upsert("docs", [{"id": uid(1), "vector": [1.0, 2.0]}])
    with pytest.raises(StoreError):
        store.upsert("docs", [rec(1, n=True)])  # booleans are not numbers
    with pytest.raises(StoreError):
        store.upsert("docs", [rec(1, flag=1)])
    with pytest.raises(StoreError):
        store.upsert("docs", [rec(1, doc_id=5)])
    with pytest.raises(StoreError):
        store.upsert("missing", [rec(1)])
    assert store.count("docs") == 0


def test_empty_batches(store: VectorStore) -> None:
    store.ensure_collection(spec())
    assert store.upsert("docs", []) == 0
    assert store.query("docs", vec(1)) == []
    assert store.list_ids("docs") == []
    assert store.count("docs") == 0
    assert list(store.scan("docs")) == []
    loaded(store)
    assert store.delete("docs", ids=[]) == 0
    assert store.get("docs", []) == []
    assert store.query("docs", vec(1), top_k=0) == []
    assert store.list_ids("docs", where={"doc_id": {"in": []}}) == []
    assert store.query("docs", vec(1), where={"doc_id": {"in": []}}) == []
    assert store.delete("docs", where={"doc_id": {"in": []}}) == 0
    assert store.count("docs") == len(DATA)


def test_delete_by_ids(store: VectorStore) -> None:
    loaded(store)
    assert store.delete("docs", ids=[uid(0), uid(1), uid(999)]) == 2
    assert store.get("docs", [uid(0), uid(1)]) == []
    assert store.count("docs") == len(DATA) - 2
    assert store.delete("docs", ids=[uid(0)]) == 0


def test_delete_by_filter(store: VectorStore) -> None:
    loaded(store)
    assert store.delete("docs", where={"doc_id": "b"}) == 2
    assert store.count("docs", where={"doc_id": "b"}) == 0
    assert store.delete("docs", where={"source": {"eq": "O'Reilly"}}) == 1
    # ids AND filter: only the ids that also match
    assert store.delete("docs", ids=[uid(0), uid(4)], where={"source": "web", "n": 1}) == 1
    assert store.get("docs", [uid(4)])
    with pytest.raises(StoreError):
        store.delete("docs")
    assert store.delete("docs", where={}) == len(DATA) - 4
    assert store.count("docs") == 0


def test_stale_delete_pattern(store: VectorStore) -> None:
    store.ensure_collection(spec())
    old = [rec(i, doc_id="X", n=i) for i in range(5)] + [rec(10 + i, doc_id="Y") for i in range(3)]
    store.upsert("docs", old)
    current = [rec(i, doc_id="X", n=i) for i in (1, 3, 5, 6)]
    store.upsert("docs", current)
    current_ids = [r["id"] for r in current]
    gone = store.delete("docs", where={"doc_id": "X", "id": {"nin": current_ids}})
    assert gone == 3  # 0, 2, 4
    assert sorted(store.list_ids("docs", where={"doc_id": "X"})) == sorted(current_ids)
    assert store.count("docs", where={"doc_id": "Y"}) == 3
    # the same with an explicit "and"
    assert store.delete("docs", where={"and": [{"doc_id": "X"}, {"id": {"nin": current_ids}}]}) == 0


# --------------------------------------------------------------------------------- filters

FILTERS: list[dict[str, Any]] = [
    {},
    {"doc_id": "a"},
    {"doc_id": {"eq": "b"}},
    {"source": "O'Reilly"},
    {"text": 'quote " and \\ back'},
    {"text": "é ü 中文"},
    {"text": "%_like"},
    {"text": ""},
    {"source": "web' OR '1'='1"},
    {"source": {"in": ["x'); DROP TABLE docs; --", "pdf"]}},
    {"source": {"ne": "web"}},
    {"n": {"ne": 1}},
    {"flag": {"ne": True}},
    {"source": {"in": ["pdf", "O'Reilly"]}},
    {"n": {"in": [1, 3, 10, 99]}},
    {"source": {"nin": ["web"]}},
    {"n": {"nin": [1, 2]}},
    {"flag": {"nin": [True]}},
    {"flag": {"in": [True, False]}},
    {"n": {"gt": 1}},
    {"n": {"gte": 2}},
    {"n": {"lt": 2}},
    {"n": {"lte": 0}},
    {"n": {"gt": 0, "lt": 7}},
    {"x": {"gt": 1}},
    {"x": {"gte": 0.5, "lte": 7.5}},
    {"x": {"lt": 0}},
    {"x": 0.0},
    {"x": 3.25},
    {"x": {"in": [0.5, 10.0]}},
    {"x": {"nin": [0.5, 10.0]}},
    {"x": {"ne": 0.5}},
    {"flag": True},
    {"flag": False},
    {"flag": {"exists": True}},
    {"flag": {"exists": False}},
    {"x": {"exists": False}},
    {"source": {"exists": True}},
    {"source": None},
    {"source": {"ne": None}},
    {"quarantined": True},
    {"quarantined": {"ne": True}},
    {"doc_id": "a", "n": 2},
    {"and": [{"doc_id": {"in": ["a", "b"]}}, {"flag": True}]},
    {"or": [{"doc_id": "a"}, {"n": {"gt": 5}}]},
    {"or": [{"flag": {"exists": False}}, {"x": {"lt": 0}}]},
    {"not": {"n": {"gt": 1}}},  # matches records without n
    {"not": {"source": "web"}},
    {"not": {"flag": {"ne": True}}},
    {"not": {"or": [{"doc_id": "a"}, {"doc_id": "b"}]}},
    {"and": []},
    {"or": []},
    {"not": {}},
    {"doc_id": {"in": []}},
    {"doc_id": {"nin": []}},
    {"text": {"nin": []}},
    {"id": uid(3)},
    {"id": {"in": [uid(1), uid(2), uid(999)]}},
    {"id": {"nin": [uid(1), uid(2)]}},
    {"id": {"ne": uid(1)}},
    {"doc_id": "d", "id": {"nin": [uid(6)]}},
    {"or": [{"and": [{"source": "web"}, {"not": {"n": {"lt": 2}}}]}, {"x": {"gte": 10}}]},
]


@pytest.mark.parametrize("flt", FILTERS, ids=[str(f) for f in FILTERS])
def test_filter_matches_reference(store: VectorStore, flt: dict[str, Any]) -> None:
    loaded(store)
    want = expected_ids(flt)
    assert set(store.list_ids("docs", where=flt)) == want
    assert store.count("docs", where=flt) == len(want)
    hits = store.query("docs", vec(50), where=flt, top_k=100, include_quarantined=True)
    assert {h.id for h in hits} == want
    hits = store.query("docs", vec(50), where=flt, top_k=100)
    assert {h.id for h in hits} == {i for i in want if not BY_ID[i].get("quarantined")}


def test_filter_on_booleans_is_not_numeric(store: VectorStore) -> None:
    loaded(store)
    assert set(store.list_ids("docs", where={"flag": True})) == {uid(0), uid(2), uid(5), uid(7)}
    for bad in (
        {"flag": 1},
        {"flag": {"in": [1, 0]}},
        {"flag": {"gt": 0}},
        {"n": True},
        {"n": {"in": [True]}},
        {"x": {"lt": False}},
    ):
        with pytest.raises(FilterError):
            store.list_ids("docs", where=bad)


@pytest.mark.parametrize(
    ("flt", "op", "field"),
    [
        ({"n": {"between": [1, 2]}}, "between", "n"),
        ({"nope": 1}, "eq", "nope"),
        ({"nope": {"gt": 1}}, "gt", "nope"),
        ({"source": {"gt": "a"}}, "gt", "source"),
        ({"n": {"in": 3}}, "in", "n"),
        ({"n": {"nin": "abc"}}, "nin", "n"),
        ({"n": "three"}, "eq", "n"),
        ({"doc_id": {"exists": "yes"}}, "exists", "doc_id"),
        ({"doc_id": ["a", "b"]}, "eq", "doc_id"),
        ({"and": [{"n": {"lte": "x"}}]}, "lte", "n"),
        ({"not": {"x": {"gte": float("nan")}}}, "gte", "x"),
        ({"id": {"gt": "a"}}, "gt", "id"),
    ],
)
def test_invalid_filter_names_operator_and_field(
    store: VectorStore, flt: dict[str, Any], op: str, field: str
) -> None:
    loaded(store)
    for call in (
        lambda: store.list_ids("docs", where=flt),
        lambda: store.query("docs", vec(1), where=flt),
        lambda: store.delete("docs", where=flt),
    ):
        with pytest.raises(FilterError) as err:
            call()
        assert repr(op) in str(err.value) and repr(field) in str(err.value)
        assert isinstance(err.value, ValueError)
    assert store.count("docs") == len(DATA)


# ---------------------------------------------------------------------------------- queries


def _unit(v: list[float]) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    return a / np.linalg.norm(a)


@pytest.mark.parametrize("metric", ["cosine", "l2", "dot"])
def test_scores_normalised_and_ordered(store: VectorStore, metric: str) -> None:
    store.ensure_collection(spec(metric=metric))
    # unit vectors so that all three metrics are comparable and dot stays in [-1, 1]
    recs = [{"id": uid(i), "vector": list(_unit(vec(i))), "n": i} for i in range(20)]
    store.upsert("docs", recs)
    q = _unit(vec(7) + np.asarray(vec(3)) * 0.3)
    hits = store.query("docs", list(q), top_k=20)
    assert len(hits) == 20
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 for s in scores)
    for h in hits:
        v = _unit(vec(int(h.record["n"])))
        cos = float(v @ q)
        if metric == "cosine":
            want = min(1.0, max(0.0, cos))
        elif metric == "l2":
            d = float(np.linalg.norm(v - q))
            want = 1 / (1 + d)
        else:
            want = min(1.0, max(0.0, (1 + cos) / 2))
        assert math.isclose(h.score, want, abs_tol=1e-4), (metric, h)
        assert isinstance(h.raw_score, float)
    assert hits[0].id == uid(7)
    assert "vector" not in hits[0].record and hits[0].record["n"] == 7
    top3 = store.query("docs", list(q), top_k=3)
    assert [h.id for h in top3] == [h.id for h in hits[:3]]


def test_query_filter_and_top_k(store: VectorStore) -> None:
    loaded(store)
    hits = store.query("docs", vec(1), where={"doc_id": {"in": ["a", "b"]}}, top_k=3)
    assert len(hits) == 3
    assert hits[0].id == uid(1)
    assert all(h.record["doc_id"] in ("a", "b") for h in hits)
    with pytest.raises(StoreError):
        store.query("docs", [1.0, 2.0])


def test_quarantine_excluded_unless_asked(store: VectorStore) -> None:
    loaded(store)
    q = vec(7)
    assert uid(7) not in {h.id for h in store.query("docs", q, top_k=100)}
    assert store.query("docs", q, top_k=1, include_quarantined=True)[0].id == uid(7)
    assert store.query("docs", q, where={"doc_id": "d"}, top_k=5) and all(
        h.id != uid(7) for h in store.query("docs", q, where={"doc_id": "d"}, top_k=5)
    )
    assert uid(7) in store.list_ids("docs")  # scan includes quarantined records
    store.upsert("docs", [rec(7, doc_id="d", quarantined=False)])
    assert store.query("docs", q, top_k=1)[0].id == uid(7)
    store.upsert("docs", [rec(0, doc_id="a", quarantined=True)])
    assert uid(0) not in {h.id for h in store.query("docs", vec(0), top_k=100)}


# --------------------------------------------------------------------------------- manifest


def test_manifest(store: VectorStore) -> None:
    store.ensure_collection(spec())
    assert store.get_manifest("docs") is None
    m = {"version": 1, "docs": {"a": "hash-1", "b's": "é"}, "n": 2.5, "ok": True, "l": [1, 2]}
    store.put_manifest("docs", m)
    assert store.get_manifest("docs") == m
    store.put_manifest("docs", {"version": 2})
    assert store.get_manifest("docs") == {"version": 2}
    assert store.get_manifest("other") is None
    with pytest.raises(StoreError):
        store.put_manifest("other", {"x": 1})


# -------------------------------------------------------------------------------- 10k case

BIG_N = 10_000
BIG_DIM = 32


@pytest.fixture(scope="module")
def big_data() -> tuple[np.ndarray, list[Record]]:
    rng = np.random.default_rng(42)
    # two clusters: the rare bucket lives far from the query
    vecs = rng.standard_normal((BIG_N, BIG_DIM)).astype(np.float32)
    vecs[: BIG_N // 2, 0] += 6.0
    vecs[BIG_N // 2 :, 0] -= 6.0
    records: list[Record] = []
    for i in range(BIG_N):
        records.append(
            {
                "id": uid(f"big-{i}"),
                "vector": vecs[i],
                "doc_id": f"d{i % 1000}",
                "source": "near" if i < BIG_N // 2 else "far",
                "n": i % 100,
                "flag": i % 2 == 0,
                "quarantined": i % 10 == 0,
            }
        )
    return vecs, records


def _exact(
    vecs: np.ndarray, records: list[Record], q: np.ndarray, flt: dict[str, Any], k: int
) -> list[str]:
    fields = {**FIELDS, "quarantined": "bool"}
    idx = [i for i, r in enumerate(records) if matches(flt, r, fields) and not r["quarantined"]]
    m = vecs[idx]
    d = 1 - (m @ q) / (np.linalg.norm(m, axis=1) * np.linalg.norm(q))
    return [records[idx[j]]["id"] for j in np.argsort(d)[:k]]


def test_10k_filtered_query_returns_exactly_k(
    store: VectorStore, kind: str, big_data: tuple[np.ndarray, list[Record]]
) -> None:
    vecs, records = big_data
    store.ensure_collection(spec(dim=BIG_DIM))
    for start in range(0, BIG_N, 2_500):
        assert store.upsert("docs", records[start : start + 2_500]) == min(2_500, BIG_N - start)
    store.maintain("docs")
    assert store.count("docs") == BIG_N
    # Before the index step: exact search, so exactly the brute-force answer.
    q0 = vecs[5] + 0.05
    before = [h.id for h in store.query("docs", q0, top_k=10)]
    assert before == _exact(vecs, records, q0, {}, 10)
    built = store.build_indexes("docs")
    assert built["rows"] == BIG_N
    status = store.index_status("docs")
    if kind == "lancedb" or kind == "pgvector":  # past the test threshold: an ANN index
        assert status["ann_index"] and status["unindexed_rows"] == 0, status
    q = vecs[3] + 0.1  # in the "near" cluster
    k = 10
    cases: list[tuple[dict[str, Any], int]] = [
        ({}, k),
        ({"n": 7}, k),  # 1% of the rows
        ({"source": "far"}, k),  # all far from the query: the classic ANN filter failure
        ({"source": "far", "n": {"in": [11, 13]}}, k),  # 1%, and far away
        ({"doc_id": "d7"}, k),  # exactly 10 rows
        ({"id": {"in": [uid(f"big-{i}") for i in (1, 2, 3, 10, 20)]}}, 3),  # 2 quarantined
        ({"doc_id": "d7", "flag": True}, 0),
        ({"and": [{"n": {"gte": 95}}, {"flag": True}, {"source": "far"}]}, k),
    ]
    for flt, want_n in cases:
        hits = store.query("docs", q, where=flt, top_k=k)
        assert len(hits) == want_n, flt
        assert len({h.id for h in hits}) == len(hits)
        fields = {**FIELDS, "quarantined": "bool"}
        by_id = {r["id"]: r for r in records}
        assert all(matches(flt, by_id[h.id], fields) for h in hits), flt
        assert all(not by_id[h.id]["quarantined"] for h in hits), flt
        exact = _exact(vecs, records, q, flt, k)
        if exact:
            recall = len({h.id for h in hits} & set(exact)) / len(exact)
            assert recall >= 0.8, (flt, recall)
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
    # scans and gets are not truncated (no default limits, pagination works)
    assert len(store.list_ids("docs")) == BIG_N
    assert len(store.list_ids("docs", where={"n": 8})) == 100
    assert len(list(store.scan("docs", where={"source": "far"}, fields=["n"]))) == BIG_N // 2
    some = [r["id"] for r in records[:2_500]]
    assert {r["id"] for r in store.get("docs", some)} == set(some)
    # deleting a filtered slice keeps the count right
    assert store.delete("docs", where={"n": 7}) == 100
    assert store.count("docs") == BIG_N - 100
    assert len(store.query("docs", q, where={"n": {"in": [7, 8]}}, top_k=k)) == k
    # Rows written after the index was built are found before the next index step runs.
    fresh = [
        {**records[i], "id": uid(f"fresh-{i}"), "doc_id": "fresh", "vector": vecs[i] * -1.0}
        for i in range(0, 200)
    ]
    store.upsert("docs", fresh)
    for rec in fresh[1:6]:  # not quarantined
        assert rec["id"] in [h.id for h in store.query("docs", rec["vector"], top_k=3)]
    assert store.build_indexes("docs")["rows"] == BIG_N - 100 + 200


# ------------------------------------------------------------------ full-text and hybrid

TEXT_FIELDS: dict[str, Any] = {"doc_id": "str", "source": "str", "title": "str", "body": "str"}


def text_spec(name: str = "notes", text_fields: tuple[str, ...] = ("title", "body")) -> Any:
    return CollectionSpec(
        name=name,
        dimension=DIM,
        fields=dict(TEXT_FIELDS),
        filter_fields=("doc_id", "source"),
        text_fields=text_fields,
    )


# Vectors are random: a text match here can only come from the full-text index.
NOTES: list[Record] = [
    rec(100, doc_id="n0", source="web", title="Zebra herds", body="A zebra and a quagga graze."),
    rec(101, doc_id="n1", source="web", title="Savanna", body="The zebra runs across the plain."),
    rec(102, doc_id="n2", source="pdf", title="Mitosis", body="Cells divide during mitosis."),
    rec(103, doc_id="n3", source="pdf", title="Running", body="Athletes were running daily."),
    rec(104, doc_id="n4", source="web", title="Quiet", body="Nothing to see here at all."),
    rec(105, doc_id="n5", source="pdf", title="Zebra finch", body="A songbird.", quarantined=True),
]


def notes(store: VectorStore) -> VectorStore:
    store.ensure_collection(text_spec())
    store.upsert("notes", NOTES)
    return store


def text_ids(store: VectorStore, text: str, **kw: Any) -> list[str]:
    return [h.id for h in store.text_query("notes", text, **kw)]


def test_text_query_finds_text_only_matches_with_stemming(store: VectorStore) -> None:
    notes(store)
    # Stemmed: "runs" and "running" meet "run"; the title is searched too.
    assert set(text_ids(store, "run")) == {uid(101), uid(103)}
    assert text_ids(store, "mitosis")[0] == uid(102)
    # The record that holds both terms ranks first.
    both = store.text_query("notes", "zebra quagga")
    assert both[0].id == uid(100) and {h.id for h in both} == {uid(100), uid(101)}
    assert all(0.0 <= h.score < 1.0 for h in both) and both[0].score >= both[1].score
    assert both[0].record["doc_id"] == "n0" and both[0].record["body"].startswith("A zebra")
    # Stop words alone, blank text, an unknown word, top_k 0: nothing.
    assert text_ids(store, "the and of") == []
    assert text_ids(store, "   ") == []
    assert text_ids(store, "xylophone") == []
    assert text_ids(store, "zebra", top_k=0) == []
    assert len(text_ids(store, "zebra quagga", top_k=1)) == 1


def test_text_query_honours_filters_and_quarantine(store: VectorStore) -> None:
    notes(store)
    assert set(text_ids(store, "zebra")) == {uid(100), uid(101)}  # n5 is quarantined
    assert set(text_ids(store, "zebra", include_quarantined=True)) == {uid(100), uid(101), uid(105)}
    assert text_ids(store, "zebra", where={"doc_id": "n1"}) == [uid(101)]
    assert text_ids(store, "zebra", where={"source": "pdf"}) == []
    assert text_ids(store, "zebra running", where={"source": {"in": ["pdf"]}}) == [uid(103)]
    assert text_ids(store, "zebra", where={"doc_id": {"in": []}}) == []


def test_text_index_follows_edits_and_deletes(store: VectorStore) -> None:
    notes(store)
    assert text_ids(store, "quagga") == [uid(100)]
    edited = rec(100, doc_id="n0", source="web", title="Horses", body="Wild horses gallop.")
    store.upsert("notes", [edited])
    assert text_ids(store, "quagga") == []  # the old text is never matched
    assert text_ids(store, "gallop") == [uid(100)]
    store.delete("notes", ids=[uid(101)])
    assert text_ids(store, "zebra") == []
    store.delete("notes", where={"doc_id": "n3"})
    assert text_ids(store, "running") == []
    assert store.count("notes") == len(NOTES) - 2
    # More writes after the index exists are found too (indexed or searched directly).
    store.upsert("notes", [rec(110, doc_id="n10", source="web", title="", body="Zebra again")])
    assert text_ids(store, "zebra") == [uid(110)]
    store.ensure_text_index("notes")
    assert text_ids(store, "zebra") == [uid(110)] and text_ids(store, "quagga") == []


def test_text_index_not_rebuilt_when_nothing_changed(store: VectorStore) -> None:
    notes(store)
    store.ensure_text_index("notes")
    store.ensure_collection(text_spec())  # the same spec again: no change
    again = store.ensure_text_index("notes")
    assert again["text_index"] in ("up to date", "maintained on write")
    assert set(text_ids(store, "zebra")) == {uid(100), uid(101)}


def test_text_search_switched_on_for_an_existing_collection(store: VectorStore) -> None:
    store.ensure_collection(text_spec(text_fields=()))
    store.upsert("notes", NOTES)
    with pytest.raises(StoreError, match="full-text"):
        store.text_query("notes", "zebra")
    store.ensure_collection(text_spec())  # fills the text index from the stored fields
    assert set(text_ids(store, "zebra")) == {uid(100), uid(101)}
    with pytest.raises(StoreError):
        store.ensure_collection(text_spec(text_fields=("body",)))


def test_text_language_is_checked() -> None:
    from clef_pipelines.stores._common import normalise_spec

    with pytest.raises(StoreError, match="text_language"):
        normalise_spec(replace_spec(text_spec(), text_language="klingon"))
    with pytest.raises(StoreError, match="not a str field"):
        normalise_spec(
            CollectionSpec(name="x", dimension=2, fields={"n": "int"}, text_fields=("n",))
        )


def replace_spec(s: CollectionSpec, **kw: Any) -> CollectionSpec:
    import dataclasses

    return dataclasses.replace(s, **kw)


@pytest.mark.parametrize("method", ["zscore", "weighted", "rrf"])
def test_hybrid_search(store: VectorStore, method: str) -> None:
    from clef_pipelines.retrieval.config import FusionConfig
    from clef_pipelines.retrieval.fusion import search

    notes(store)
    fusion = FusionConfig(method=method, candidates=10)
    # The query vector is n2's: hybrid holds the vector's best and the text's best.
    hits = search(
        store, "notes", mode="hybrid", text="quagga", vector=vec(102), top_k=2, fusion=fusion
    )
    assert {h.id for h in hits} == {uid(102), uid(100)}
    assert hits[0].score >= hits[1].score
    # Filters and quarantine hold for both lists.
    hits = search(
        store,
        "notes",
        mode="hybrid",
        text="zebra",
        vector=vec(105),
        where={"source": "web"},
        top_k=10,
        fusion=fusion,
    )
    assert {h.id for h in hits} == {uid(100), uid(101), uid(104)}  # only web, never n5
    assert [h.id for h in hits][:2] in ([uid(100), uid(101)], [uid(101), uid(100)])
    # A removed record is never returned by any mode.
    store.delete("notes", ids=[uid(100)])
    for mode in ("vector", "text", "hybrid"):
        got = search(store, "notes", mode=mode, text="quagga zebra", vector=vec(100), top_k=10)
        assert uid(100) not in {h.id for h in got}, mode


# A term in 3 of 43 records, two that are in nearly all of them.
RARE_AND_COMMON: list[Record] = [
    *[
        rec(
            300 + i,
            doc_id=f"c{i}",
            source="pdf" if i % 2 else "web",
            title=f"Entry {i}",
            body="Cell protein binding at the cell membrane." if i % 3 else "Protein in a cell.",
        )
        for i in range(40)
    ],
    rec(200, doc_id="z0", source="web", title="Zebrafish", body="Zebrafish cell protein."),
    rec(201, doc_id="z1", source="pdf", title="Fins", body="Zebrafish heart regeneration."),
    rec(
        202, doc_id="z2", source="web", title="Zebrafish", body="Zebrafish cell.", quarantined=True
    ),
]


def test_text_query_rare_and_common_terms_fill_k_under_filters(
    store: VectorStore, kind: str
) -> None:
    """A query with one rare term and two common ones: the record holding all three comes
    first, the rare-term records make the top 2, and k records still come back when a filter
    leaves fewer rare-term records than k or the query has only common terms; quarantined
    records stay out. pgvector runs this on its bounded full-text leg (a budget of 8 rows,
    term frequencies from ANALYZE): the rare term's rows, topped up from the common terms'."""
    store.ensure_collection(text_spec())
    store.upsert("notes", RARE_AND_COMMON)
    store.maintain("notes")  # pgvector: ANALYZE, the term frequencies the bound reads
    if kind == "pgvector":
        store.text_candidates = 8  # type: ignore[attr-defined]
    by_id = {r["id"]: r for r in RARE_AND_COMMON}
    query = "zebrafish cell protein"
    top2 = text_ids(store, query, top_k=2)
    assert top2[0] == uid(200) and set(top2) == {uid(200), uid(201)}
    ten = text_ids(store, query, top_k=10)
    assert len(ten) == 10 and ten[0] == uid(200) and uid(202) not in ten
    assert uid(202) in text_ids(store, query, top_k=3, include_quarantined=True)
    pdf = store.text_query("notes", query, where={"source": "pdf"}, top_k=5)
    assert len(pdf) == 5 and all(by_id[h.id]["source"] == "pdf" for h in pdf)
    # Only common terms: still k records, each holding one of them, best first.
    common = store.text_query("notes", "cell protein", top_k=5)
    assert len(common) == 5 and all(h.id != uid(202) for h in common)
    assert all({"cell", "protein"} & set(h.record["body"].lower().rstrip(".").split())
               for h in common)  # fmt: skip
    scores = [h.score for h in common]
    assert scores == sorted(scores, reverse=True)


def test_refs_filled_are_the_full_hits(store: VectorStore) -> None:
    """Hybrid search fetches both lists as refs and reads only the fused top_k in full
    (`query_refs`, `text_query_refs`, `fill_records`): the same hits as `query` /
    `text_query`. Where the records are read late (LanceDB), one removed meanwhile is
    dropped and one rewritten meanwhile (the table compacted) comes back as it is now."""

    def same(a: list[Any], b: list[Any]) -> bool:
        return [(h.id, h.record) for h in a] == [(h.id, h.record) for h in b] and all(
            math.isclose(x.score, y.score, rel_tol=1e-6) for x, y in zip(a, b, strict=True)
        )

    notes(store)
    full = store.query("notes", vec(102), top_k=4)
    refs = store.query_refs("notes", vec(102), top_k=4)
    assert [h.id for h in refs] == [h.id for h in full]
    assert same(store.fill_records("notes", refs), full)
    text_full = store.text_query("notes", "zebra quagga running", top_k=4)
    text_refs = store.text_query_refs("notes", "zebra quagga running", top_k=4)
    assert same(store.fill_records("notes", text_refs), text_full) and len(text_full) == 3
    assert store.fill_records("notes", []) == []
    if type(store).fill_records is VectorStore.fill_records:
        return  # records read with the lists: nothing is read late
    store.delete("notes", ids=[refs[0].id])
    old = next(r for r in NOTES if r["id"] == refs[1].id)
    store.upsert("notes", [{**old, "body": "Rewritten meanwhile."}])
    store.maintain("notes")  # LanceDB: compaction, row ids change
    filled = store.fill_records("notes", refs)
    assert [h.id for h in filled] == [h.id for h in refs[1:]]
    assert filled[0].record["body"] == "Rewritten meanwhile."


# --------------------------------------------------------------------------- refresh safety


def test_a_refresh_never_hides_an_existing_document(store: VectorStore) -> None:
    """The sync writes a restated document's new chunks before deleting its stale ones: a scan
    after every write of a refresh (edits keeping chunk ids, rewrites, rescreens, removals,
    new documents) finds every document that exists before and after it."""
    from tests.stores.refresh import watched_refresh

    missing = watched_refresh(store, 40)
    assert missing and max(missing) == 0, missing
