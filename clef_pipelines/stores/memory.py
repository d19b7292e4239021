"""In-memory store: the reference semantics (exact search, the reference filter evaluator,
a plain BM25 over `stores.text.analyse` terms). For tests and tiny demos; nothing is persisted.

Document frequencies are kept in step on every upsert and delete, so text search never sees
an edited or removed record's old terms and never needs a rebuild."""

from __future__ import annotations

import copy
import json
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clef_pipelines.stores._common import (
    check_collection_name,
    check_ids,
    check_query_vector,
    check_top_k,
    exact_values,
    merge_specs,
    normalise_spec,
    output_record,
    prepare_records,
    require_delete_target,
    score,
    text_plan,
)
from clef_pipelines.stores.base import (
    CollectionSpec,
    Filter,
    Hit,
    Record,
    StoreError,
    VectorStore,
)
from clef_pipelines.stores.filters import evaluate, parse_filter, with_quarantine
from clef_pipelines.stores.text import bm25_idf, bm25_tf, term_counts, text_of, text_score


@dataclass
class _Row:
    vector: np.ndarray
    payload: dict[str, Any]
    extra: dict[str, Any]
    terms: Counter[str] = field(default_factory=Counter)


@dataclass
class _Collection:
    spec: CollectionSpec
    rows: dict[str, _Row] = field(default_factory=dict)
    manifest: dict[str, Any] | None = None
    #: Rows holding each term, and the total number of terms (BM25's df and average length).
    df: Counter[str] = field(default_factory=Counter)
    total_terms: int = 0

    def index_row(self, row: _Row) -> None:
        spec = self.spec
        if spec.text_fields:
            row.terms = term_counts(text_of(row.payload, spec.text_fields), spec.text_language)
        self.df.update(row.terms.keys())
        self.total_terms += sum(row.terms.values())

    def unindex_row(self, row: _Row) -> None:
        self.df.subtract(row.terms.keys())
        self.total_terms -= sum(row.terms.values())
        for term in row.terms:
            if self.df[term] <= 0:
                del self.df[term]

    def put(self, rid: str, row: _Row) -> None:
        old = self.rows.get(rid)
        if old is not None:
            self.unindex_row(old)
        self.index_row(row)
        self.rows[rid] = row

    def remove(self, rid: str) -> None:
        self.unindex_row(self.rows.pop(rid))


