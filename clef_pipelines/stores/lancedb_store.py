"""LanceDB (embedded) adapter, the default store.

- One table per collection: ``id`` (string), ``vector`` (fixed-size list of float32), one typed
  column per declared field, ``_extra`` (JSON of undeclared scalar fields).
- Upserts are ``merge_insert("id")`` (update all / insert all). `insert` (records whose ids
  the caller knows are not stored: the sync's chunks of new documents) is a plain append: a
  ``merge_insert`` joins its slice against every id of the table, scanning the rows the id
  index does not cover yet (up to ``upkeep_fraction`` of the table between upkeeps), so a
  load in slices took time quadratic in its size (docs/BENCHMARKS.md, "store_sync in linear
  time").
- Scalar indexes (BTREE; BITMAP for bools) on ``id`` and the filter fields. The ANN index
  (IVF_HNSW_SQ by default, see `vector_index_config` for why) is built by `build_indexes`
  (its own ingestion step, after the sync), never inside a write, once a collection holds
  ``index_threshold`` rows: in segments of at most ``index_segment_rows`` rows over whole
  fragments, each trained on its own rows and committed as one index (`index_segments`),
  so one build's memory is set by the segment size, not the table; later calls give the
  rows written since segments of their own, and nothing is retrained. With
  ``index_segment_rows`` 0 it is one index over the table, new rows folded into it
  (``optimize``) and retrained when the table has doubled. Rows not yet in the index are
  searched exactly by LanceDB alongside the index, so queries stay correct while it is
  stale. Searches are prefiltered; with an ANN index they refine with exact distances, and
  fall back to exact search when the index returns fewer than k rows that a filter admits.
- Upkeep (the table's small fragments compacted, new rows folded into its indexes, versions
  older than ``cleanup_older_than_s`` removed so the disk does not grow without bound) runs in
  `maintain` and during writes once at least ``optimize_every`` writes and rows written or
  deleted of at least ``upkeep_fraction`` of the table (as it was at the last upkeep, or as
  this process first found it), or of ``upkeep_rows``, whichever is fewer, have accumulated.
  Compaction goes through Lance itself (``compact_files``) with a target of
  ``compaction_target_rows`` rows per fragment: LanceDB's own ``optimize`` compacts every
  fragment below a 1M-row target, so below 1M rows each upkeep rewrote the whole table, with
  memory and time that grew with it (the 50,000-document first run peaked in it,
  docs/BENCHMARKS.md "Scale"); with the smaller target, fragments that reach it are left alone
  and one upkeep rewrites the rows written since and small fragments next to each other, so
  its memory is set by the target, not the table. The scalar and full-text indexes are kept as
  deltas of about ``index_delta_rows`` rows: an upkeep folds the new rows into the latest
  delta, or into a new one once that is full, instead of rewriting the whole index, whose
  memory grew with the table; so an upkeep's memory is set by ``upkeep_rows`` and
  ``index_delta_rows`` (`_update_index`). Lance's runtime is a second one next to LanceDB's
  and keeps about 0.15 GB in malloc arenas of its own unless the process limits them
  (``MALLOC_ARENA_MAX=2``; docs/BENCHMARKS.md).
- Full-text search (collections with ``text_fields``): a ``_text`` column holds the text
  fields joined, written with every upsert, under LanceDB's native inverted (FTS) index with
  the collection's language (stemming, stop words, ASCII folding). The index is created on
  the first write; rows written after it are searched directly (flat) until an upkeep or
  `ensure_text_index` folds them in, and updates/deletes are deletion vectors, so an edited
  or removed record's old text is never matched and nothing is ever rebuilt.
- LanceDB's index cache is bounded (``index_cache_mb``): its 6 GB default kept the index pages
  a refresh's deletes by document id read, 3.0 GB at 7.6M rows.
- LanceDB's metadata cache is bounded (``metadata_cache_mb``): every write is a table version
  whose manifest lists every fragment, and the default cache kept each one it read, so a
  load's memory grew with the square of its writes between upkeeps.
- Every upkeep ends on a fresh session: LanceDB caches entries per table version, and a load
  writes a version per append, so its caches otherwise fill (to their bounds) with entries of
  versions no one reads again, the larger the bigger the table.
- Spec and manifest live in ``<path>/_clef_meta/<collection>.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from clef_pipelines.objectstore import (
    ObjectStoreConfig,
    filesystem,
    is_cloud_url,
    strip_scheme,
)
from clef_pipelines.stores._common import (
    check_collection_name,
    check_ids,
    extras_from_json,
    extras_to_json,
    merge_specs,
    normalise_spec,
    output_record,
    prepare_records,
    query_plan,
    require_delete_target,
    score,
    spec_from_json,
    spec_to_json,
    text_plan,
)
from clef_pipelines.stores.base import (
    QUARANTINE_FIELD,
    CollectionSpec,
    Filter,
    Hit,
    Metric,
    Record,
    StoreError,
    VectorStore,
)
from clef_pipelines.stores.filters import (
    And,
    Const,
    In,
    parse_filter,
    to_lance,
    with_quarantine,
)
from clef_pipelines.stores.text import text_of, text_score

_ARROW = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
_CAST = {"str": "string", "int": "bigint", "float": "double", "bool": "boolean"}
_META_DIR = "_clef_meta"
_EXTRA = "_extra"
_TEXT = "_text"
_ID_CHUNK = 1000
#: Key of LanceDB's row id in the records of `query_refs` / `text_query_refs` hits.
_ROW_ID = "_clef_row_id"


def _canonical(metric: Metric, distance: float) -> float:
    """LanceDB's ``_distance`` -> cosine distance, L2 distance, or inner product."""
    if metric == "l2":
        return float(np.sqrt(max(distance, 0.0)))  # LanceDB reports squared L2
    if metric == "dot":
        return 1.0 - distance  # LanceDB reports 1 - <a, b>
    return distance


def _async_table(t: Any) -> Any:
    """The `lancedb.AsyncTable` behind a sync `LanceTable` (its `_table`), or None if this
    LanceDB version keeps it elsewhere (then searches take the sync path; a test checks that
    the installed version has it)."""
    from lancedb.table import AsyncTable

    handle = getattr(t, "_table", None)
    return handle if isinstance(handle, AsyncTable) else None


