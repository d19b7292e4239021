"""PostgreSQL + pgvector adapter through psycopg 3.

- One table per collection in the configured schema: ``id text primary key``, ``_vec
  vector(dim)``, one typed column per declared field, ``_extra jsonb`` (undeclared scalars).
- An HNSW index with the metric's operator class (``vector_cosine_ops`` / ``vector_l2_ops`` /
  ``vector_ip_ops``), built by `build_indexes` (its own ingestion step) after the data is
  loaded: building once over a loaded table is far cheaper than growing the graph row by row
  during a large first load. Once it exists PostgreSQL keeps it current on every insert
  (incremental). Without it queries are exact sequential scans. B-tree indexes on the filter
  fields are created with the table.
- Queries run with ``hnsw.iterative_scan = relaxed_order`` (set on the store's session once,
  with ``hnsw.ef_search``, not per query) so a selective filter still yields k rows; results are re-sorted exactly, and if the index still returns fewer than k rows that
  the filter admits, the query is repeated without the index (exact).
- Filters are compiled to ``psycopg.sql`` with ``%s`` parameters: values are never formatted
  into SQL. Identifiers go through ``sql.Identifier``.
- Upserts into an empty table (a first load) are a binary COPY straight into the table; later
  upserts stage rows with binary COPY, then ``INSERT .. ON CONFLICT (id) DO UPDATE``.
- Full-text search (collections with ``text_fields``): a stored generated column ``_tsv =
  to_tsvector(<language>, text fields joined)`` under a GIN index, kept in the row (STORAGE
  MAIN, not TOAST: the leg reads every candidate's ``_tsv``). PostgreSQL recomputes it on
  every insert and update, so the index is always current and never rebuilt. A query is the
  distinct stemmed terms of ``to_tsvector`` on the query (the column's own configuration)
  joined with OR (a sentence-long query would match almost nothing with AND), ranked by
  ``ts_rank`` with length normalisation.
- ``text_idf`` (off by default): each query term's ``ts_rank`` times its BM25 IDF,
  ``ln(1 + (N - n + 0.5) / (n + 0.5))``, n the term's rows as ANALYZE estimates them (below;
  a term not listed gets half the rarest listed frequency, as the planner assumes); never
  analysed: every weight 1. ``ts_rank`` alone has no IDF, so a word in most rows counts as
  much as a rare one: SciFact train text nDCG@10 0.607 -> 0.669, hybrid 0.719 -> 0.729, but
  one ts_rank per term and row costs about twice as much; the weights are constants in the
  ranking statement.
- The full-text leg is bounded (``text_candidates``): the OR of a claim's terms matches most
  of a collection, and ranking every match reads every match's ``_tsv`` (the cost grows with
  the table: 2.4 s at 100k chunks). Instead it takes the query's terms rarest first, by the
  row frequencies ANALYZE keeps for ``_tsv`` (``pg_stats.most_common_elems``; a term not
  listed there is rarer than all listed ones and always taken), for as long as their
  estimated rows fit the budget (and always the rarest term), and ranks only the rows
  (under the filter) that hold one of those, at most ``max(text_candidates, top_k)`` of
  them, with the same rank over all the query's terms. A row holding only common terms
  rarely ranks high; when fewer than top_k rows hold a rare term (a selective filter), rows
  of the other terms fill the list. Before the first ANALYZE (no frequencies) every match is
  ranked; ``text_candidates = 0`` always ranks every match (unbounded).
- A text query is two statements: the collection's spec with the query's terms
  (``to_tsvector``), then one ranking statement whose tsqueries Python builds from them. The term frequencies are read
  once a minute per collection (and again after the store's own ANALYZE), not per query:
  parsing and joining the ~1,000-element statistics array per query was a third of the leg.
- Hybrid search reads both lists as (id, score) only (`query_refs`, `text_query_refs`) and
  the fused top k's records with one statement by id (`fill_records`).
- Writes reach the GIN index through its pending list (fastupdate), which every text query
  reads in full; the index step (`build_indexes`) and `maintain` fold it into the index.
- Text queries run on a second connection (opened on first use), so hybrid search asks for
  the vector and the full-text lists at once (``concurrent_reads``): two server processes.
- Spec and manifest live in ``<schema>._clef_collections``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from clef_pipelines.stores._common import (
    check_collection_name,
    check_ids,
    delete_filter,
    extras_from_json,
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
    Node,
    parse_filter,
    pg_params,
    to_pg,
)
from clef_pipelines.stores.text import text_score

META_TABLE = "_clef_collections"
_VEC = "_vec"
_EXTRA = "_extra"
_TSV = "_tsv"
#: ts_rank normalisation: divide by 1 + log(document length), so long chunks do not win on
#: term counts alone.
_RANK_NORMALISATION = 1
_PG_TYPES = {"str": "text", "int": "bigint", "float": "double precision", "bool": "boolean"}
_OPS: dict[str, tuple[str, str]] = {
    "cosine": ("<=>", "vector_cosine_ops"),
    "l2": ("<->", "vector_l2_ops"),
    "dot": ("<#>", "vector_ip_ops"),
}
_HNSW_MAX_DIM = 2000


class _RefRecord(dict[str, Any]):
    """The record of a ref hit, ``{"id": ...}`` to everyone else, carrying the spec its list
    was read with, so that `fill_records` reads the full records without reading the spec
    again (one round trip less on hybrid search's critical path)."""

    __slots__ = ("spec",)

    def __init__(self, rid: str, spec: CollectionSpec) -> None:
        super().__init__(id=rid)
        self.spec = spec


#: How long a store reuses a collection's term statistics (ANALYZE's lexeme frequencies of
#: ``_tsv``) before reading them again. They change only when ANALYZE runs (the index step,
#: `maintain`, autovacuum); reading them per query cost 1-3 ms (the ~1,000-element
#: statistics array parsed and joined), a third of the text leg. A stale copy only moves the
#: line between the terms ranked and the terms left out; the store's own ANALYZE drops it.
_TERM_STATS_TTL_S = 60.0
#: The table's row estimate and ANALYZE's lexeme frequencies of ``_tsv`` (most_common_elems
#: with their row fractions); both empty / 0 before the first ANALYZE.
_TERM_STATS_SQL = (
    "SELECT c._clef_n, s._clef_e, s._clef_f FROM (SELECT greatest(reltuples, 0) AS _clef_n "
    "FROM pg_class WHERE oid = %(regclass)s::regclass) c LEFT JOIN LATERAL (SELECT "
    "most_common_elems::text::text[] AS _clef_e, most_common_elem_freqs AS _clef_f "
    "FROM pg_stats WHERE schemaname = %(schema)s AND tablename = %(table)s "
    "AND attname = %(tsv)s) s ON true"
)
#: A collection's spec and the query's distinct lexemes as the column's own text search
#: configuration makes them (the collection's language; "english" for a spec written before
#: the language was): the full-text leg's first statement, one round trip.
_SPEC_AND_TERMS_SQL = (
    "SELECT spec, tsvector_to_array(to_tsvector(coalesce(spec->>'text_language', 'english')"
    "::regconfig, %(text)s)) FROM {} WHERE name = %(name)s"
)


@dataclass(frozen=True)
class TermStats:
    """A collection's ``_tsv`` term statistics: each listed lexeme's fraction of rows, and the
    table's rows (ANALYZE's estimates); ``freqs`` empty before the first ANALYZE."""

    freqs: dict[str, float]
    rows: float
    read_at: float


def _tsquery_lexeme(term: str) -> str:
    """A lexeme quoted for a ``tsquery`` literal (backslash and quote escaped)."""
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def rare_terms(terms: Sequence[str], stats: TermStats, budget: int) -> list[str]:
    """The terms whose rows the bounded text leg ranks: rarest first (a term ANALYZE did not
    list is rarer than every listed one), while their estimated rows together fit ``budget``,
    and always the rarest; every term before the first ANALYZE or with no budget (0)."""
    if not stats.freqs or budget <= 0:
        return list(terms)
    taken: list[str] = []
    upto = 0.0
    for n, term in enumerate(sorted(terms, key=lambda t: (stats.freqs.get(t, 0.0), t))):
        upto += stats.freqs.get(term, 0.0) * stats.rows
        if n == 0 or upto <= budget:
            taken.append(term)
    return taken


def idf_weights(terms: Sequence[str], stats: TermStats) -> list[tuple[str, float]]:
    """Each term's BM25 IDF, ``ln(1 + (N - n + 0.5) / (n + 0.5))``, n the term's rows as
    ANALYZE estimates them (a term not listed: half the rarest listed frequency, as the
    planner assumes); every weight 1 before the first ANALYZE."""
    if not stats.freqs:
        return [(t, 1.0) for t in terms]
    unlisted = min(stats.freqs.values()) / 2
    out = []
    for t in terms:
        n = stats.freqs.get(t, unlisted) * stats.rows
        out.append((t, math.log(1.0 + (stats.rows - n + 0.5) / (n + 0.5))))
    return out


def _canonical(metric: Metric, distance: float) -> float:
    """pgvector's operator value -> cosine distance, L2 distance, or inner product."""
    return -distance if metric == "dot" else distance  # <#> is the negative inner product


def _quote_ident(name: str) -> str:
    """An identifier quoted for a ``regclass`` literal (PostgreSQL's quote_ident rule)."""
    return '"' + name.replace('"', '""') + '"'


def _ix(name: str, what: str) -> str:
    return "clef_ix_" + hashlib.sha1(f"{name}\x1f{what}".encode()).hexdigest()[:20]


class PgVectorStore(VectorStore):
    kind = "pgvector"
    #: Text queries use their own connection, so they overlap a vector query (hybrid search).
    concurrent_reads = True

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "public",
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 64,
        ef_search: int = 100,
        maintenance_work_mem: str = "512MB",
        text_candidates: int = 500,
        text_idf: bool = False,
    ) -> None:
        import psycopg
        from pgvector.psycopg import register_vector

        try:
            self._conn = psycopg.connect(dsn, autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL: {exc}") from exc
        self._dsn = dsn
        #: The full-text leg's own connection and lock, opened on first use.
        self._text_conn: Any = None
        self._text_lock = threading.Lock()
        #: Rows a full-text query ranks at most (at least top_k); 0: every match.
        self.text_candidates = text_candidates
        #: Weigh each query term's ts_rank by its IDF (better ranking, about 2x the cost).
        self.text_idf = text_idf
        #: Term statistics per collection (`_stats_for`).
        self._term_stats: dict[str, TermStats] = {}
        self.schema = schema
        self.hnsw_m = hnsw_m
        self.hnsw_ef_construction = hnsw_ef_construction
        self.ef_search = ef_search
        self.maintenance_work_mem = maintenance_work_mem
        self._lock = threading.RLock()
        from psycopg import sql

        with self._conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
            if cur.fetchone() is None:
                try:
                    cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
                except psycopg.Error as exc:
                    raise StoreError(
                        f"the pgvector extension is not installed and cannot be created: {exc}"
                    ) from exc
            cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            cur.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, spec jsonb NOT NULL, "
                    "manifest jsonb)"
                ).format(self._t(META_TABLE))
            )
            cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            row = cur.fetchone()
            version = tuple(int(p) for p in str(row[0]).split(".")[:2]) if row else (0, 0)
        # hnsw.iterative_scan exists from pgvector 0.8; older servers fall back to exact search
        # when the index returns fewer than k rows.
        self.iterative_scan = version >= (0, 8)
        #: hnsw.ef_search as last set on the session (`_hnsw_settings`).
        self._session_ef_search: int | None = None
        #: The full-text leg's first statement, composed once (it depends on the schema only).
        self._spec_and_terms_sql = sql.SQL(_SPEC_AND_TERMS_SQL).format(self._t(META_TABLE))
        register_vector(self._conn)

    def _t(self, name: str) -> Any:
        from psycopg import sql

        return sql.Identifier(self.schema, name)

    def _regclass(self, name: str) -> str:
        """``schema.name`` quoted as a ``::regclass`` literal (a table or index of ours)."""
        return f"{_quote_ident(self.schema)}.{_quote_ident(name)}"

    # ------------------------------------------------------------------ meta

    def _read_meta(self, name: str) -> tuple[dict[str, Any], Any] | None:
        """The spec and manifest of a collection. (The full-text leg reads the spec with the
        query's terms, on its own connection: `_SPEC_AND_TERMS_SQL`.)"""
        from psycopg import sql

        with self._lock, self._conn.cursor() as cur:
            cur.execute(
                sql.SQL("SELECT spec, manifest FROM {} WHERE name = %s").format(
                    self._t(META_TABLE)
                ),
                (name,),
            )
            row = cur.fetchone()
        return None if row is None else (row[0], row[1])

    def get_spec(self, name: str) -> CollectionSpec:
        meta = self._read_meta(check_collection_name(name))
        if meta is None:
            raise StoreError(f"collection {name!r} does not exist in PostgreSQL")
        return spec_from_json(meta[0])

    # ------------------------------------------------------------ collections

    def _index_ddl(self, spec: CollectionSpec, fields: Sequence[str]) -> list[Any]:
        from psycopg import sql

        out = []
        for f in fields:
            out.append(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
                    sql.Identifier(_ix(spec.name, f)), self._t(spec.name), sql.Identifier(f)
                )
            )
        return out

    def _text_ddl(self, spec: CollectionSpec) -> list[Any]:
        """The generated tsvector column (kept in the row: `_tsv_storage_ddl`) and its GIN
        index (an ALTER computes the column for every row already there)."""
        from psycopg import sql

        joined = sql.SQL(" || ' ' || ").join(
            sql.SQL("coalesce({}, '')").format(sql.Identifier(f)) for f in spec.text_fields
        )
        return [
            sql.SQL(
                "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} tsvector GENERATED ALWAYS AS "
                "(to_tsvector({}::regconfig, {})) STORED"
            ).format(
                self._t(spec.name),
                sql.Identifier(_TSV),
                sql.Literal(spec.text_language),
                joined,
            ),
            self._tsv_storage_ddl(spec),
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin ({})").format(
                sql.Identifier(_ix(spec.name, _TSV)), self._t(spec.name), sql.Identifier(_TSV)
            ),
        ]

    def _tsv_storage_ddl(self, spec: CollectionSpec) -> Any:
        """``_tsv`` stored in the row (STORAGE MAIN: compressed in place if need be, moved
        out of line only when the row would not fit a page), not in the TOAST table. The
        text leg reads the ``_tsv`` of every candidate row (up to ``text_candidates``) to
        rank it; out of line, each read was a TOAST index probe and a chunk fetch: 2-4x the
        cost of the rank itself. The other columns move out instead, and only the top k
        rows' columns are ever read. Applies to rows written from then on."""
        from psycopg import sql

        return sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET STORAGE MAIN").format(
            self._t(spec.name), sql.Identifier(_TSV)
        )

    def ensure_collection(self, spec: CollectionSpec) -> None:
        from psycopg import sql
        from psycopg.types.json import Jsonb

        spec = normalise_spec(spec)
        with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("clef:" + spec.name,))
            cur.execute(
                sql.SQL("SELECT spec FROM {} WHERE name = %s FOR UPDATE").format(
                    self._t(META_TABLE)
                ),
                (spec.name,),
            )
            row = cur.fetchone()
            if row is not None:
                old = spec_from_json(row[0])
                new = merge_specs(old, spec)
                if new == old:
                    return
                for f, t in new.fields.items():
                    if f not in old.fields:
                        cur.execute(
                            sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                                self._t(spec.name), sql.Identifier(f), sql.SQL(_PG_TYPES[t])
                            )
                        )
                for ddl in self._index_ddl(
                    new, [f for f in new.filter_fields if f not in old.filter_fields]
                ):
                    cur.execute(ddl)
                if new.text_fields and not old.text_fields:
                    for ddl in self._text_ddl(new):
                        cur.execute(ddl)
                cur.execute(
                    sql.SQL("UPDATE {} SET spec = %s WHERE name = %s").format(self._t(META_TABLE)),
                    (Jsonb(spec_to_json(new)), spec.name),
                )
                return
            cols = [
                sql.SQL("id text PRIMARY KEY"),
                sql.SQL("{} vector({})").format(sql.Identifier(_VEC), sql.Literal(spec.dimension)),
            ]
            cols += [
                sql.SQL("{} {}").format(sql.Identifier(f), sql.SQL(_PG_TYPES[t]))
                for f, t in spec.fields.items()
            ]
            cols.append(sql.SQL("{} jsonb").format(sql.Identifier(_EXTRA)))
            cur.execute(
                sql.SQL("CREATE TABLE {} ({})").format(self._t(spec.name), sql.SQL(", ").join(cols))
            )
            for ddl in self._index_ddl(spec, spec.filter_fields):
                cur.execute(ddl)
            if spec.text_fields:
                for ddl in self._text_ddl(spec):
                    cur.execute(ddl)
            cur.execute(
                sql.SQL("INSERT INTO {} (name, spec, manifest) VALUES (%s, %s, NULL)").format(
                    self._t(META_TABLE)
                ),
                (spec.name, Jsonb(spec_to_json(spec))),
            )

    def has_collection(self, name: str) -> bool:
        return self._read_meta(name) is not None

    def list_collections(self) -> list[str]:
        from psycopg import sql

        with self._lock, self._conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT name FROM {} ORDER BY name").format(self._t(META_TABLE)))
            return [r[0] for r in cur.fetchall()]

    def drop(self, collection: str) -> None:
        from psycopg import sql

        check_collection_name(collection)
        with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._t(collection)))
            cur.execute(
                sql.SQL("DELETE FROM {} WHERE name = %s").format(self._t(META_TABLE)),
                (collection,),
            )
        self._term_stats.pop(collection, None)

    # ----------------------------------------------------------------- writes

    def upsert(self, collection: str, records: Sequence[Record]) -> int:
        from psycopg import sql
        from psycopg.types.json import Jsonb

        spec = self.get_spec(collection)
        prep = prepare_records(spec, records)
        n = len(prep)
        if not n:
            return 0
        fields = list(spec.fields)
        col_names = ["id", _VEC, *fields, _EXTRA]
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in col_names)
        updates = sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in col_names[1:]
        )
        types = ["text", "vector", *[_PG_TYPES[spec.fields[f]] for f in fields], "jsonb"]
        with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT NOT EXISTS (SELECT 1 FROM {})").format(self._t(collection)))
            row = cur.fetchone()
            # Bulk path: nothing to conflict with (ids in a batch are unique), so rows are
            # copied straight into the table.
            direct = bool(row and row[0])
            if not direct:
                cur.execute(
                    sql.SQL(
                        "CREATE TEMP TABLE _clef_stage (LIKE {} INCLUDING DEFAULTS) ON COMMIT DROP"
                    ).format(self._t(collection))
                )
            target = self._t(collection) if direct else sql.Identifier("_clef_stage")
            with cur.copy(
                sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(target, cols)
            ) as copy:
                copy.set_types(types)
                for i, rid in enumerate(prep.ids):
                    payload = prep.payloads[i]
                    extra = prep.extras[i]
                    copy.write_row(
                        [
                            rid,
                            prep.vectors[i],
                            *[payload[f] for f in fields],
                            Jsonb(extra) if extra else None,
                        ]
                    )
            if not direct:
                cur.execute(
                    sql.SQL(
                        "INSERT INTO {t} ({cols}) SELECT {cols} FROM _clef_stage "
                        "ON CONFLICT (id) DO UPDATE SET {updates}"
                    ).format(t=self._t(collection), cols=cols, updates=updates)
                )
        return n

    def delete(
        self, collection: str, *, ids: Sequence[str] | None = None, where: Filter | None = None
    ) -> int:
        from psycopg import sql

        spec = self.get_spec(collection)
        node = delete_filter(collection, spec.fields, ids, where)
        if node is None:
            return 0
        with self._lock, self._conn.cursor() as cur:
            cur.execute(
                sql.SQL("DELETE FROM {} WHERE {}").format(self._t(collection), to_pg(node)),
                pg_params(node),
            )
            return int(cur.rowcount)

    # ------------------------------------------------------------------ reads

    def _cols(self, spec: CollectionSpec, fields: Sequence[str] | None) -> list[str]:
        if fields is None:
            return ["id", *spec.fields, _EXTRA]
        cols = ["id"] + [f for f in fields if f in spec.fields and f != "id"]
        if any(f not in spec.fields and f != "id" for f in fields):
            cols.append(_EXTRA)
        return cols

    def _to_record(
        self,
        spec: CollectionSpec,
        cols: list[str],
        row: Sequence[Any],
        fields: Sequence[str] | None,
        vector: Any = None,
    ) -> Record:
        data = dict(zip(cols, row, strict=False))
        extra = data.pop(_EXTRA, None)
        if isinstance(extra, str):
            extra = extras_from_json(extra)
        if vector is not None and hasattr(vector, "to_numpy"):
            vector = vector.to_numpy()
        return output_record(spec, data["id"], data, extra, fields, vector=vector)

    def get(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[Record]:
        spec = self.get_spec(collection)
        id_list = check_ids(ids, collection)
        if not id_list:
            return []
        return self._read_by_id(spec, id_list, with_vectors=with_vectors)

    def _read_by_id(
        self, spec: CollectionSpec, ids: list[str], *, with_vectors: bool
    ) -> list[Record]:
        from psycopg import sql

        cols = self._cols(spec, None)
        sel = [*cols, _VEC] if with_vectors else cols
        with self._lock, self._conn.cursor() as cur:
            cur.execute(
                sql.SQL("SELECT {} FROM {} WHERE id = ANY(CAST(%s AS text[]))").format(
                    sql.SQL(", ").join(sql.Identifier(c) for c in sel), self._t(spec.name)
                ),
                (ids,),
            )
            rows = cur.fetchall()
        return [self._to_record(spec, cols, r, None, r[-1] if with_vectors else None) for r in rows]

    def scan(
        self,
        collection: str,
        *,
        where: Filter | None = None,
        fields: Sequence[str] | None = None,
    ) -> Iterator[Record]:
        from psycopg import sql

        spec = self.get_spec(collection)
        node = parse_filter(where, spec.fields)
        if isinstance(node, Const) and not node.value:
            return
        cols = self._cols(spec, fields)
        with self._lock, self._conn.cursor() as cur:
            cur.execute(
                sql.SQL("SELECT {} FROM {} WHERE {}").format(
                    sql.SQL(", ").join(sql.Identifier(c) for c in cols),
                    self._t(collection),
                    to_pg(node),
                ),
                pg_params(node),
            )
            rows = cur.fetchall()
        for r in rows:
            yield self._to_record(spec, cols, r, fields)

    def count(self, collection: str, *, where: Filter | None = None) -> int:
        spec = self.get_spec(collection)
        node = parse_filter(where, spec.fields)
        return self._count(spec, node)

    def _count(self, spec: CollectionSpec, node: Node) -> int:
        from psycopg import sql

        if isinstance(node, Const) and not node.value:
            return 0
        with self._lock, self._conn.cursor() as cur:
            cur.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE {}").format(self._t(spec.name), to_pg(node)),
                pg_params(node),
            )
            row = cur.fetchone()
        return int(row[0]) if row else 0

    def query(
        self,
        collection: str,
        vector: Sequence[float],
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        return self._vector_hits(collection, vector, where, top_k, include_quarantined, refs=False)

    def query_refs(
        self,
        collection: str,
        vector: Sequence[float],
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        """`query` with ids and distances only: no column is read (`fill_records`)."""
        return self._vector_hits(collection, vector, where, top_k, include_quarantined, refs=True)

    def _vector_hits(
        self,
        collection: str,
        vector: Sequence[float],
        where: Filter | None,
        top_k: int,
        include_quarantined: bool,
        *,
        refs: bool,
    ) -> list[Hit]:
        spec = self.get_spec(collection)
        plan = query_plan(spec, vector, where, top_k, include_quarantined)
        if plan is None:
            return []
        q, node = plan
        cols = ["id"] if refs else self._cols(spec, None)
        rows = self._search(spec, cols, q, node, top_k, exact=False)
        if len(rows) < top_k and self._count(spec, node) > len(rows):
            rows = self._search(spec, cols, q, node, top_k, exact=True)
        hits = []
        for r in rows:
            raw = float(r[-1])
            canon = _canonical(spec.metric, raw)
            hits.append(
                Hit(
                    id=r[0],
                    score=score(spec.metric, canon),
                    raw_score=raw,
                    record=_RefRecord(r[0], spec)
                    if refs
                    else self._to_record(spec, cols, r[:-1], None),
                )
            )
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits

    def fill_records(self, collection: str, hits: Sequence[Hit]) -> list[Hit]:
        """The full records of ref hits, read by id in one statement; a hit whose record was
        removed meanwhile is dropped, one rewritten meanwhile comes back as it is now."""
        from dataclasses import replace

        if not hits:
            return []
        # Hits from this store's own lists of this collection carry the spec they were read
        # with, and ids that need no check.
        spec = next(
            (
                h.record.spec
                for h in hits
                if isinstance(h.record, _RefRecord) and h.record.spec.name == collection
            ),
            None,
        )
        if spec is None:
            records = self.get(collection, [h.id for h in hits])
        else:
            records = self._read_by_id(spec, [h.id for h in hits], with_vectors=False)
        found = {r["id"]: r for r in records}
        return [replace(h, record=found[h.id]) for h in hits if h.id in found]

    def text_query(
        self,
        collection: str,
        text: str,
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        return self._text_hits(collection, text, where, top_k, include_quarantined, refs=False)

    def text_query_refs(
        self,
        collection: str,
        text: str,
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        """`text_query` with ids and ranks only: no column is read (`fill_records`)."""
        return self._text_hits(collection, text, where, top_k, include_quarantined, refs=True)

    def _text_hits(
        self,
        collection: str,
        text: str,
        where: Filter | None,
        top_k: int,
        include_quarantined: bool,
        *,
        refs: bool,
    ) -> list[Hit]:
        name = check_collection_name(collection)
        with self._text_lock:
            conn = self._text_connection()
            with conn.cursor() as cur:
                cur.execute(
                    self._spec_and_terms_sql,
                    {"name": name, "text": text if isinstance(text, str) else ""},
                )
                row = cur.fetchone()
            if row is None:
                raise StoreError(f"collection {name!r} does not exist in PostgreSQL")
            spec = spec_from_json(row[0])
            node = text_plan(spec, text, where, top_k, include_quarantined)
            if node is None:
                return []
            cols = self._cols(spec, None)
            terms = sorted(set(row[1])) if row[1] else []
            if not terms:
                return []  # stop words only: nothing matches
            stats = self._stats_for(spec)
            rare = rare_terms(terms, stats, self.text_candidates)
            weights = idf_weights(terms, stats) if self.text_idf else None
            stmt = self._text_sql(
                spec, cols, node, weights, top_up=len(rare) < len(terms), refs=refs
            )
            params: dict[str, Any] = {f"_clef_w{i}": v for i, v in enumerate(pg_params(node))}
            params.update(
                q=" | ".join(_tsquery_lexeme(t) for t in terms),
                rare=" | ".join(_tsquery_lexeme(t) for t in rare),
                k=top_k,
                # Before the first ANALYZE (no frequencies) or unbounded: every match ranked.
                limit=max(self.text_candidates, top_k)
                if self.text_candidates > 0 and stats.freqs
                else None,
                budget=max(self.text_candidates, top_k),
            )
            with conn.cursor() as cur:
                cur.execute(stmt, params)
                rows = list(cur.fetchall())
        return [
            Hit(
                id=r[0],
                score=text_score(float(r[-1])),
                raw_score=float(r[-1]),
                record=_RefRecord(r[0], spec)
                if refs
                else self._to_record(spec, cols, r[:-1], None),
            )
            for r in rows
        ]

    def _text_connection(self) -> Any:
        """The full-text leg's own connection (the caller holds ``_text_lock``)."""
        import psycopg

        if self._text_conn is None or self._text_conn.closed:
            try:
                self._text_conn = psycopg.connect(self._dsn, autocommit=True)
            except psycopg.Error as exc:
                raise StoreError(f"cannot connect to PostgreSQL: {exc}") from exc
        return self._text_conn

    def _stats_for(self, spec: CollectionSpec) -> TermStats:
        """The collection's term statistics, read at most every ``_TERM_STATS_TTL_S`` (the
        caller holds ``_text_lock``)."""
        now = time.monotonic()
        cached = self._term_stats.get(spec.name)
        if cached is not None and now - cached.read_at < _TERM_STATS_TTL_S:
            return cached
        with self._text_connection().cursor() as cur:
            cur.execute(
                _TERM_STATS_SQL,
                {
                    "regclass": self._regclass(spec.name),
                    "schema": self.schema,
                    "table": spec.name,
                    "tsv": _TSV,
                },
            )
            row = cur.fetchone()
        freqs: dict[str, float] = {}
        rows = 0.0
        if row is not None:
            rows = float(row[0] or 0.0)
            # most_common_elem_freqs holds three more values (min, max, null fraction).
            freqs = dict(zip(row[1] or [], (float(f) for f in row[2] or []), strict=False))
        stats = TermStats(freqs=freqs, rows=rows, read_at=now)
        self._term_stats[spec.name] = stats
        return stats

    def _text_sql(
        self,
        spec: CollectionSpec,
        cols: list[str],
        node: Node,
        weights: list[tuple[str, float]] | None,
        *,
        top_up: bool,
        refs: bool,
    ) -> Any:
        """The ranking statement: rows holding one of the ``rare`` terms (at most ``limit``
        of them; NULL: all), ranked over all the query's terms ``q``; with ``top_up``, when
        fewer than k rows hold a rare term (a selective filter), twice the missing rows
        (within the budget) from the other terms, found by reading rows (through the
        filter's index where it has one) until enough match, never by a GIN bitmap of
        every common term's rows (``ts_match_vq`` is ``@@`` without the index). The top k
        come back as (id, rank), or with every column (``refs`` false, read last through
        the row address)."""
        from psycopg import sql

        # Plain: ts_rank over the OR of the terms. IDF: the sum of idf * ts_rank(_tsv, term),
        # the weights constants.
        if weights is None:
            rank = sql.SQL("ts_rank({}, _clef_q, {})").format(
                sql.Identifier(_TSV), sql.Literal(_RANK_NORMALISATION)
            )
        else:
            rank = sql.SQL(" + ").join(
                sql.SQL("{} * ts_rank({}, {}::tsquery, {})").format(
                    sql.Literal(w),
                    sql.Identifier(_TSV),
                    sql.Literal(_tsquery_lexeme(t)),
                    sql.Literal(_RANK_NORMALISATION),
                )
                for t, w in weights
            )
        parts = {
            "tsv": sql.Identifier(_TSV),
            "t": self._t(spec.name),
            # Named placeholders: the top-up uses the filter again with the same parameters.
            "w": to_pg(node, named="_clef_w"),
            "rank": rank,
        }
        # The tsqueries are parsed once per statement (a materialized one-row CTE), not per
        # row, whatever plan (custom or generic) a prepared statement gets.
        stmt = (
            "WITH _clef_tsq AS MATERIALIZED (SELECT %(q)s::tsquery AS _clef_q, "
            "%(rare)s::tsquery AS _clef_rare), "
            "_clef_hits AS MATERIALIZED ("
            "SELECT ctid AS _clef_tid, id AS _clef_id, {rank} AS _clef_r "
            "FROM {t}, _clef_tsq WHERE {tsv} @@ _clef_rare AND {w} LIMIT %(limit)s), "
        )
        if top_up:
            stmt += (
                "_clef_more AS ("
                "SELECT ctid AS _clef_tid, id AS _clef_id, {rank} AS _clef_r "
                "FROM {t}, _clef_tsq WHERE (SELECT count(*) FROM _clef_hits) < %(k)s "
                "AND ts_match_vq({tsv}, _clef_q) AND NOT ts_match_vq({tsv}, _clef_rare) "
                "AND {w} LIMIT greatest(0, least(%(budget)s - (SELECT count(*) FROM "
                "_clef_hits), 2 * (%(k)s - (SELECT count(*) FROM _clef_hits))))), "
                "_clef_top AS (SELECT * FROM _clef_hits UNION ALL SELECT * FROM _clef_more "
                "ORDER BY _clef_r DESC, _clef_id LIMIT %(k)s) "
            )
        else:
            stmt += (
                "_clef_top AS (SELECT * FROM _clef_hits ORDER BY _clef_r DESC, _clef_id "
                "LIMIT %(k)s) "
            )
        if refs:
            stmt += "SELECT _clef_id, _clef_r FROM _clef_top ORDER BY _clef_r DESC, _clef_id"
        else:
            stmt += (
                "SELECT {cols}, _clef_top._clef_r FROM _clef_top JOIN {t} ON {t}.ctid = "
                "_clef_top._clef_tid ORDER BY _clef_top._clef_r DESC, _clef_top._clef_id"
            )
            parts["cols"] = sql.SQL(", ").join(sql.Identifier(c) for c in cols)
        return sql.SQL(stmt).format(**parts)

    def _search(
        self,
        spec: CollectionSpec,
        cols: list[str],
        q: np.ndarray,
        node: Node,
        top_k: int,
        *,
        exact: bool,
    ) -> list[tuple[Any, ...]]:
        from psycopg import sql

        op = sql.SQL(_OPS[spec.metric][0])
        stmt = sql.SQL(
            "SELECT {cols}, {v} {op} %s AS _d FROM {t} WHERE {w} ORDER BY {v} {op} %s LIMIT %s"
        ).format(
            cols=sql.SQL(", ").join(sql.Identifier(c) for c in cols),
            v=sql.Identifier(_VEC),
            op=op,
            t=self._t(spec.name),
            w=to_pg(node),
        )
        params = [q, *pg_params(node), q, top_k]
        if exact:
            with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
                cur.execute("SET LOCAL enable_indexscan = off")
                cur.execute(stmt, params)
                return list(cur.fetchall())
        with self._lock, self._conn.cursor() as cur:
            self._hnsw_settings(cur, max(self.ef_search, top_k))
            cur.execute(stmt, params)
            return list(cur.fetchall())

    def _hnsw_settings(self, cur: Any, ef_search: int) -> None:
        """The HNSW search settings, set for the session and only when they change (the
        caller holds ``_lock``): as ``SET LOCAL`` in a transaction of their own they cost a
        query four round trips (BEGIN, two SETs, COMMIT), more than the index search itself
        at SciFact size. Only this store's statements run on this connection."""
        from psycopg import sql

        if self._session_ef_search == ef_search:
            return
        stmt = sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(ef_search))
        if self.iterative_scan:
            stmt = sql.SQL("{}; SET hnsw.iterative_scan = relaxed_order").format(stmt)
        cur.execute(stmt)  # no parameters: both statements in one round trip
        self._session_ef_search = ef_search

    # --------------------------------------------------------------- manifest

    def get_manifest(self, collection: str) -> dict[str, Any] | None:
        meta = self._read_meta(check_collection_name(collection))
        return None if meta is None else meta[1]

    def put_manifest(self, collection: str, manifest: dict[str, Any]) -> None:
        from psycopg import sql
        from psycopg.types.json import Jsonb

        check_collection_name(collection)
        data = json.loads(json.dumps(manifest))
        with self._lock, self._conn.cursor() as cur:
            cur.execute(
                sql.SQL("UPDATE {} SET manifest = %s WHERE name = %s").format(self._t(META_TABLE)),
                (Jsonb(data), collection),
            )
            if cur.rowcount == 0:
                raise StoreError(f"collection {collection!r} does not exist in PostgreSQL")

    def maintain(self, collection: str) -> dict[str, Any]:
        from psycopg import sql

        spec = self.get_spec(collection)
        with self._lock, self._conn.cursor() as cur:
            cur.execute(sql.SQL("ANALYZE {}").format(self._t(spec.name)))
        self._term_stats.pop(spec.name, None)  # new term frequencies: read them again
        return {"rows": self.count(collection), "analyzed": True, **self._clean_text_index(spec)}

    def _keep_tsv_in_row(self, spec: CollectionSpec) -> dict[str, Any]:
        """A collection made before ``_tsv`` was kept in the row (`_tsv_storage_ddl`) gets
        it for the rows written from now on (a catalog change: nothing is rewritten)."""
        if not spec.text_fields:
            return {}
        with self._lock, self._conn.cursor() as cur:
            cur.execute(
                "SELECT attstorage FROM pg_attribute WHERE attrelid = %s::regclass "
                "AND attname = %s",
                (self._regclass(spec.name), _TSV),
            )
            row = cur.fetchone()
            if row is None or row[0] == "m":
                return {}
            cur.execute(self._tsv_storage_ddl(spec))
        return {"text_column_storage": "main (rows written from now on)"}

    def _clean_text_index(self, spec: CollectionSpec) -> dict[str, Any]:
        """Fold the GIN index's pending list into the index proper. Writes go to that list
        (GIN's fastupdate) and every text query reads all of it sequentially: after a
        first load of 11k chunks it held 450 pages and made text queries 3-4x slower until
        autovacuum came by. The index step and `maintain` empty it."""
        if not spec.text_fields:
            return {}
        name = self._regclass(_ix(spec.name, _TSV))
        with self._lock, self._conn.cursor() as cur:
            cur.execute("SELECT gin_clean_pending_list(%s::regclass)", (name,))
            row = cur.fetchone()
        return {"text_pending_pages_folded": int(row[0]) if row else 0}

    def _hnsw_index(self, spec: CollectionSpec) -> str | None:
        with self._lock, self._conn.cursor() as cur:
            cur.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s "
                "AND indexdef ILIKE %s",
                (self.schema, spec.name, "%USING hnsw%"),
            )
            row = cur.fetchone()
        return None if row is None else str(row[0])

    def build_indexes(self, collection: str) -> dict[str, Any]:
        from psycopg import sql

        spec = self.get_spec(collection)
        done: dict[str, Any] = {}
        if spec.dimension > _HNSW_MAX_DIM:
            done["vector_index"] = f"none: pgvector's HNSW takes at most {_HNSW_MAX_DIM} dims"
        elif self._hnsw_index(spec) is None:
            with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
                # One build over the loaded table; more memory keeps the graph build in RAM.
                cur.execute(
                    sql.SQL("SET LOCAL maintenance_work_mem = {}").format(
                        sql.Literal(self.maintenance_work_mem)
                    )
                )
                cur.execute(
                    sql.SQL(
                        "CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw ({} {}) "
                        "WITH (m = {}, ef_construction = {})"
                    ).format(
                        sql.Identifier(_ix(spec.name, _VEC)),
                        self._t(spec.name),
                        sql.Identifier(_VEC),
                        sql.SQL(_OPS[spec.metric][1]),
                        sql.Literal(self.hnsw_m),
                        sql.Literal(self.hnsw_ef_construction),
                    )
                )
            done["vector_index"] = "hnsw built"
        else:
            done["vector_index"] = "hnsw up to date (PostgreSQL maintains it on insert)"
        done.update(self._keep_tsv_in_row(spec))
        done.update(self._clean_text_index(spec))
        with self._lock, self._conn.cursor() as cur:
            cur.execute(sql.SQL("ANALYZE {}").format(self._t(spec.name)))
        self._term_stats.pop(spec.name, None)
        done.update(self.index_status(collection))
        return done

    def index_status(self, collection: str) -> dict[str, Any]:
        spec = self.get_spec(collection)
        rows = self.count(collection)
        if self._hnsw_index(spec) is None:
            return {"rows": rows, "ann_index": None, "indexed_rows": 0, "unindexed_rows": rows}
        return {"rows": rows, "ann_index": "hnsw", "indexed_rows": rows, "unindexed_rows": 0}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()
        if self._text_conn is not None:
            with contextlib.suppress(Exception):
                self._text_conn.close()
