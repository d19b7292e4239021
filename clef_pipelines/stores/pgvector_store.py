"""PostgreSQL + pgvector adapter through psycopg 3.

- One table per collection in the configured schema: ``id text primary key``, ``_vec
  vector(dim)``, one typed column per declared field, ``_extra jsonb`` (undeclared scalars).
- An HNSW index with the metric's operator class (``vector_cosine_ops`` / ``vector_l2_ops`` /
  ``vector_ip_ops``), built by `build_indexes` (its own ingestion step) after the data is
  loaded: building once over a loaded table is far cheaper than growing the graph row by row
  during a large first load. Once it exists PostgreSQL keeps it current on every insert
  (incremental). Without it queries are exact sequential scans. B-tree indexes on the filter
  fields are created with the table.
- Queries run with ``hnsw.iterative_scan = relaxed_order`` so a selective filter still yields
  k rows; results are re-sorted exactly, and if the index still returns fewer than k rows that
  the filter admits, the query is repeated without the index (exact).
- Filters are compiled to ``psycopg.sql`` with ``%s`` parameters: values are never formatted
  into SQL. Identifiers go through ``sql.Identifier``.
- Upserts into an empty table (a first load) are a binary COPY straight into the table; later
  upserts stage rows with binary COPY, then ``INSERT .. ON CONFLICT (id) DO UPDATE``.
- Full-text search (collections with ``text_fields``): a stored generated column ``_tsv =
  to_tsvector(<language>, text fields joined)`` under a GIN index. PostgreSQL recomputes it
  on every insert and update, so the index is always current and never rebuilt. A query is
  the stemmed terms of ``plainto_tsquery`` joined with OR (a sentence-long query would match
  almost nothing with AND), ranked by ``ts_rank`` with length normalisation.
- ``text_idf`` (off by default): each query term's ``ts_rank`` times its BM25 IDF,
  ``ln(1 + (N - n + 0.5) / (n + 0.5))``, n the term's rows as ANALYZE estimates them (below;
  a term not listed gets half the rarest listed frequency, as the planner assumes); never
  analysed: every weight 1. ``ts_rank`` alone has no IDF, so a word in most rows counts as
  much as a rare one: SciFact train text nDCG@10 0.607 -> 0.669, hybrid 0.719 -> 0.729, but
  the text query costs about twice as much (one ts_rank per term and row), which breaks
  hybrid's 2x-vector latency at SciFact size. One small statement reads the weights first,
  so the ranking statement holds them as constants (a per-row subquery cost more still).
- The full-text leg is bounded (``text_candidates``): the OR of a claim's terms matches most
  of a collection, and ranking every match reads every match's ``_tsv`` (the cost grows with
  the table: 2.4 s at 100k chunks). Instead one statement takes the query's terms rarest
  first, by the row frequencies ANALYZE keeps for ``_tsv`` (``pg_stats.most_common_elems``;
  a term not listed there is rarer than all listed ones and always taken), for as long as
  their estimated rows fit the budget (and always the rarest term), and ranks only the rows
  (under the filter) that hold one of those, at most ``max(text_candidates, top_k)`` of
  them, with the same rank over all the query's terms as before. A row holding only
  common terms rarely ranks high; when fewer than top_k rows hold a rare term (a selective
  filter), rows of the other terms fill the list. Before the first ANALYZE (no frequencies)
  every match is ranked; ``text_candidates = 0`` always ranks every match (unbounded).
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
import threading
from collections.abc import Iterator, Sequence
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
#: A query's terms (quoted tsquery lexemes) with their BM25 IDF.
TermWeights = list[tuple[str, float]] | None
#: The query's distinct terms (quoted for ::tsquery) with their BM25 IDF from the row
#: frequencies ANALYZE keeps for _tsv (most_common_elems); a term not listed gets half the
#: rarest listed frequency (the planner's assumption). No statistics yet: every weight 1.
_TERM_WEIGHTS_SQL = (
    "WITH _clef_mce AS ("
    "SELECT u._clef_e, u._clef_f FROM pg_stats s, unnest(s.most_common_elems::text::text[], "
    "s.most_common_elem_freqs) AS u(_clef_e, _clef_f) WHERE s.schemaname = %(schema)s "
    "AND s.tablename = %(table)s AND s.attname = %(tsv)s AND u._clef_e IS NOT NULL), "
    "_clef_unlisted AS (SELECT min(_clef_f) / 2 AS _clef_f FROM _clef_mce), "
    "_clef_rows AS (SELECT greatest(reltuples, 0) AS _clef_n FROM pg_class "
    "WHERE oid = %(regclass)s::regclass), "
    "_clef_terms AS (SELECT q._clef_lex, coalesce(m._clef_f, (SELECT _clef_f FROM "
    "_clef_unlisted)) * (SELECT _clef_n FROM _clef_rows) AS _clef_d "
    "FROM unnest(tsvector_to_array(to_tsvector(%(lang)s::regconfig, %(text)s))) "
    "AS q(_clef_lex) LEFT JOIN _clef_mce m ON m._clef_e = q._clef_lex) "
    "SELECT '''' || replace(replace(_clef_lex, '\\', '\\\\'), '''', '''''') || '''', "
    "CASE WHEN _clef_d IS NULL THEN 1.0 ELSE ln(1 + ((SELECT _clef_n FROM _clef_rows) "
    "- _clef_d + 0.5) / (_clef_d + 0.5)) END FROM _clef_terms ORDER BY _clef_lex"
)
_PG_TYPES = {"str": "text", "int": "bigint", "float": "double precision", "bool": "boolean"}
_OPS: dict[str, tuple[str, str]] = {
    "cosine": ("<=>", "vector_cosine_ops"),
    "l2": ("<->", "vector_l2_ops"),
    "dot": ("<#>", "vector_ip_ops"),
}
_HNSW_MAX_DIM = 2000


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
        text_candidates: int = 1000,
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
        register_vector(self._conn)

    def _t(self, name: str) -> Any:
        from psycopg import sql

        return sql.Identifier(self.schema, name)

    # ------------------------------------------------------------------ meta

    def _read_meta(
        self, name: str, *, text_side: bool = False
    ) -> tuple[dict[str, Any], Any] | None:
        """The spec and manifest of a collection; ``text_side``: through the full-text leg's
        connection, so a text query never waits for a vector query's lock."""
        from psycopg import sql

        lock = self._text_lock if text_side else self._lock
        with lock:
            conn = self._text_connection() if text_side else self._conn
            with conn.cursor() as cur:
                cur.execute(
                    sql.SQL("SELECT spec, manifest FROM {} WHERE name = %s").format(
                        self._t(META_TABLE)
                    ),
                    (name,),
                )
                row = cur.fetchone()
        return None if row is None else (row[0], row[1])

    def get_spec(self, name: str, *, text_side: bool = False) -> CollectionSpec:
        meta = self._read_meta(check_collection_name(name), text_side=text_side)
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
        """The generated tsvector column and its GIN index (an ALTER computes it for every
        row already there)."""
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
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin ({})").format(
                sql.Identifier(_ix(spec.name, _TSV)), self._t(spec.name), sql.Identifier(_TSV)
            ),
        ]

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
        from psycopg import sql

        spec = self.get_spec(collection)
        id_list = check_ids(ids, collection)
        if not id_list:
            return []
        cols = self._cols(spec, None)
        sel = [*cols, _VEC] if with_vectors else cols
        with self._lock, self._conn.cursor() as cur:
            cur.execute(
                sql.SQL("SELECT {} FROM {} WHERE id = ANY(CAST(%s AS text[]))").format(
                    sql.SQL(", ").join(sql.Identifier(c) for c in sel), self._t(collection)
                ),
                (id_list,),
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
        spec = self.get_spec(collection)
        plan = query_plan(spec, vector, where, top_k, include_quarantined)
        if plan is None:
            return []
        q, node = plan
        cols = self._cols(spec, None)
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
                    record=self._to_record(spec, cols, r[:-1], None),
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
        spec = self.get_spec(collection, text_side=True)
        node = text_plan(spec, text, where, top_k, include_quarantined)
        if node is None:
            return []
        cols = self._cols(spec, None)
        params: dict[str, Any] = {f"_clef_w{i}": v for i, v in enumerate(pg_params(node))}
        params.update(text=text, k=top_k)
        with self._text_lock:
            # With IDF, two statements: the terms' IDF first, so the ranking one holds them as
            # constants.
            weights = self._term_weights(spec, text) if self.text_idf else None
            if self.text_candidates > 0:
                stmt = self._bounded_text_sql(spec, cols, node, weights)
                params.update(
                    budget=max(self.text_candidates, top_k), schema=self.schema, table=spec.name
                )
            else:
                stmt = self._full_text_sql(spec, cols, node, weights)
            conn = self._text_connection()
            with conn.cursor() as cur:
                cur.execute(stmt, params)
                rows = list(cur.fetchall())
        return [
            Hit(
                id=r[0],
                score=text_score(float(r[-1])),
                raw_score=float(r[-1]),
                record=self._to_record(spec, cols, r[:-1], None),
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

    def _term_weights(self, spec: CollectionSpec, text: str) -> TermWeights:
        """The query's distinct terms, each quoted for ``::tsquery``, with its BM25 IDF from
        ANALYZE's row frequencies of ``_tsv``; every weight 1 before the first ANALYZE. The
        caller holds ``_text_lock``."""
        with self._text_connection().cursor() as cur:
            cur.execute(
                _TERM_WEIGHTS_SQL,
                {
                    "lang": spec.text_language,
                    "text": text,
                    "schema": self.schema,
                    "table": spec.name,
                    "regclass": f"{_quote_ident(self.schema)}.{_quote_ident(spec.name)}",
                    "tsv": _TSV,
                },
            )
            return [(str(t), float(w)) for t, w in cur.fetchall()]

    def _text_parts(
        self, spec: CollectionSpec, cols: list[str], node: Node, weights: TermWeights
    ) -> dict[str, Any]:
        from psycopg import sql

        # Plain: ts_rank over the OR of the terms. IDF: sum of idf * ts_rank(_tsv, term), the
        # weights constants (no per-row subquery); no terms (only stop words): 0, and
        # nothing matches anyway.
        rank = sql.SQL("ts_rank({}, _clef_q, {})").format(
            sql.Identifier(_TSV), sql.Literal(_RANK_NORMALISATION)
        )
        if weights is not None:
            rank = (
                sql.SQL(" + ").join(
                    sql.SQL("{} * ts_rank({}, {}::tsquery, {})").format(
                        sql.Literal(w),
                        sql.Identifier(_TSV),
                        sql.Literal(t),
                        sql.Literal(_RANK_NORMALISATION),
                    )
                    for t, w in weights
                )
                if weights
                else sql.SQL("0")
            )

        return {
            "lang": sql.Literal(spec.text_language),
            "cols": sql.SQL(", ").join(sql.Identifier(c) for c in cols),
            "tsv": sql.Identifier(_TSV),
            "norm": sql.Literal(_RANK_NORMALISATION),
            "t": self._t(spec.name),
            # Named placeholders (%(_clef_w0)s, ...): the bounded statement uses the filter
            # twice with one set of parameters.
            "w": to_pg(node, named="_clef_w"),
            "rank": rank,
        }

    def _full_text_sql(
        self, spec: CollectionSpec, cols: list[str], node: Node, weights: TermWeights
    ) -> Any:
        """Every match ranked (``text_candidates = 0``)."""
        from psycopg import sql

        return sql.SQL(
            "WITH _clef_tsq AS (SELECT replace(plainto_tsquery({lang}::regconfig, %(text)s)"
            "::text, ' & ', ' | ')::tsquery AS _clef_q) "
            "SELECT {cols}, {rank} AS _clef_r FROM {t}, _clef_tsq "
            "WHERE {tsv} @@ _clef_q AND {w} ORDER BY _clef_r DESC, id LIMIT %(k)s"
        ).format(**self._text_parts(spec, cols, node, weights))

    def _bounded_text_sql(
        self, spec: CollectionSpec, cols: list[str], node: Node, weights: TermWeights
    ) -> Any:
        """At most ``budget`` rows ranked: those holding one of the query's rarest terms,
        topped up from the other terms' rows when fewer than k hold one (module docstring)."""
        from psycopg import sql

        return sql.SQL(
            # ANALYZE's most common lexemes of _tsv, each with the fraction of rows holding it.
            "WITH _clef_mce AS ("
            "SELECT u._clef_e, u._clef_f FROM pg_stats s, unnest(s.most_common_elems::text"
            "::text[], s.most_common_elem_freqs) AS u(_clef_e, _clef_f) "
            "WHERE s.schemaname = %(schema)s AND s.tablename = %(table)s "
            "AND s.attname = {tsv_name}), "
            # The query's distinct terms with their frequency; a term not listed is rarer than
            # every listed one (0 here: always taken).
            "_clef_terms AS ("
            "SELECT q._clef_lex, coalesce(m._clef_f, 0) AS _clef_f "
            "FROM unnest(tsvector_to_array(to_tsvector({lang}::regconfig, %(text)s))) "
            "AS q(_clef_lex) LEFT JOIN _clef_mce m ON m._clef_e = q._clef_lex), "
            # Rarest first, with the estimated rows of the terms before and up to each one.
            "_clef_order AS ("
            "SELECT '''' || replace(replace(_clef_lex, '\\', '\\\\'), '''', '''''') || '''' "
            "AS _clef_quoted, row_number() OVER (ORDER BY _clef_f, _clef_lex) AS _clef_n, "
            "sum(_clef_f) OVER (ORDER BY _clef_f, _clef_lex) * (SELECT greatest(reltuples, 0) "
            "FROM pg_class WHERE oid = {regclass}::regclass) AS _clef_upto FROM _clef_terms), "
            # A term is taken while the terms so far fit the budget, and the rarest always.
            # Without statistics (never analysed) every term is taken, every match ranked.
            "_clef_tsq AS ("
            "SELECT (string_agg(_clef_quoted, ' | ') FILTER (WHERE _clef_n = 1 "
            "OR _clef_upto <= %(budget)s OR NOT EXISTS (SELECT 1 FROM _clef_mce)))::tsquery "
            "AS _clef_rare, "
            "replace(plainto_tsquery({lang}::regconfig, %(text)s)::text, ' & ', ' | ')"
            "::tsquery AS _clef_q FROM _clef_order), "
            # The candidates: row address, id and rank only; the top k's columns are read last.
            "_clef_hits AS MATERIALIZED ("
            "SELECT ctid AS _clef_tid, id AS _clef_id, {rank} AS _clef_r "
            "FROM {t}, _clef_tsq WHERE {tsv} @@ _clef_rare AND {w} "
            "LIMIT (SELECT CASE WHEN EXISTS (SELECT 1 FROM _clef_mce) THEN %(budget)s END)), "
            # Only when fewer than k rows hold a rare term (a one-time filter: otherwise this
            # scan never starts): twice the missing rows (within the budget) from the other
            # terms, found by reading rows (through the filter's index where it has one) until
            # enough match, never by a GIN bitmap of every common term's rows (ts_match_vq is
            # @@ without the index)).
            "_clef_more AS ("
            "SELECT ctid AS _clef_tid, id AS _clef_id, {rank} AS _clef_r "
            "FROM {t}, _clef_tsq WHERE (SELECT count(*) FROM _clef_hits) < %(k)s "
            "AND ts_match_vq({tsv}, _clef_q) AND NOT ts_match_vq({tsv}, _clef_rare) AND {w} "
            "LIMIT greatest(0, least(%(budget)s - (SELECT count(*) FROM _clef_hits), "
            "2 * (%(k)s - (SELECT count(*) FROM _clef_hits))))), "
            "_clef_top AS ("
            "SELECT * FROM _clef_hits UNION ALL SELECT * FROM _clef_more "
            "ORDER BY _clef_r DESC, _clef_id LIMIT %(k)s) "
            "SELECT {cols}, _clef_top._clef_r FROM _clef_top JOIN {t} ON {t}.ctid = "
            "_clef_top._clef_tid ORDER BY _clef_top._clef_r DESC, _clef_top._clef_id"
        ).format(
            tsv_name=sql.Literal(_TSV),
            regclass=sql.Literal(f"{_quote_ident(self.schema)}.{_quote_ident(spec.name)}"),
            **self._text_parts(spec, cols, node, weights),
        )

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
        with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
            if exact:
                cur.execute("SET LOCAL enable_indexscan = off")
            else:
                cur.execute(
                    sql.SQL("SET LOCAL hnsw.ef_search = {}").format(
                        sql.Literal(max(self.ef_search, top_k))
                    )
                )
                if self.iterative_scan:
                    cur.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            cur.execute(stmt, params)
            return list(cur.fetchall())

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
        return {"rows": self.count(collection), "analyzed": True, **self._clean_text_index(spec)}

    def _clean_text_index(self, spec: CollectionSpec) -> dict[str, Any]:
        """Fold the GIN index's pending list into the index proper. Writes go to that list
        (GIN's fastupdate) and every text query reads all of it sequentially: after a
        first load of 11k chunks it held 450 pages and made text queries 3-4x slower until
        autovacuum came by. The index step and `maintain` empty it."""
        if not spec.text_fields:
            return {}
        name = f"{_quote_ident(self.schema)}.{_quote_ident(_ix(spec.name, _TSV))}"
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
        done.update(self._clean_text_index(spec))
        with self._lock, self._conn.cursor() as cur:
            cur.execute(sql.SQL("ANALYZE {}").format(self._t(spec.name)))
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
