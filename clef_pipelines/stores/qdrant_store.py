"""Qdrant adapter through qdrant-client: a server by URL (API key from a named env variable),
or local mode by path or ``:memory:``.

- One Qdrant collection per collection; point ids are the record UUIDs; the payload holds the
  declared fields (nulls omitted: missing == null) and undeclared scalar extras.
- Payload indexes (keyword / integer / float / bool) on the filter fields.
- On a server, collections are created with HNSW switched off (``m = 0``, Qdrant's advice for
  bulk uploads) and `build_indexes` (its own ingestion step, after the sync) switches it on;
  Qdrant then builds the graph itself in the background, segment by segment, and keeps it
  current as points arrive. Segments not yet indexed are searched by full scan (exact).
- Search is ``query_points`` with the compiled ``models.Filter``; if an approximate search
  returns fewer than k rows that the filter admits, it is repeated with ``exact=True``.
- Full-text search: every collection has a sparse vector ``text`` with Qdrant's IDF modifier.
  Each point's sparse vector holds its text fields' stemmed terms (`stores.text`, hashed to
  32-bit indices) with BM25 term weights computed locally; Qdrant multiplies by IDF at query
  time from its own live document counts, so an upsert or delete keeps ranking correct with
  no rebuild, and an edited point's old terms go with its old vector.
- Spec and manifest live in a small side collection ``_clef_meta`` (one point per collection).

Note: with the cosine metric Qdrant stores unit-normalised vectors, so ``get(with_vectors=True)``
returns the direction of what was written, not its length. Local mode searches by brute force
and is slow to upsert; use a server for anything large.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from clef_pipelines.stores._common import (
    BATCH,
    check_collection_name,
    check_ids,
    delete_filter,
    merge_specs,
    normalise_spec,
    output_record,
    prepare_records,
    query_plan,
    score,
    spec_from_json,
    spec_to_json,
    text_plan,
)
from clef_pipelines.stores.base import (
    CollectionSpec,
    Filter,
    Hit,
    Metric,
    Record,
    StoreError,
    VectorStore,
)
from clef_pipelines.stores.filters import (
    Const,
    parse_filter,
    to_qdrant,
)
from clef_pipelines.stores.text import sparse_document, sparse_query, text_of, text_score

META_COLLECTION = "_clef_meta"
#: Name of the sparse (full-text) vector; the dense vector is the unnamed default.
SPARSE = "text"
_META_NS = uuid.UUID("0b7a4f3e-31c6-4d7e-9a57-6f1f0f7d2c11")


def _meta_id(name: str) -> str:
    return str(uuid.uuid5(_META_NS, name))


class QdrantStore(VectorStore):
    kind = "qdrant"

    def __init__(
        self,
        *,
        url: str | None = None,
        api_key: str | None = None,
        path: str | None = None,
        batch_size: int = BATCH,
        timeout: int = 60,
        hnsw_m: int = 16,
        hnsw_ef_construct: int = 100,
    ) -> None:
        from qdrant_client import QdrantClient

        if url:
            self._client = QdrantClient(url=url, api_key=api_key, timeout=timeout)
            self.local = False
        elif path == ":memory:" or path is None:
            self._client = QdrantClient(location=":memory:")
            self.local = True
        else:
            os.makedirs(path, exist_ok=True)
            self._client = QdrantClient(path=path)
            self.local = True
        self.batch_size = batch_size
        self.hnsw_m = hnsw_m
        self.hnsw_ef_construct = hnsw_ef_construct
        self._lock = threading.RLock()
        self._specs: dict[str, CollectionSpec] = {}

    # ------------------------------------------------------------------ meta

    def _ensure_meta(self) -> None:
        from qdrant_client import models as qm

        if not self._client.collection_exists(META_COLLECTION):
            self._client.create_collection(
                META_COLLECTION,
                vectors_config=qm.VectorParams(size=1, distance=qm.Distance.DOT),
            )

    def _read_meta(self, name: str) -> dict[str, Any] | None:
        if not self._client.collection_exists(META_COLLECTION):
            return None
        pts = self._client.retrieve(META_COLLECTION, [_meta_id(name)], with_payload=True)
        if not pts:
            return None
        payload = pts[0].payload or {}
        return {
            "spec": json.loads(payload["spec"]),
            "manifest": json.loads(payload["manifest"]) if payload.get("manifest") else None,
        }

    def _write_meta(self, name: str, meta: dict[str, Any]) -> None:
        from qdrant_client import models as qm

        self._ensure_meta()
        payload = {
            "name": name,
            "spec": json.dumps(meta["spec"], sort_keys=True),
            "manifest": json.dumps(meta["manifest"]) if meta.get("manifest") is not None else "",
        }
        self._client.upsert(
            META_COLLECTION,
            points=[qm.PointStruct(id=_meta_id(name), vector=[1.0], payload=payload)],
            wait=True,
        )

    def get_spec(self, name: str) -> CollectionSpec:
        check_collection_name(name)
        meta = self._read_meta(name)
        if meta is None or not self._client.collection_exists(name):
            raise StoreError(f"collection {name!r} does not exist in Qdrant")
        spec = spec_from_json(meta["spec"])
        self._specs[name] = spec
        return spec

    # ------------------------------------------------------------ collections

    @staticmethod
    def _distance(metric: Metric) -> Any:
        from qdrant_client import models as qm

        return {"cosine": qm.Distance.COSINE, "l2": qm.Distance.EUCLID, "dot": qm.Distance.DOT}[
            metric
        ]

    def _payload_indexes(self, spec: CollectionSpec, only: Sequence[str] | None = None) -> None:
        if self.local:
            return  # local mode has no payload indexes (it scans)
        from qdrant_client import models as qm

        kinds = {
            "str": qm.PayloadSchemaType.KEYWORD,
            "int": qm.PayloadSchemaType.INTEGER,
            "float": qm.PayloadSchemaType.FLOAT,
            "bool": qm.PayloadSchemaType.BOOL,
        }
        for f in only if only is not None else spec.filter_fields:
            self._client.create_payload_index(
                spec.name, field_name=f, field_schema=kinds[spec.fields[f]], wait=True
            )

    def ensure_collection(self, spec: CollectionSpec) -> None:
        from qdrant_client import models as qm

        spec = normalise_spec(spec)
        with self._lock:
            meta = self._read_meta(spec.name)
            exists = self._client.collection_exists(spec.name)
            if meta is not None and exists:
                old = spec_from_json(meta["spec"])
                new = merge_specs(old, spec)
                if new.text_fields and not old.text_fields:
                    self._backfill_text(new)
                if new != old:
                    meta["spec"] = spec_to_json(new)
                    self._write_meta(spec.name, meta)
                    self._payload_indexes(
                        new, [f for f in new.filter_fields if f not in old.filter_fields]
                    )
                self._specs[spec.name] = new
                return
            if exists:
                raise StoreError(
                    f"Qdrant collection {spec.name!r} exists but was not created by this store "
                    "(no metadata); drop it or use another name"
                )
            self._client.create_collection(
                spec.name,
                vectors_config=qm.VectorParams(
                    size=spec.dimension, distance=self._distance(spec.metric)
                ),
                # No graph during the first load; build_indexes switches it on.
                hnsw_config=qm.HnswConfigDiff(m=0),
                # Always there, so full-text search can be switched on later.
                sparse_vectors_config={SPARSE: qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
            )
            self._payload_indexes(spec)
            self._write_meta(spec.name, {"spec": spec_to_json(spec), "manifest": None})
            self._specs[spec.name] = spec

    def _has_sparse(self, name: str) -> bool:
        info = self._client.get_collection(name)
        return SPARSE in (info.config.params.sparse_vectors or {})

    def _backfill_text(self, spec: CollectionSpec) -> None:
        """Full-text search switched on for an existing collection: write every point's sparse
        vector from its stored payload."""
        from qdrant_client import models as qm

        if not self._has_sparse(spec.name):
            raise StoreError(
                f"Qdrant collection {spec.name!r} was created without a sparse text vector; "
                "drop it and ingest again to get full-text search"
            )
        offset: Any = None
        while True:
            pts, offset = self._client.scroll(
                spec.name, limit=self.batch_size, offset=offset, with_payload=True
            )
            updates = []
            for p in pts:
                idx, val = sparse_document(
                    text_of(p.payload or {}, spec.text_fields), spec.text_language
                )
                updates.append(
                    qm.PointVectors(
                        id=p.id, vector={SPARSE: qm.SparseVector(indices=idx, values=val)}
                    )
                )
            if updates:
                self._client.update_vectors(spec.name, points=updates, wait=True)
            if offset is None:
                break

    def has_collection(self, name: str) -> bool:
        return self._client.collection_exists(name) and self._read_meta(name) is not None

    def list_collections(self) -> list[str]:
        names = [c.name for c in self._client.get_collections().collections]
        return sorted(n for n in names if n != META_COLLECTION and self._read_meta(n) is not None)

    def drop(self, collection: str) -> None:
        from qdrant_client import models as qm

        check_collection_name(collection)
        with self._lock:
            if self._client.collection_exists(collection):
                self._client.delete_collection(collection)
            if self._client.collection_exists(META_COLLECTION):
                self._client.delete(
                    META_COLLECTION,
                    points_selector=qm.PointIdsList(points=[_meta_id(collection)]),
                    wait=True,
                )
            self._specs.pop(collection, None)

    # ----------------------------------------------------------------- writes

    def upsert(self, collection: str, records: Sequence[Record]) -> int:
        from qdrant_client import models as qm

        spec = self.get_spec(collection)
        prep = prepare_records(spec, records)
        n = len(prep)
        for start in range(0, n, self.batch_size):
            end = min(n, start + self.batch_size)
            payloads = []
            for i in range(start, end):
                p = {k: v for k, v in prep.payloads[i].items() if v is not None}
                p.update(prep.extras[i])
                payloads.append(p)
            if spec.text_fields:
                points = []
                for j, i in enumerate(range(start, end)):
                    idx, val = sparse_document(
                        text_of(prep.payloads[i], spec.text_fields), spec.text_language
                    )
                    points.append(
                        qm.PointStruct(
                            id=prep.ids[i],
                            vector={
                                "": prep.vectors[i].tolist(),
                                SPARSE: qm.SparseVector(indices=idx, values=val),
                            },
                            payload=payloads[j],
                        )
                    )
                self._client.upsert(collection, points=points, wait=True)
                continue
            self._client.upsert(
                collection,
                points=qm.Batch(
                    ids=prep.ids[start:end],
                    vectors=prep.vectors[start:end].tolist(),
                    payloads=payloads,
                ),
                wait=True,
            )
        return n

    def delete(
        self, collection: str, *, ids: Sequence[str] | None = None, where: Filter | None = None
    ) -> int:
        from qdrant_client import models as qm

        spec = self.get_spec(collection)
        node = delete_filter(collection, spec.fields, ids, where)
        if node is None:
            return 0
        flt = to_qdrant(node)
        with self._lock:
            n = self._client.count(collection, count_filter=flt, exact=True).count
            if n:
                selector = qm.FilterSelector(filter=flt if flt is not None else qm.Filter())
                self._client.delete(collection, points_selector=selector, wait=True)
        return int(n)

    # ------------------------------------------------------------------ reads

    def _record(
        self,
        spec: CollectionSpec,
        point: Any,
        fields: Sequence[str] | None = None,
        with_vectors: bool = False,
    ) -> Record:
        payload = point.payload or {}
        extra = {k: v for k, v in payload.items() if k not in spec.fields}
        vec = point.vector if with_vectors else None
        if isinstance(vec, dict):  # the dense vector is the unnamed one; "text" is sparse
            vec = vec.get("")
        return output_record(spec, str(point.id), payload, extra, fields, vector=vec)

    def get(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[Record]:
        spec = self.get_spec(collection)
        id_list = check_ids(ids, collection)
        out: list[Record] = []
        for start in range(0, len(id_list), self.batch_size):
            pts = self._client.retrieve(
                collection,
                id_list[start : start + self.batch_size],
                with_payload=True,
                with_vectors=with_vectors,
            )
            out.extend(self._record(spec, p, None, with_vectors) for p in pts)
        return out

    def scan(
        self,
        collection: str,
        *,
        where: Filter | None = None,
        fields: Sequence[str] | None = None,
    ) -> Iterator[Record]:
        spec = self.get_spec(collection)
        node = parse_filter(where, spec.fields)
        if isinstance(node, Const) and not node.value:
            return
        flt = to_qdrant(node)
        with_payload: bool | list[str] = (
            True if fields is None else [f for f in fields if f != "id"]
        )
        if with_payload == []:
            with_payload = False
        offset: Any = None
        while True:
            pts, offset = self._client.scroll(
                collection,
                scroll_filter=flt,
                limit=self.batch_size,
                offset=offset,
                with_payload=with_payload,
                with_vectors=False,
            )
            for p in pts:
                yield self._record(spec, p, fields)
            if offset is None:
                break

    def count(self, collection: str, *, where: Filter | None = None) -> int:
        spec = self.get_spec(collection)
        node = parse_filter(where, spec.fields)
        if isinstance(node, Const) and not node.value:
            return 0
        return int(self._client.count(collection, count_filter=to_qdrant(node), exact=True).count)

    def query(
        self,
        collection: str,
        vector: Sequence[float],
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        from qdrant_client import models as qm

        spec = self.get_spec(collection)
        plan = query_plan(spec, vector, where, top_k, include_quarantined)
        if plan is None:
            return []
        q, node = plan
        flt = to_qdrant(node)

        def run(exact: bool) -> list[Any]:
            return list(
                self._client.query_points(
                    collection,
                    query=q.tolist(),
                    query_filter=flt,
                    limit=top_k,
                    with_payload=True,
                    search_params=qm.SearchParams(exact=exact) if exact else None,
                ).points
            )

        pts = run(False)
        if len(pts) < top_k and not self.local:
            n = self._client.count(collection, count_filter=flt, exact=True).count
            if n > len(pts):
                pts = run(True)
        hits = []
        for p in pts:
            raw = float(p.score)
            canon = 1.0 - raw if spec.metric == "cosine" else raw
            hits.append(
                Hit(
                    id=str(p.id),
                    score=score(spec.metric, canon),
                    raw_score=raw,
                    record=self._record(spec, p),
                )
            )
        hits.sort(key=lambda h: (-h.score, h.id))
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
        from qdrant_client import models as qm

        spec = self.get_spec(collection)
        node = text_plan(spec, text, where, top_k, include_quarantined)
        if node is None:
            return []
        idx, val = sparse_query(text, spec.text_language)
        if not idx:
            return []
        pts = self._client.query_points(
            collection,
            query=qm.SparseVector(indices=idx, values=val),
            using=SPARSE,
            query_filter=to_qdrant(node),
            limit=top_k,
            with_payload=True,
        ).points
        hits = [
            Hit(
                id=str(p.id),
                score=text_score(float(p.score)),
                raw_score=float(p.score),
                record=self._record(spec, p),
            )
            for p in pts
        ]
        hits.sort(key=lambda h: (-h.raw_score, h.id))
        return hits

    # --------------------------------------------------------------- manifest

    def get_manifest(self, collection: str) -> dict[str, Any] | None:
        meta = self._read_meta(check_collection_name(collection))
        return None if meta is None else meta.get("manifest")

    def put_manifest(self, collection: str, manifest: dict[str, Any]) -> None:
        with self._lock:
            meta = self._read_meta(check_collection_name(collection))
            if meta is None or not self._client.collection_exists(collection):
                raise StoreError(f"collection {collection!r} does not exist in Qdrant")
            meta["manifest"] = json.loads(json.dumps(manifest))
            self._write_meta(collection, meta)

    def maintain(self, collection: str) -> dict[str, Any]:
        spec = self.get_spec(collection)
        return {"rows": self.count(spec.name)}

    def build_indexes(self, collection: str) -> dict[str, Any]:
        from qdrant_client import models as qm

        self.get_spec(collection)
        if self.local:
            return {
                "vector_index": "none: local mode searches exactly",
                **self.index_status(collection),
            }
        info = self._client.get_collection(collection)
        m = info.config.hnsw_config.m
        if not m:
            self._client.update_collection(
                collection,
                hnsw_config=qm.HnswConfigDiff(m=self.hnsw_m, ef_construct=self.hnsw_ef_construct),
            )
            done = f"hnsw switched on (m={self.hnsw_m}); Qdrant builds it in the background"
        else:
            done = f"hnsw on (m={m}); Qdrant indexes new points itself"
        return {"vector_index": done, **self.index_status(collection)}

    def index_status(self, collection: str) -> dict[str, Any]:
        self.get_spec(collection)
        rows = self.count(collection)
        if self.local:
            return {"rows": rows, "ann_index": None, "indexed_rows": 0, "unindexed_rows": rows}
        info = self._client.get_collection(collection)
        indexed = int(info.indexed_vectors_count or 0)
        m = info.config.hnsw_config.m
        return {
            "rows": rows,
            "ann_index": f"hnsw m={m}" if m else None,
            "indexed_rows": indexed,
            "unindexed_rows": max(0, rows - indexed),
            "optimizer_status": str(info.status),
        }

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._client.close()
