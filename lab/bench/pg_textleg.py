"""Where pgvector's full-text leg spends its time: the SciFact chunks (bench_hybrid's cache) in
PostgreSQL, each claim's text leg run as hybrid search runs it (`text_query_refs`, 100 deep),
every statement it sends captured and run again under EXPLAIN (ANALYZE, BUFFERS).

    python -m lab.bench.pg_textleg --sizes 0,100000 --queries 100
    python -m lab.bench.pg_textleg --sizes 0 --storage extended   # _tsv in TOAST, as before

Prints per size: the leg's wall p50 (Python included) and, per kind of statement (the spec
read, the query's terms, the term statistics, the ranking statement), how many were sent per
query, their planning and execution p50 and the shared buffers they touched; and the vector
leg's wall p50 (`query_refs`, 100 deep) for scale. The statements are timed a second time
under EXPLAIN, so the server is warm for them: the wall p50 is the figure to compare. Runs
the store's code from the import path: PYTHONPATH picks the version.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import time
from typing import Any

from bench import hybrid as bh  # noqa: E402


def kind_of(stmt: str) -> str:
    if "_clef_collections" in stmt:
        return "spec"
    if "ts_rank" in stmt:
        return "rank"
    if "pg_stats" in stmt:
        return "stats"
    if "tsvector_to_array" in stmt:
        return "terms"
    return "other"


def run(store: Any, sample: list[dict[str, Any]], depth: int) -> dict[str, Any]:
    import numpy as np
    import psycopg
    from psycopg import sql

    seen: list[tuple[Any, Any]] = []

    class Recording(psycopg.Cursor):  # type: ignore[type-arg]
        def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
            seen.append((query, params))
            return super().execute(query, params, **kw)

    with store._text_lock:
        conn = store._text_connection()
    for q in sample[:5]:  # warm caches and the store's own caches
        store.text_query_refs("scifact", q["text"], top_k=depth)
        store.query_refs("scifact", q["vector"], top_k=depth)
    wall: list[float] = []
    vec: list[float] = []
    per_kind: dict[str, dict[str, list[float]]] = {}
    for q in sample:
        conn.cursor_factory = Recording
        seen.clear()
        started = time.perf_counter()
        store.text_query_refs("scifact", q["text"], top_k=depth)
        wall.append((time.perf_counter() - started) * 1000)
        conn.cursor_factory = psycopg.Cursor
        started = time.perf_counter()
        store.query_refs("scifact", q["vector"], top_k=depth)
        vec.append((time.perf_counter() - started) * 1000)
        counts: dict[str, int] = {}
        for stmt, params in seen:
            text = stmt if isinstance(stmt, str) else stmt.as_string(conn)
            kind = kind_of(text)
            counts[kind] = counts.get(kind, 0) + 1
            with conn.cursor() as cur:
                cur.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ") + sql.SQL(text)
                            if isinstance(stmt, str) else
                            sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ") + stmt, params)  # fmt: skip
                plan = cur.fetchone()[0][0]
            d = per_kind.setdefault(kind, {"plan": [], "exec": [], "buffers": [], "n": []})
            d["plan"].append(plan["Planning Time"])
            d["exec"].append(plan["Execution Time"])
            d["buffers"].append(float(plan["Plan"].get("Shared Hit Blocks", 0)))
        for kind, n in counts.items():
            per_kind[kind]["n"].append(n)
    out: dict[str, Any] = {
        "text_leg_p50_ms": round(statistics.median(wall), 2),
        "vector_leg_p50_ms": round(statistics.median(vec), 2),
    }
    for kind, d in sorted(per_kind.items()):
        out[kind] = {
            "per_query": round(sum(d["n"]) / len(sample), 2),
            "planning_p50_ms": round(statistics.median(d["plan"]), 3),
            "execution_p50_ms": round(statistics.median(d["exec"]), 3),
            "buffers_p50": float(np.percentile(d["buffers"], 50)),
        }
    return out


def main() -> None:
    import numpy as np
    from psycopg import sql

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[0])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--depth", type=int, default=100, help="fusion.candidates")
    parser.add_argument(
        "--storage",
        choices=["store", "extended"],
        default="store",
        help="_tsv storage: as the store makes it, or forced to PostgreSQL's default (TOAST)",
    )
    args = parser.parse_args()
    records, queries = bh.load_cached()
    rng = np.random.default_rng(0)
    picks = rng.choice(queries.height, size=min(args.queries, queries.height), replace=False)
    sample = [queries.row(int(i), named=True) for i in picks]
    with bh.stores(["pgvector"]) as factory:
        for size in args.sizes:
            data = bh.scaled(records, size or len(records))
            with factory("pgvector") as store:
                store.ensure_collection(bh.chunk_spec("scifact", data))
                if args.storage == "extended":
                    with store._conn.cursor() as cur:
                        cur.execute(
                            sql.SQL("ALTER TABLE {} ALTER COLUMN _tsv SET STORAGE EXTENDED").format(
                                store._t("scifact")
                            )
                        )
                for i in range(0, len(data), 1000):
                    store.upsert("scifact", data[i : i + 1000])
                store.build_indexes("scifact")
                row = {"rows": len(data), "storage": args.storage, **run(store, sample, args.depth)}
                row["load_avg"] = pathlib.Path("/proc/loadavg").read_text().split()[:3]
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