class MemoryStore(VectorStore):
    kind = "memory"

    def __init__(self) -> None:
        self._cols: dict[str, _Collection] = {}
        self._lock = threading.RLock()

    def _col(self, name: str) -> _Collection:
        try:
            return self._cols[name]
        except KeyError:
            raise StoreError(f"collection {name!r} does not exist") from None

    def ensure_collection(self, spec: CollectionSpec) -> None:
        spec = normalise_spec(spec)
        with self._lock:
            col = self._cols.get(spec.name)
            if col is None:
                self._cols[spec.name] = _Collection(spec)
            else:
                before = col.spec
                col.spec = merge_specs(col.spec, spec)
                if col.spec.text_fields != before.text_fields:
                    # Full-text search switched on: index what is already there.
                    for rid, row in list(col.rows.items()):
                        col.put(rid, row)

    def get_spec(self, name: str) -> CollectionSpec:
        return self._col(name).spec

    def has_collection(self, name: str) -> bool:
        return name in self._cols

    def list_collections(self) -> list[str]:
        return sorted(self._cols)

    def upsert(self, collection: str, records: Sequence[Record]) -> int:
        with self._lock:
            col = self._col(collection)
            prep = prepare_records(col.spec, records)
            for i, rid in enumerate(prep.ids):
                col.put(rid, _Row(prep.vectors[i].copy(), prep.payloads[i], prep.extras[i]))
            return len(prep)

    def _match(self, col: _Collection, where: Filter | None) -> list[str]:
        node = parse_filter(where, col.spec.fields)
        return [rid for rid, row in col.rows.items() if evaluate(node, {"id": rid, **row.payload})]

    def delete(
        self, collection: str, *, ids: Sequence[str] | None = None, where: Filter | None = None
    ) -> int:
        with self._lock:
            col = self._col(collection)
            require_delete_target(collection, ids, where)
            node = parse_filter(where, col.spec.fields)
            if ids is not None:
                cands = [i for i in check_ids(ids, collection) if i in col.rows]
            else:
                cands = list(col.rows)
            gone = [rid for rid in cands if evaluate(node, {"id": rid, **col.rows[rid].payload})]
            for rid in gone:
                col.remove(rid)
            return len(gone)

    def get(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[Record]:
        col = self._col(collection)
        out = []
        for rid in check_ids(ids, collection):
            row = col.rows.get(rid)
            if row is not None:
                out.append(
                    output_record(
                        col.spec,
                        rid,
                        row.payload,
                        row.extra,
                        vector=row.vector if with_vectors else None,
                    )
                )
        return out

    def scan(
        self,
        collection: str,
        *,
        where: Filter | None = None,
        fields: Sequence[str] | None = None,
    ) -> Iterator[Record]:
        col = self._col(collection)
        with self._lock:
            ids = self._match(col, where)
            rows = [(rid, col.rows[rid]) for rid in ids]
        for rid, row in rows:
            yield output_record(col.spec, rid, row.payload, row.extra, fields)

    def query(
        self,
        collection: str,
        vector: Sequence[float],
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        col = self._col(collection)
        q = check_query_vector(col.spec, vector)
        check_top_k(top_k)
        node = with_quarantine(
            parse_filter(where, col.spec.fields), col.spec.fields, include_quarantined
        )
        with self._lock:
            cands = [
                (rid, row)
                for rid, row in col.rows.items()
                if evaluate(node, {"id": rid, **row.payload})
            ]
        if not cands or top_k == 0:
            return []
        matrix = np.stack([row.vector for _, row in cands])
        values = exact_values(col.spec.metric, matrix, q)
        key = -values if col.spec.metric == "dot" else values
        order = np.lexsort((np.array([rid for rid, _ in cands]), key))[:top_k]
        hits = []
        for i in order:
            rid, row = cands[int(i)]
            v = float(values[i])
            hits.append(
                Hit(
                    id=rid,
                    score=score(col.spec.metric, v),
                    raw_score=v,
                    record=output_record(col.spec, rid, row.payload, row.extra),
                )
            )
        return hits

    def text_query(
        self,
        collection: str,
        text: str,
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        col = self._col(collection)
        node = text_plan(col.spec, text, where, top_k, include_quarantined)
        if node is None:
            return []
        terms = set(term_counts(text, col.spec.text_language))
        with self._lock:
            n_docs = len(col.rows)
            avg_len = col.total_terms / n_docs if n_docs else 0.0
            idf = {t: bm25_idf(n_docs, col.df[t]) for t in terms if col.df.get(t)}
            scored = []
            for rid, row in col.rows.items():
                common = [t for t in idf if t in row.terms]
                if not common or not evaluate(node, {"id": rid, **row.payload}):
                    continue
                length = sum(row.terms.values())
                raw = sum(idf[t] * bm25_tf(row.terms[t], length, avg_len) for t in common)
                scored.append((raw, rid, row))
        scored.sort(key=lambda x: (-x[0], x[1]))
        return [
            Hit(
                id=rid,
                score=text_score(raw),
                raw_score=raw,
                record=output_record(col.spec, rid, row.payload, row.extra),
            )
            for raw, rid, row in scored[:top_k]
        ]

    def get_manifest(self, collection: str) -> dict[str, Any] | None:
        col = self._cols.get(collection)
        if col is None or col.manifest is None:
            return None
        return copy.deepcopy(col.manifest)

    def put_manifest(self, collection: str, manifest: dict[str, Any]) -> None:
        col = self._col(collection)
        col.manifest = json.loads(json.dumps(manifest))

    def drop(self, collection: str) -> None:
        check_collection_name(collection)
        with self._lock:
            self._cols.pop(collection, None)