def _overfetch(top_k: int) -> int:
    """How many more than top_k an unindexed search asks for, so that the quarantined
    records among them can be dropped without a second search (`_unindexed_search`)."""
    return max(8, top_k // 4)


#: Records per batch of a scan.
_SCAN_BATCH = 20_000


def vector_index_config(
    kind: str, rows: int, dimension: int, metric: str, partitions: int | None = None
) -> Any:
    """The LanceDB index configuration of ``kind`` for a table of ``rows`` vectors.

    IVF_HNSW_SQ (the default) with partitions of about 25,000 rows: an HNSW graph is built
    per partition, so the partition size, not the table, sets what one graph build holds.
    Measured with ``lab/bench/vector_index.py`` over 380,000 rows of 384 dimensions
    (docs/BENCHMARKS.md, "Scale"): 4 partitions of 95,000 (the earlier 100,000-row target)
    peaked at 1.20 GB in 1,112 s, 16 partitions at 1.06 GB in 839 s, recall@10 1.000 both.
    A query probes ``nprobes`` (20) partitions: every partition up to about 500,000 rows;
    past that a query sees a share of them, so raise ``nprobes`` if recall drops.
    IVF_PQ was measured as the alternative and not taken: its build peaks at the same 1.05 GB
    (the IVF pass over the table, common to every IVF index, is most of that peak), its
    recall@10 was 0.93, and a prefiltered query whose filter admits only rows far from the
    query's partitions got 0.3 recall@10 (tests/stores/test_conformance.py), where HNSW passes.
    """
    from lancedb.index import HnswSq, IvfFlat, IvfPq

    if kind == "IVF_HNSW_SQ":
        parts = partitions or max(1, rows // 25_000 + 1)
        return HnswSq(distance_type=metric, num_partitions=parts)
    # About sqrt(rows)/2 partitions, at most 256: a query probes ``nprobes`` of them.
    parts = partitions or max(1, min(256, int(np.sqrt(rows) / 2)))
    if kind == "IVF_PQ":
        sub = next(s for s in (48, 32, 24, 16, 12, 8, 6, 4, 3, 2, 1) if dimension % s == 0)
        return IvfPq(distance_type=metric, num_partitions=parts, num_sub_vectors=sub)
    if kind == "IVF_FLAT":
        return IvfFlat(distance_type=metric, num_partitions=parts)
    raise ValueError(f"unknown LanceDB index type {kind!r}")


def segment_index_args(kind: str, rows: int, dimension: int, metric: str) -> dict[str, Any]:
    """Lance's ``create_index_uncommitted`` arguments for one index segment of ``rows``
    vectors: the same partition sizes as `vector_index_config`, and LanceDB's HNSW defaults
    (m 20, ef_construction 300; Lance's own default ef_construction is 150)."""
    config = vector_index_config(kind, rows, dimension, metric)
    args: dict[str, Any] = {
        "index_type": kind,
        "metric": metric,
        "num_partitions": int(config.num_partitions),
    }
    if kind == "IVF_HNSW_SQ":
        args.update(m=20, ef_construction=300)
    if kind == "IVF_PQ":
        args["num_sub_vectors"] = int(config.num_sub_vectors)
    return args


def group_fragments(rows: dict[int, int], limit: int) -> list[list[int]]:
    """Fragments (id -> rows) in id order, cut into groups of at most ``limit`` rows (a
    fragment larger than that is a group of its own: a segment holds whole fragments)."""
    groups: list[list[int]] = []
    current: list[int] = []
    held = 0
    for fid in sorted(rows):
        if current and held + rows[fid] > limit:
            groups.append(current)
            current, held = [], 0
        current.append(fid)
        held += rows[fid]
    if current:
        groups.append(current)
    return groups


def index_segments(t: Any, kind: str, dimension: int, metric: str, limit: int) -> int:
    """Index the fragments of LanceDB table ``t`` that its ANN index does not cover yet, in
    segments of at most ``limit`` rows; returns the segments built.

    Why: one LanceDB ``create_index`` runs its IVF pass over the whole table, and its
    memory grows with it (+0.8 to 1.0 GB at 380,000 rows, more beyond; docs/BENCHMARKS.md
    "Scale"). Lance builds an index segment over chosen fragments
    (``create_index_uncommitted(fragment_ids=...)``), training that segment's partitions
    and quantiser on its own rows, and commits segments as one logical index that a
    query searches segment by segment, so one build holds one segment's rows whatever
    the table's size. The smallest segment is rebuilt together with the last group of
    new fragments when both fit in one segment, so a run of small refreshes does not
    leave one small segment each (a query's cost grows with the segments)."""
    from lance.dataset import Index, LanceDataset, LanceOperation

    from clef_pipelines.ingest.process_memory import trim_heap

    ds = t.to_lance()
    desc = next((d for d in ds.describe_indices() if "vector" in d.field_names), None)
    rows = {f.fragment_id: f.count_rows() for f in ds.get_fragments()}
    covered = {f for seg in desc.segments for f in seg.fragment_ids} if desc else set()
    new = {f: n for f, n in rows.items() if f not in covered and n > 0}
    if not new:
        return 0
    groups = group_fragments(new, limit)
    removed = []
    if desc is not None:
        held, smallest = min(
            ((sum(rows.get(f, 0) for f in seg.fragment_ids), seg) for seg in desc.segments),
            key=lambda pair: pair[0],
        )
        if held + sum(new[f] for f in groups[-1]) <= limit:
            groups[-1] = sorted({*groups[-1], *(f for f in smallest.fragment_ids if f in rows)})
            removed.append(
                Index(
                    uuid=smallest.uuid,
                    name=desc.name,
                    fields=list(desc.fields),
                    dataset_version=smallest.dataset_version_at_last_update,
                    fragment_ids=set(smallest.fragment_ids),
                    index_version=smallest.index_version,
                )
            )
    name = desc.name if desc is not None else "vector_idx"  # LanceDB's name for it
    built = []
    for group in groups:
        args = segment_index_args(kind, sum(rows[f] for f in group), dimension, metric)
        built.append(
            ds.create_index_uncommitted(
                "vector", name=name, replace=True, fragment_ids=group, **args
            )
        )
        # Hand what the segment's build freed back to the OS before the next one: glibc
        # keeps freed memory in its arenas, and the process's peak crept up segment by
        # segment (two arenas, six segments: +0.08 GB without the trim, +0.05 with it,
        # the resident memory back to the same level after each; lab/bench/index_segments.py,
        # docs/BENCHMARKS.md "The ANN index in segments").
        trim_heap()
    # One commit adds the new segments (and drops the one rebuilt): the index is never
    # missing, and rows outside it are searched exactly until then.
    op = LanceOperation.CreateIndex(new_indices=built, removed_indices=removed)
    LanceDataset.commit(ds, op, read_version=ds.version)
    t.checkout_latest()
    return len(built)


class LanceDBStore(VectorStore):
    kind = "lancedb"
    concurrent_reads = True  # searches run in LanceDB's Rust runtime, outside the GIL

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        index_threshold: int = 50_000,
        index_type: str = "IVF_HNSW_SQ",
        nprobes: int = 20,
        refine_factor: int = 10,
        optimize_every: int = 20,
        ef: int = 100,
        cleanup_older_than_s: float = 60.0,
        upkeep_fraction: float = 0.5,
        upkeep_rows: int = 131_072,
        index_delta_rows: int = 262_144,
        compaction_target_rows: int = 16_384,
        index_segment_rows: int = 100_000,
        metadata_cache_mb: int = 128,
        index_cache_mb: int = 128,
        storage_options: dict[str, str] | None = None,
        object_store: ObjectStoreConfig | None = None,
    ) -> None:
        # On an object store (`path` an s3:// / gs:// / az:// URL) the tables are LanceDB's own
        # (its `storage_options`: endpoint, region, keys), and this store's small metadata
        # files beside them are read and written through fsspec (`object_store`).
        self.uri = str(path).rstrip("/") if is_cloud_url(path) else None
        self._storage_options = dict(storage_options or {})
        self._meta_fs: Any = None
        if self.uri is not None:
            self.path = Path(strip_scheme(self.uri))  # for messages; never opened locally
            self._meta_fs = filesystem(self.uri, object_store)
        else:
            self.path = Path(path)
            self.path.mkdir(parents=True, exist_ok=True)
            (self.path / _META_DIR).mkdir(exist_ok=True)
        self.index_threshold = index_threshold
        self.index_type = index_type
        self.nprobes = nprobes
        self.refine_factor = refine_factor
        self.optimize_every = optimize_every
        self.ef = ef
        self.cleanup_older_than_s = cleanup_older_than_s
        self.upkeep_fraction = upkeep_fraction
        self.upkeep_rows = upkeep_rows
        self.index_delta_rows = index_delta_rows
        self.compaction_target_rows = compaction_target_rows
        self.index_segment_rows = index_segment_rows
        # Strong consistency: other processes (Dagster steps) may write the same tables.
        # A bounded metadata cache: every write is a version whose manifest lists every
        # fragment, and LanceDB's default cache kept each one it read, so a load's memory grew
        # with the square of its writes between upkeeps (0.86 GB of cache after 1,200 appends
        # of 512 rows; flat at the bound with it, and the appends as fast: docs/BENCHMARKS.md,
        # "store_sync in linear time").
        # The index cache is bounded too (`index_cache_mb`): LanceDB's default is 6 GB, and a
        # refresh's deletes by document id on a 7.6M-row table filled it with index pages
        # (3.0 GB peak; 1.4 GB with 128 MB: docs/BENCHMARKS.md, "The index cache").
        self._cache_bytes = (metadata_cache_mb * 1024 * 1024, index_cache_mb * 1024 * 1024)
        self._tables: dict[str, Any] = {}
        self._connect()
        self._specs: dict[str, CollectionSpec] = {}
        self._writes: dict[str, int] = {}
        # Per collection since its last upkeep in this process: writes, rows written or
        # deleted, and the table's rows after that upkeep (see `_after_write`).
        self._since_upkeep: dict[str, tuple[int, int]] = {}
        self._rows_at_upkeep: dict[str, int] = {}
        self._lock = threading.RLock()

    def _connect(self) -> None:
        """A connection with a session (caches) of its own; the tables opened on the previous
        one are dropped from `_tables` and reopened on first use."""
        import lancedb

        metadata_bytes, index_bytes = self._cache_bytes
        self._session = lancedb.Session(
            metadata_cache_size_bytes=metadata_bytes, index_cache_size_bytes=index_bytes
        )
        self._db = lancedb.connect(
            self.uri or str(self.path),
            read_consistency_interval=timedelta(0),
            session=self._session,
            storage_options=self._storage_options or None,
        )
        self._tables.clear()

    # ------------------------------------------------------------------ meta

    @property
    def location(self) -> str:
        """Where the tables are: the URL, or the local folder."""
        return self.uri or str(self.path)

    def _meta_path(self, name: str) -> Path:
        return self.path / _META_DIR / f"{name}.json"

    def _meta_key(self, name: str) -> str:
        return f"{strip_scheme(self.uri or '')}/{_META_DIR}/{name}.json"

    def _meta_exists(self, name: str) -> bool:
        if self._meta_fs is not None:
            return bool(self._meta_fs.exists(self._meta_key(name)))
        return self._meta_path(name).exists()

    def _read_meta(self, name: str) -> dict[str, Any] | None:
        if self._meta_fs is not None:
            try:
                data = self._meta_fs.cat_file(self._meta_key(name))
            except FileNotFoundError:
                return None
            return json.loads(data.decode("utf-8"))  # type: ignore[no-any-return]
        p = self._meta_path(name)
        if not p.exists():
            return None
        return json.loads(p.read_text(encoding="utf-8"))  # type: ignore[no-any-return]

    def _write_meta(self, name: str, meta: dict[str, Any]) -> None:
        text = json.dumps(meta, ensure_ascii=False, sort_keys=True)
        if self._meta_fs is not None:  # one PUT: readers see the old object or the new
            self._meta_fs.pipe_file(self._meta_key(name), text.encode("utf-8"))
            return
        p = self._meta_path(name)
        tmp = p.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)

    def _meta_names(self) -> list[str]:
        if self._meta_fs is not None:
            prefix = f"{strip_scheme(self.uri or '')}/{_META_DIR}"
            try:
                keys = self._meta_fs.ls(prefix, detail=False)
            except FileNotFoundError:
                return []
            return [k.rsplit("/", 1)[-1].removesuffix(".json") for k in keys if k.endswith(".json")]
        return [p.stem for p in (self.path / _META_DIR).glob("*.json")]

    def _drop_meta(self, name: str) -> None:
        if self._meta_fs is not None:
            with contextlib.suppress(FileNotFoundError):
                self._meta_fs.rm_file(self._meta_key(name))
            return
        self._meta_path(name).unlink(missing_ok=True)

    def get_spec(self, name: str) -> CollectionSpec:
        meta = self._read_meta(check_collection_name(name))
        if meta is None or not self._db_has(name):
            raise StoreError(f"collection {name!r} does not exist in LanceDB at {self.location}")
        spec = spec_from_json(meta["spec"])
        self._specs[name] = spec
        return spec

    def _table_names(self) -> set[str]:
        names: set[str] = set()
        token: str | None = None
        while True:
            resp = self._db.list_tables(page_token=token)
            names.update(resp.tables)
            token = resp.page_token
            if not token:
                return names

    def _db_has(self, name: str) -> bool:
        if name in self._tables and self.uri is None:
            return (self.path / f"{name}.lance").exists() or name in self._table_names()
        return name in self._table_names()

    def _table(self, name: str) -> Any:
        t = self._tables.get(name)
        if t is None:
            try:
                t = self._db.open_table(name)
            except ValueError:
                # LanceDB says "Table was not found" of a folder whose manifests are gone:
                # name the damage and the way out instead.
                self._raise_if_damaged(name)
                raise
            self._tables[name] = t
        return t

    def _raise_if_damaged(self, name: str) -> None:
        from clef_pipelines.stores.lancedb_health import check_tables

        if self.uri is None:  # the check reads the local files' sizes
            check_tables(self.path, [name])

    @staticmethod
    def _schema(spec: CollectionSpec) -> pa.Schema:
        cols = [
            pa.field("id", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), spec.dimension)),
        ]
        cols += [pa.field(f, _ARROW[t]) for f, t in spec.fields.items()]
        cols.append(pa.field(_EXTRA, pa.string()))
        if spec.text_fields:
            cols.append(pa.field(_TEXT, pa.string()))
        return pa.schema(cols)

    # ------------------------------------------------------------ collections

    def ensure_collection(self, spec: CollectionSpec) -> None:
        spec = normalise_spec(spec)
        with self._lock:
            meta = self._read_meta(spec.name)
            if meta is not None and self._db_has(spec.name):
                old = spec_from_json(meta["spec"])
                new = merge_specs(old, spec)
                added = {f: t for f, t in new.fields.items() if f not in old.fields}
                if added:
                    self._table(spec.name).add_columns(
                        {f: f"CAST(NULL AS {_CAST[t]})" for f, t in added.items()}
                    )
                if new.text_fields and not old.text_fields:
                    # Full-text search switched on for an existing table: fill the column from
                    # the stored fields (the index follows on the next write or query).
                    joined = ", ".join(f"`{f}`" for f in new.text_fields)
                    self._table(spec.name).add_columns({_TEXT: f"concat_ws(' ', {joined})"})
                if new != old:
                    meta["spec"] = spec_to_json(new)
                    self._write_meta(spec.name, meta)
                    self._ensure_scalar_indexes(new)
                self._specs[spec.name] = new
                return
            if self._db_has(spec.name):
                # A table without our metadata: refuse rather than guess its metric.
                raise StoreError(
                    f"LanceDB table {spec.name!r} exists at {self.location} but was not created by "
                    "this store (no metadata); drop it or use another name"
                )
            t = self._db.create_table(spec.name, schema=self._schema(spec), exist_ok=False)
            self._tables[spec.name] = t
            self._write_meta(spec.name, {"spec": spec_to_json(spec), "manifest": None})
            self._specs[spec.name] = spec

    def has_collection(self, name: str) -> bool:
        check_collection_name(name)  # a name no file system takes is an error, not an OSError
        return self._meta_exists(name) and self._db_has(name)

    def list_collections(self) -> list[str]:
        names = self._meta_names()
        return sorted(n for n in names if self._db_has(n))

    def drop(self, collection: str) -> None:
        check_collection_name(collection)
        with self._lock:
            self._tables.pop(collection, None)
            self._specs.pop(collection, None)
            if self._db_has(collection):
                self._db.drop_table(collection)
            self._drop_meta(collection)

    # ----------------------------------------------------------------- writes

    def upsert(self, collection: str, records: Sequence[Record]) -> int:
        spec = self.get_spec(collection)
        data = self._arrow_records(spec, records)
        if data is None:
            return 0
        with self._lock:
            t = self._table(collection)
            (
                t.merge_insert("id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute(data)
            )
            self._after_write(spec, data.num_rows)
        return data.num_rows

    def insert(self, collection: str, records: Sequence[Record]) -> int:
        """Append (see `VectorStore.insert`): a ``merge_insert`` joins the slice against every
        id in the table, and against a full scan of the rows the id index does not cover yet
        (up to ``upkeep_fraction`` of the table between upkeeps), so a load of N rows in
        slices cost O(N^2); an append costs the slice (docs/BENCHMARKS.md, "store_sync in
        linear time")."""
        spec = self.get_spec(collection)
        data = self._arrow_records(spec, records)
        if data is None:
            return 0
        with self._lock:
            self._table(collection).add(data, mode="append")
            self._after_write(spec, data.num_rows)
        return data.num_rows

    def _arrow_records(self, spec: CollectionSpec, records: Sequence[Record]) -> pa.Table | None:
        """Records checked and converted to the table's schema; None when there are none."""
        prep = prepare_records(spec, records)
        if not len(prep):
            return None
        _, dim = prep.vectors.shape
        columns: dict[str, pa.Array] = {
            "id": pa.array(prep.ids, pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(
                pa.array(prep.vectors.reshape(-1), pa.float32()), dim
            ),
        }
        for f, t in spec.fields.items():
            columns[f] = pa.array([p[f] for p in prep.payloads], _ARROW[t])
        columns[_EXTRA] = pa.array([extras_to_json(e) for e in prep.extras], pa.string())
        if spec.text_fields:
            columns[_TEXT] = pa.array(
                [text_of(p, spec.text_fields) for p in prep.payloads], pa.string()
            )
        return pa.Table.from_pydict(columns, schema=self._schema(spec))

    def delete(
        self, collection: str, *, ids: Sequence[str] | None = None, where: Filter | None = None
    ) -> int:
        spec = self.get_spec(collection)
        require_delete_target(collection, ids, where)
        node = parse_filter(where, spec.fields)
        if isinstance(node, Const) and not node.value:
            return 0
        clauses: list[str | None] = []
        if ids is not None:
            id_list = check_ids(ids, collection)
            for i in range(0, len(id_list), _ID_CHUNK):
                chunk = tuple(id_list[i : i + _ID_CHUNK])
                clauses.append(to_lance(And((In("id", chunk, False, "str"), node))))
        else:
            clauses.append(to_lance(node))
        deleted = 0
        with self._lock:
            t = self._table(collection)
            for clause in clauses:
                res = t.delete(clause if clause is not None else "true")
                deleted += int(getattr(res, "num_deleted_rows", 0) or 0)
            if clauses:
                self._after_write(spec, deleted)
        return deleted

    def _after_write(self, spec: CollectionSpec, rows: int) -> None:
        name = spec.name
        self._writes[name] = self._writes.get(name, 0) + 1
        if self._writes[name] == 1:
            self._ensure_scalar_indexes(spec)
            self._ensure_fts_index(spec)
        if name not in self._rows_at_upkeep:
            # First write in this process: the table as found stands for the last upkeep, so a
            # small refresh of a large table is not a whole-table rewrite every 20 writes.
            self._rows_at_upkeep[name] = int(self._table(name).count_rows())
        writes, touched = self._since_upkeep.get(name, (0, 0))
        writes, touched = writes + 1, touched + rows
        self._since_upkeep[name] = (writes, touched)
        if not self.optimize_every or writes < self.optimize_every:
            return
        # Rows written or deleted since the last upkeep against the table as it was then: a
        # small table is kept up every `optimize_every` writes, a larger one once the rows
        # touched are a share of it, and never more than `upkeep_rows` rows later. Why the
        # cap: an upkeep's index update holds memory in proportion to the rows it folds in,
        # so with the share alone a load's last upkeeps folded in a third of the table each
        # (1.2M rows at 3.8M) and the sync's memory grew with the table. An upkeep now costs
        # the rows folded in plus one index delta of at most `index_delta_rows`
        # (`_update_index`), not the table, so upkeeps spaced by rows keep a load linear.
        due = self.upkeep_fraction * self._rows_at_upkeep.get(name, 0)
        if self.upkeep_rows:
            due = min(due, self.upkeep_rows)
        if touched >= due:
            self._optimize(name)

    def _index_if_due(self, spec: CollectionSpec) -> str | None:
        """Build the ANN index at the threshold. Built in segments (``index_segment_rows``),
        each segment's partitions and quantiser are trained on its own rows, so nothing is
        retrained later: new rows get segments of their own (`_index_segments`). Built whole
        (``index_segment_rows`` 0), it is rebuilt when the table has doubled since (its
        partitions and quantiser were trained on the data of the time)."""
        t = self._table(spec.name)
        n = t.count_rows()
        if n < self.index_threshold:
            return None
        if self.index_segment_rows:
            if self._has_vector_index(t):
                return None
            self._index_segments(spec)
            return self.index_type
        meta = self._read_meta(spec.name) or {}
        built = int((meta.get("index") or {}).get("rows", 0))
        if self._has_vector_index(t) and built and n < 2 * built:
            return None
        kind = self._build_vector_index(spec)
        meta = self._read_meta(spec.name) or {"spec": spec_to_json(spec), "manifest": None}
        meta["index"] = {"type": kind, "rows": n}
        self._write_meta(spec.name, meta)
        return kind

    # ---------------------------------------------------------------- indexes

    @staticmethod
    def _ann_index(t: Any) -> Any:
        """The table's vector (ANN) index, or None."""
        return next((ix for ix in t.list_indices() if "vector" in ix.columns), None)

    @classmethod
    def _has_vector_index(cls, t: Any) -> bool:
        return cls._ann_index(t) is not None

    @staticmethod
    def _segment_count(stats: Any) -> int:
        """Segments of an ANN index from its stats (one when Lance does not say)."""
        return int(getattr(stats, "num_indices", 1) or 1)

    @classmethod
    def _vector_segments(cls, t: Any) -> int:
        ann = cls._ann_index(t)
        return 0 if ann is None else cls._segment_count(t.index_stats(ann.name))

    def _ensure_scalar_indexes(self, spec: CollectionSpec) -> list[str]:
        t = self._table(spec.name)
        if t.count_rows() == 0:
            return []
        have = {c for ix in t.list_indices() for c in ix.columns}
        made = []
        for f in ("id", *spec.filter_fields):
            if f in have:
                continue
            kind = "BITMAP" if spec.fields.get(f) == "bool" else "BTREE"
            t.create_scalar_index(f, index_type=kind, replace=True)
            made.append(f)
        return made

    @staticmethod
    def _fts_index(t: Any) -> Any:
        return next((ix for ix in t.list_indices() if _TEXT in ix.columns), None)

    def _ensure_fts_index(self, spec: CollectionSpec) -> bool:
        """Create the inverted index over ``_text`` if it is missing and there are rows."""
        if not spec.text_fields:
            return False
        from lancedb.index import FTS

        t = self._table(spec.name)
        if self._fts_index(t) is not None or t.count_rows() == 0:
            return False
        config = FTS(
            language=spec.text_language.capitalize(),
            stem=True,
            remove_stop_words=True,
            ascii_folding=True,
        )
        t.create_index(_TEXT, config=config, replace=True)
        return True

    def ensure_text_index(self, collection: str) -> dict[str, Any]:
        spec = self.get_spec(collection)
        if not spec.text_fields:
            return {"text_index": "none (no text fields)"}
        with self._lock:
            t = self._table(collection)
            if self._ensure_fts_index(spec):
                done = "built"
            else:
                ix = self._fts_index(t)
                if ix is None:
                    return {"text_index": "none yet (empty table)"}
                stats = t.index_stats(ix.name)
                unindexed = int(getattr(stats, "num_unindexed_rows", 0) or 0)
                if unindexed:
                    # Folds the rows written since into the index (a delta, not a rebuild).
                    self._optimize(collection)
                    t = self._table(collection)  # (the upkeep opened a new connection)
                    done = f"updated ({unindexed} rows folded in)"
                else:
                    done = "up to date"
            stats = t.index_stats(self._fts_index(t).name)
        return {
            "text_index": done,
            "text_indexed_rows": int(getattr(stats, "num_indexed_rows", 0) or 0),
            "text_unindexed_rows": int(getattr(stats, "num_unindexed_rows", 0) or 0),
        }

    def _uncovered(self, t: Any) -> dict[str, int]:
        """Per scalar or full-text index, the table's rows it does not cover (only those
        with some): Lance's own statistics, against the table as it is now."""
        out: dict[str, int] = {}
        for ix in t.list_indices():
            if "vector" in ix.columns:  # the ANN index is the index step's (`build_indexes`)
                continue
            unindexed = int(getattr(t.index_stats(ix.name), "num_unindexed_rows", 0) or 0)
            if unindexed:
                out[ix.name] = unindexed
        return out

    def complete_indexes(self, collection: str) -> dict[str, Any]:
        spec = self.get_spec(collection)
        done: dict[str, Any] = {}
        with self._lock:
            t = self._table(collection)
            made = self._ensure_scalar_indexes(spec)
            if self._ensure_fts_index(spec):
                made.append(_TEXT)
            if made:
                done["indexes_built"] = made
            uncovered = self._uncovered(t)
            if uncovered:
                # What an upkeep cut short left (disk full, a kill): the same upkeep, again.
                self._optimize(collection)
                done["rows_folded_in"] = uncovered
                left = self._uncovered(self._table(collection))
                if left:
                    raise StoreError(
                        f"collection {collection!r}: indexes still miss rows after upkeep: {left}"
                    )
        return done

    def _build_vector_index(self, spec: CollectionSpec) -> str:
        t = self._table(spec.name)
        config = vector_index_config(self.index_type, t.count_rows(), spec.dimension, spec.metric)
        t.create_index("vector", config=config, replace=True)
        return self.index_type

    def _index_segments(self, spec: CollectionSpec) -> int:
        """Index the rows the ANN index does not cover yet (`index_segments`)."""
        return index_segments(
            self._table(spec.name),
            self.index_type,
            spec.dimension,
            spec.metric,
            self.index_segment_rows,
        )

    def _optimize(self, name: str) -> None:
        """Upkeep: LanceDB's ``optimize`` (compaction, index update, version clean-up) with a
        compaction that leaves fragments of ``compaction_target_rows`` alone (see the module
        docstring); Lance's own API, since LanceDB's ``compact_files`` wrapper is deprecated."""
        from clef_pipelines.ingest.process_memory import trim_heap

        t = self._table(name)
        ds = t.to_lance()  # imports `lance`: only here, never on the query path
        # Fragments below the target, and any with a tenth of their rows deleted, are
        # rewritten into fragments of up to the target; the indexes are remapped to them.
        ds.optimize.compact_files(target_rows_per_fragment=self.compaction_target_rows)
        # Rows written since are added to the indexes as deltas merged into the latest one,
        # without retraining (what LanceDB's optimize does). Not to an ANN index built in
        # segments: Lance cannot merge segments trained apart ("segments do not share IVF
        # centroids"), and the index step gives new rows segments of their own
        # (`_index_segments`); until then they are searched exactly.
        indexes = t.list_indices()
        names = [ix.name for ix in indexes]
        if self.index_segment_rows or self._vector_segments(t) > 1:
            names = [ix.name for ix in indexes if "vector" not in ix.columns]
        # One index at a time, the memory each update freed handed back before the next: in
        # one call their buffers added up (folding 200,000 rows into the six indexes of a
        # sync's table: +0.13 GB in one call, at most +0.06 one at a time, the full-text
        # index's; docs/BENCHMARKS.md "The sync's memory as the table grows").
        vector = {ix.name for ix in indexes if "vector" in ix.columns}
        latest_rows = self._latest_delta_rows(ds) if self.index_delta_rows else {}
        for index_name in names:
            if index_name in vector:  # one whole ANN index (index_segment_rows 0): as before
                ds.optimize.optimize_indices(index_names=[index_name])
            else:
                self._update_index(ds, index_name, latest_rows.get(index_name))
            trim_heap()
        # Versions older than the window go (0 would break a concurrent reader of an older
        # version). Lance reads a zero timedelta as "not given", so 0 is said as "keep one".
        if self.cleanup_older_than_s > 0:
            ds.cleanup_old_versions(older_than=timedelta(seconds=self.cleanup_older_than_s))
        else:
            ds.cleanup_old_versions(retain_versions=1)
        rows = int(t.count_rows())
        # A fresh session after every upkeep. Why: LanceDB caches what it reads per table
        # version, and every append is a version, so the index cache filled with entries of
        # versions no one reads again, each the larger the more index deltas and fragments
        # the table has (about 20 MB per 256 appends at 3.8M rows, 3 MB at 380k), until it
        # reached its bound: the sync's memory grew with the table. Dropped here, the caches
        # hold what was read since the last upkeep (docs/BENCHMARKS.md, "The caches of old
        # versions"). A refresh's deletes by document id read the index pages they need again
        # after an upkeep, and a small refresh has no upkeep before its last write.
        del ds, t
        self._connect()
        # Hand what the upkeep freed back to the OS: Lance's compaction and index updates
        # allocate and free buffers that grow with the rows folded in, and glibc kept them in
        # its arenas, so the resident memory between upkeeps crept up with the table.
        trim_heap()
        self._since_upkeep[name] = (0, 0)
        self._rows_at_upkeep[name] = rows

    @staticmethod
    def _latest_delta_rows(ds: Any) -> dict[str, int]:
        """Per index: the rows its latest delta covers (the one Lance merges new rows into,
        the most recently updated). Read once an upkeep: updating one index changes neither
        the fragments nor another index's deltas."""
        rows = {f.fragment_id: f.metadata.physical_rows for f in ds.get_fragments()}
        out: dict[str, int] = {}
        for desc in ds.describe_indices():
            if desc.segments:
                latest = max(desc.segments, key=lambda seg: seg.dataset_version_at_last_update)
                out[desc.name] = sum(rows.get(f, 0) or 0 for f in latest.fragment_ids)
        return out

    def _update_index(self, ds: Any, index_name: str, latest_rows: int | None) -> None:
        """Fold the rows written since into scalar or full-text index ``index_name``: into its
        latest delta while that covers fewer than ``index_delta_rows`` rows (``latest_rows``,
        None when unknown or deltas are off), else into a new delta of their own (Lance's
        ``num_indices_to_merge`` 1 or 0).

        Why: Lance's default merges the new rows into the index, rewriting it whole, and that
        merge's memory grew with the table: folding the same 100,000 rows into the full-text
        index took +0.16 GB at 379,024 rows and +0.35 GB at 1.1 million; as a delta of their
        own +0.09 and +0.08, and the B-trees' likewise (lab/bench/index_update.py,
        docs/BENCHMARKS.md "Upkeep in bounded memory"). So an index is kept as deltas of about
        ``index_delta_rows`` rows, and an update rewrites one of them at most. A query searches
        every delta and Lance combines their results (full-text scores use the deltas'
        combined statistics: the same scores as one merged index), so results do not change;
        what grows with the number of deltas (rows / ``index_delta_rows``) is a query's cost.
        0: always merge (Lance's default)."""
        merge_into_latest = latest_rows is None or latest_rows < self.index_delta_rows
        ds.optimize.optimize_indices(
            index_names=[index_name], num_indices_to_merge=1 if merge_into_latest else 0
        )

    def maintain(self, collection: str) -> dict[str, Any]:
        spec = self.get_spec(collection)
        done: dict[str, Any] = {}
        with self._lock:
            t = self._table(collection)
            n = t.count_rows()
            done["rows"] = n
            made = self._ensure_scalar_indexes(spec)
            if made:
                done["scalar_indexes"] = made
            before = t.version
            self._optimize(collection)
            t = self._table(collection)  # (the upkeep opened a new connection)
            done["optimized"] = True
            done["versions_before"] = before
            done["versions_kept"] = len(t.list_versions())
        return done

    def build_indexes(self, collection: str) -> dict[str, Any]:
        spec = self.get_spec(collection)
        done: dict[str, Any] = {}
        with self._lock:
            t = self._table(collection)
            made = self._ensure_scalar_indexes(spec)
            if made:
                done["scalar_indexes"] = made
            had_index = self._has_vector_index(t)
            started = time.perf_counter()
            built = self._index_if_due(spec)
            if built:
                done["vector_index"] = f"{built} {'retrained' if had_index else 'built'}"
            elif had_index and self.index_status(collection)["unindexed_rows"] == 0:
                done["vector_index"] = "up to date"
            elif had_index and self.index_segment_rows:
                # Incremental: new rows get segments of their own, nothing is retrained.
                made = self._index_segments(spec)
                done["vector_index"] = f"updated ({made} segments built)"
            elif had_index:
                # Incremental: new rows are indexed as a delta, without retraining.
                self._optimize(collection)
                done["vector_index"] = "updated"
            else:
                done["vector_index"] = (
                    f"none below {self.index_threshold} rows (queries search exactly)"
                )
            done["vector_index_s"] = round(time.perf_counter() - started, 3)
        if spec.text_fields:
            started = time.perf_counter()
            done.update(self.ensure_text_index(collection))
            done["text_index_s"] = round(time.perf_counter() - started, 3)
        # The scalar indexes too: an upkeep cut short may have left rows outside them.
        done.update(self.complete_indexes(collection))
        done.update(self.index_status(collection))
        return done

    def index_status(self, collection: str) -> dict[str, Any]:
        self.get_spec(collection)
        t = self._table(collection)
        rows = int(t.count_rows())
        ann = self._ann_index(t)
        if ann is None:
            return {"rows": rows, "ann_index": None, "indexed_rows": 0, "unindexed_rows": rows}
        stats = t.index_stats(ann.name)
        unindexed = int(getattr(stats, "num_unindexed_rows", 0) or 0)
        return {
            "rows": rows,
            "ann_index": str(getattr(stats, "index_type", self.index_type)),
            "indexed_rows": int(getattr(stats, "num_indexed_rows", 0) or 0),
            "unindexed_rows": unindexed,
            "index_segments": self._segment_count(stats),
        }

    # ------------------------------------------------------------------ reads

    def _select(self, spec: CollectionSpec, fields: Sequence[str] | None) -> list[str]:
        if fields is None:
            return ["id", *spec.fields, _EXTRA]
        cols = ["id"] + [f for f in fields if f in spec.fields and f != "id"]
        if any(f not in spec.fields and f != "id" for f in fields):
            cols.append(_EXTRA)
        return cols

    def _rows(
        self, spec: CollectionSpec, tbl: pa.Table, fields: Sequence[str] | None
    ) -> list[Record]:
        data = tbl.to_pydict()
        n = tbl.num_rows
        out = []
        for i in range(n):
            payload = {f: data[f][i] for f in spec.fields if f in data}
            extra = extras_from_json(data[_EXTRA][i]) if _EXTRA in data else None
            vec = data["vector"][i] if "vector" in data else None
            out.append(output_record(spec, data["id"][i], payload, extra, fields, vector=vec))
        return out

    def get(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[Record]:
        spec = self.get_spec(collection)
        id_list = check_ids(ids, collection)
        cols = self._select(spec, None) + (["vector"] if with_vectors else [])
        out: list[Record] = []
        t = self._table(collection)
        for i in range(0, len(id_list), _ID_CHUNK):
            chunk = tuple(id_list[i : i + _ID_CHUNK])
            clause = to_lance(In("id", chunk, False, "str"))
            tbl = t.search().where(clause).select(cols).limit(len(chunk)).to_arrow()
            out.extend(self._rows(spec, tbl, None))
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
        clause = to_lance(node)
        t = self._table(collection)
        q = t.search()
        if clause is not None:
            q = q.where(clause)
        # Record batches, not one table: a scan of millions of records (the inventory of a
        # large source) holds one batch of them as Python objects at a time.
        reader = q.select(self._select(spec, fields)).limit(None).to_batches(_SCAN_BATCH)
        for batch in reader:
            yield from self._rows(spec, pa.Table.from_batches([batch]), fields)

    def count(self, collection: str, *, where: Filter | None = None) -> int:
        spec = self.get_spec(collection)
        node = parse_filter(where, spec.fields)
        if isinstance(node, Const) and not node.value:
            return 0
        return int(self._table(collection).count_rows(to_lance(node)))

    def query(
        self,
        collection: str,
        vector: Sequence[float],
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        return self._vector_hits(collection, vector, where, top_k, include_quarantined, False)

    def query_refs(
        self,
        collection: str,
        vector: Sequence[float],
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        return self._vector_hits(collection, vector, where, top_k, include_quarantined, True)

    def _vector_hits(
        self,
        collection: str,
        vector: Sequence[float],
        where: Filter | None,
        top_k: int,
        include_quarantined: bool,
        refs: bool,
    ) -> list[Hit]:
        spec = self.get_spec(collection)
        plan = query_plan(spec, vector, where, top_k, include_quarantined)
        if plan is None:
            return []
        q, node = plan
        t = self._table(collection)
        tbl = self._unindexed_search(t, spec, q, where, top_k, include_quarantined, refs)
        if tbl is None:
            tbl = self._builder_search(t, spec, q, to_lance(node), top_k, refs)
        rows = self._refs(tbl) if refs else self._rows(spec, tbl, None)
        hits = []
        for rec, d in zip(rows, tbl["_distance"].to_pylist(), strict=True):
            canon = _canonical(spec.metric, float(d))
            hits.append(
                Hit(id=rec["id"], score=score(spec.metric, canon), raw_score=float(d), record=rec)
            )
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits

    def _unindexed_search(
        self,
        t: Any,
        spec: CollectionSpec,
        q: np.ndarray,
        where: Filter | None,
        top_k: int,
        include_quarantined: bool,
        refs: bool,
    ) -> pa.Table | None:
        """The exact search of a table without an ANN index (every collection below
        `index_threshold`), in one trip to LanceDB's event loop; None when the table has an
        ANN index (or LanceDB's async table is not at hand), for `_builder_search`.

        Why: a warm query spends most of its store time on fixed costs, not on distances. The
        sync query builder makes one trip to LanceDB's background loop per step (the index
        listing, the schema twice, the query), each checking for a newer table version; here
        they are one coroutine.

        The quarantine exclusion is checked on the result instead of prefiltered (the
        prefilter on `quarantined` cost about 1 to 4 ms more): the search runs with the caller's
        filter only, for `_overfetch` more than top_k, and the quarantined records are dropped
        from its result. That is exact: when at least top_k of the records it returns are not
        quarantined (or it returned every record the filter admits), the first top_k of them
        are the top_k of the admitted records minus the quarantined ones. Only when more than
        the extra ones are quarantined does it run again with the exclusion. Why the extra:
        a collection holds a few quarantined records near many queries (SciFact with the
        planted injections: 91 of 300 claims had one in the vector list 100 deep), and a
        second search cost as much as the first. (An ANN search with a filter is not the
        same search as one without, so indexed tables keep the prefilter.)"""
        handle = _async_table(t)
        if handle is None:
            return None
        user = parse_filter(where, spec.fields)
        full = to_lance(with_quarantine(user, spec.fields, include_quarantined))
        first = to_lance(user)
        checked = first != full  # the exclusion applies: check the first result
        if refs:
            cols = ["id", "_distance"] + ([QUARANTINE_FIELD] if checked else [])
        else:
            cols = [*self._select(spec, None), "_distance"]  # every field, quarantined too

        async def search(clause: str | None, limit: int) -> pa.Table:
            s = handle.vector_search(q).column("vector").distance_type(spec.metric)
            s = s.bypass_vector_index()
            if clause is not None:
                s = s.where(clause)  # a prefilter, as in `_search`
            if refs:
                s = s.with_row_id()
            return await s.select(cols).limit(limit).to_arrow()

        async def run() -> pa.Table | None:
            if any("vector" in ix.columns for ix in await handle.list_indices()):
                return None
            if not checked:
                return await search(first, top_k)
            limit = top_k + _overfetch(top_k)
            tbl = await search(first, limit)
            flags = tbl[QUARANTINE_FIELD].to_pylist()
            if True not in flags[:top_k]:
                return tbl.slice(0, top_k)
            kept = [i for i, f in enumerate(flags) if f is not True]
            if len(kept) >= top_k or tbl.num_rows < limit:  # enough, or every admitted one
                return tbl.take(pa.array(kept[:top_k], pa.int64()))
            return await search(full, top_k)

        from lancedb.background_loop import LOOP

        return LOOP.run(run())  # type: ignore[no-any-return]

    def _builder_search(
        self,
        t: Any,
        spec: CollectionSpec,
        q: np.ndarray,
        clause: str | None,
        top_k: int,
        refs: bool,
    ) -> pa.Table:
        """A search through LanceDB's sync query builder, prefiltered by `clause`: ANN on an
        indexed table (exact when that finds fewer than k rows the filter admits)."""
        indexed = self._has_vector_index(t)
        tbl = self._search(t, spec, q, clause, top_k, exact=not indexed, refs=refs)
        if indexed and tbl.num_rows < top_k and t.count_rows(clause) > tbl.num_rows:
            # The ANN index found fewer than k rows the filter admits: search exactly.
            tbl = self._search(t, spec, q, clause, top_k, exact=True, refs=refs)
        return tbl

    def text_query(
        self,
        collection: str,
        text: str,
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        return self._text_hits(collection, text, where, top_k, include_quarantined, False)

    def text_query_refs(
        self,
        collection: str,
        text: str,
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        return self._text_hits(collection, text, where, top_k, include_quarantined, True)

    def _text_hits(
        self,
        collection: str,
        text: str,
        where: Filter | None,
        top_k: int,
        include_quarantined: bool,
        refs: bool,
    ) -> list[Hit]:
        spec = self.get_spec(collection)
        node = text_plan(spec, text, where, top_k, include_quarantined)
        if node is None:
            return []
        t = self._table(collection)
        clause = to_lance(node)
        cols = ["id", "_score"] if refs else [*self._select(spec, None), "_score"]
        tbl = self._one_trip_text_search(t, text, clause, top_k, cols, refs)
        if tbl is None:
            if self._fts_index(t) is None:
                with self._lock:
                    if not self._ensure_fts_index(spec):
                        return []  # an empty table
            s = t.search(text, query_type="fts", fts_columns=_TEXT)
            if clause is not None:
                s = s.where(clause, prefilter=True)
            if refs:
                s = s.with_row_id(True)
            tbl = s.select(cols).limit(top_k).to_arrow()
        rows = self._refs(tbl) if refs else self._rows(spec, tbl, None)
        hits = [
            Hit(id=rec["id"], score=text_score(float(r)), raw_score=float(r), record=rec)
            for rec, r in zip(rows, tbl["_score"].to_pylist(), strict=True)
        ]
        hits.sort(key=lambda h: (-h.raw_score, h.id))
        return hits

    @staticmethod
    def _one_trip_text_search(
        t: Any, text: str, clause: str | None, top_k: int, cols: list[str], refs: bool
    ) -> pa.Table | None:
        """The full-text search in one trip to LanceDB's loop (as `_unindexed_search`:
        the builder's trips for the index listing, the schema and the query are one); None
        when the table has no full-text index yet (or no async table is at hand): the
        builder path then creates the index first."""
        handle = _async_table(t)
        if handle is None:
            return None

        async def run() -> pa.Table | None:
            if not any(_TEXT in ix.columns for ix in await handle.list_indices()):
                return None
            s = handle.query().nearest_to_text(text, columns=[_TEXT])
            if clause is not None:
                s = s.where(clause)  # a prefilter, as the builder path's
            if refs:
                s = s.with_row_id()
            return await s.select(cols).limit(top_k).to_arrow()

        from lancedb.background_loop import LOOP

        return LOOP.run(run())  # type: ignore[no-any-return]

    @staticmethod
    def _refs(tbl: pa.Table) -> list[Record]:
        """Records of `query_refs` hits: the id and LanceDB's row id, nothing read besides."""
        return [
            {"id": i, _ROW_ID: r}
            for i, r in zip(tbl["id"].to_pylist(), tbl["_rowid"].to_pylist(), strict=True)
        ]

    def fill_records(self, collection: str, hits: Sequence[Hit]) -> list[Hit]:
        """Reads the full records of ref hits by row id (one take); a row id that no longer
        names the same record (the table was compacted or rewritten meanwhile) is read by id
        instead, and a record deleted meanwhile is dropped."""
        from dataclasses import replace

        if not hits:
            return []
        spec = self.get_spec(collection)
        t = self._table(collection)
        row_ids = [h.record.get(_ROW_ID) for h in hits]
        found: dict[str, Record] = {}
        taken = [r for r in row_ids if r is not None]
        if taken:
            cols = self._select(spec, None)
            handle = _async_table(t)
            if handle is not None:  # one trip to LanceDB's loop, as `_unindexed_search`
                from lancedb.background_loop import LOOP

                tbl = LOOP.run(handle.take_row_ids(taken).select(cols).to_arrow())
            else:
                tbl = t.take_row_ids(taken).select(cols).to_arrow()
            found = {r["id"]: r for r in self._rows(spec, tbl, None)}
        missing = [h.id for h in hits if h.id not in found]
        if missing:
            found.update((r["id"], r) for r in self.get(collection, missing))
        return [replace(h, record=found[h.id]) for h in hits if h.id in found]

    def _search(
        self,
        t: Any,
        spec: CollectionSpec,
        q: np.ndarray,
        clause: str | None,
        top_k: int,
        *,
        exact: bool,
        refs: bool = False,
    ) -> pa.Table:
        s = t.search(q, vector_column_name="vector").distance_type(spec.metric)
        if clause is not None:
            s = s.where(clause, prefilter=True)
        if exact:
            s = s.bypass_vector_index()
        else:
            s = s.nprobes(self.nprobes).refine_factor(self.refine_factor)
            if self.index_type.startswith("IVF_HNSW"):
                s = s.ef(max(self.ef, top_k * self.refine_factor))
        if refs:
            return s.with_row_id(True).select(["id", "_distance"]).limit(top_k).to_arrow()
        return s.select([*self._select(spec, None), "_distance"]).limit(top_k).to_arrow()

    # --------------------------------------------------------------- manifest

    def get_manifest(self, collection: str) -> dict[str, Any] | None:
        meta = self._read_meta(check_collection_name(collection))
        if meta is None:
            return None
        return meta.get("manifest")

    def put_manifest(self, collection: str, manifest: dict[str, Any]) -> None:
        with self._lock:
            meta = self._read_meta(check_collection_name(collection))
            if meta is None or not self._db_has(collection):
                raise StoreError(f"collection {collection!r} does not exist in LanceDB")
            meta["manifest"] = json.loads(json.dumps(manifest))
            self._write_meta(collection, meta)

    def close(self) -> None:
        self._tables.clear()
