"""Vector store benchmark: every adapter side by side, one run, a markdown table.

For each adapter and size: upsert throughput (batches of 1,000 through `upsert`, then
`maintain()` (compaction, ANALYZE) and `build_indexes()` (the index step) timed apart), p50/p95 latency of
top-10 queries without and with a filter (``source == "s3"``, about 10% of the rows), and
recall@10 of the adapter's answer against exact search computed in numpy.

Data: synthetic 384-d vectors drawn around 200 random centres (a clustered, embedding-like
distribution; uniform Gaussian noise would be the worst case for every ANN index). Queries are
perturbed data points.

    python -m bench run stores                      # memory+qdrant at 10k; lancedb+pgvector at 10k, 100k
    python -m bench run stores --sizes 10000 --kinds lancedb,pgvector

pgvector uses ``$CLEF_PG_DSN`` when set, else starts a throwaway server (bench/_pg.py); where
neither works, pgvector is left out with the reason (the other adapters still run).
`--quick`: memory and LanceDB at 2,000 and 20,000 rows (LanceDB builds no ANN index below
50,000), 50 queries.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np

from bench import _pg
from clef_pipelines.stores.base import CollectionSpec, VectorStore

QUICK = {"kinds": "memory,lancedb", "sizes": "2000,20000", "queries": 50}

FIELDS: dict[str, Any] = {"doc_id": "str", "source": "str", "n": "int"}
FILTER = {"source": "s3"}
K = 10


def make_data(n: int, dim: int, seed: int = 0) -> tuple[np.ndarray, list[str], list[str]]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((200, dim)).astype(np.float32)
    assign = rng.integers(0, len(centres), n)
    vecs = centres[assign] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    ids = [str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | i, version=4)) for i in range(n)]
    sources = [f"s{i % 10}" for i in range(n)]
    return vecs, ids, sources


def make_queries(vecs: np.ndarray, nq: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    picks = vecs[rng.integers(0, len(vecs), nq)]
    return picks + 0.3 * rng.standard_normal(picks.shape).astype(np.float32)


def exact_topk(vecs: np.ndarray, mask: np.ndarray | None, qs: np.ndarray, k: int) -> list[set[int]]:
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    idx = np.arange(len(vecs)) if mask is None else np.where(mask)[0]
    sub = unit[idx]
    out = []
    for q in qs:
        sims = sub @ (q / np.linalg.norm(q))
        top = np.argpartition(-sims, k)[:k]
        out.append({int(idx[j]) for j in top})
    return out


@contextlib.contextmanager
def pg_dsn() -> Iterator[str]:
    with _pg.pg_dsn() as dsn:
        yield dsn


def open_kind(kind: str, workdir: pathlib.Path, dsn: str | None, tag: str) -> VectorStore:
    if kind == "memory":
        from clef_pipelines.stores.memory import MemoryStore

        return MemoryStore()
    if kind == "lancedb":
        from clef_pipelines.stores.lancedb_store import LanceDBStore

        return LanceDBStore(workdir / f"lancedb-{tag}")  # defaults: index at 50k rows
    if kind == "qdrant":
        from clef_pipelines.stores.qdrant_store import QdrantStore

        return QdrantStore(path=str(workdir / f"qdrant-{tag}"))  # local mode, on disk
    from clef_pipelines.stores.pgvector_store import PgVectorStore

    assert dsn
    return PgVectorStore(dsn, schema=f"bench_{tag}")


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs), p) * 1000.0)


def run_one(
    kind: str,
    n: int,
    dim: int,
    nq: int,
    workdir: pathlib.Path,
    dsn: str | None,
) -> dict[str, Any]:
    vecs, ids, sources = make_data(n, dim)
    qs = make_queries(vecs, nq)
    store = open_kind(kind, workdir, dsn, f"{kind}_{n}")
    spec = CollectionSpec(
        name="bench", dimension=dim, metric="cosine", fields=FIELDS, filter_fields=("source",)
    )
    store.drop("bench")
    store.ensure_collection(spec)
    t0 = time.perf_counter()
    for s in range(0, n, 1000):
        e = min(n, s + 1000)
        store.upsert(
            "bench",
            [
                {
                    "id": ids[i],
                    "vector": vecs[i],
                    "doc_id": f"d{i // 20}",
                    "source": sources[i],
                    "n": i,
                }
                for i in range(s, e)
            ],
        )
    upsert_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    done = store.maintain("bench")
    maintain_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    done["build_indexes"] = store.build_indexes("bench")  # the index step, after the load
    index_s = time.perf_counter() - t0
    pos = {rid: i for i, rid in enumerate(ids)}
    mask = np.array([s == FILTER["source"] for s in sources])
    res: dict[str, Any] = {
        "kind": kind,
        "n": n,
        "upsert_rows_s": n / upsert_s,
        "upsert_s": upsert_s,
        "index_s": index_s,
        "maintain_s": maintain_s,
        "maintain": done,
    }
    for label, flt, m in (("plain", None, None), ("filtered", FILTER, mask)):
        truth = exact_topk(vecs, m, qs, K)
        store.query("bench", qs[0], where=flt, top_k=K)  # warm-up
        lat: list[float] = []
        recalls: list[float] = []
        for q, want in zip(qs, truth, strict=True):
            t = time.perf_counter()
            hits = store.query("bench", q, where=flt, top_k=K)
            lat.append(time.perf_counter() - t)
            got = {pos[h.id] for h in hits}
            recalls.append(len(got & want) / K)
        res[f"{label}_p50_ms"] = pct(lat, 50)
        res[f"{label}_p95_ms"] = pct(lat, 95)
        res[f"{label}_recall"] = float(np.mean(recalls))
    store.drop("bench")
    store.close()
    return res


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| store | rows | upsert rows/s | upsert s | index step s | maintain s "
        "| top-10 p50 / p95 ms | filtered p50 / p95 ms | recall@10 | filtered recall@10 |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r['n']:,} | {r['upsert_rows_s']:,.0f} "
            f"| {r['upsert_s']:.1f} | {r['index_s']:.1f} | {r['maintain_s']:.1f} "
            f"| {r['plain_p50_ms']:.1f} / {r['plain_p95_ms']:.1f} "
            f"| {r['filtered_p50_ms']:.1f} / {r['filtered_p95_ms']:.1f} "
            f"| {r['plain_recall']:.3f} | {r['filtered_recall']:.3f} |"
        )
    return "\n".join(lines)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--kinds", default="memory,lancedb,qdrant,pgvector")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument(
        "--small-only",
        default="memory,qdrant",
        help="kinds run at the smallest size only (memory: reference; qdrant: local mode is "
        "brute force)",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    kinds = [k for k in args.kinds.split(",") if k]
    sizes = sorted(int(s) for s in args.sizes.split(","))
    small_only = set(args.small_only.split(","))
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="clef-bench-") as tmp, contextlib.ExitStack() as stack:
        dsn = None
        skipped: dict[str, str] = {}
        if "pgvector" in kinds:
            try:
                dsn = stack.enter_context(pg_dsn())
            except Exception as exc:  # noqa: BLE001 - reported, and pgvector left out
                skipped["pgvector"] = f"cannot start PostgreSQL + pgvector: {exc}"
                print(f"# pgvector skipped: {skipped['pgvector']}", file=sys.stderr)
                kinds.remove("pgvector")
        for n in sizes:
            for kind in kinds:
                if kind in small_only and n != sizes[0]:
                    continue
                t = time.perf_counter()
                r = run_one(kind, n, args.dim, args.queries, pathlib.Path(tmp), dsn)
                rows.append(r)
                print(
                    f"# {kind} {n}: {time.perf_counter() - t:.0f} s (maintain: {r['maintain']})",
                    file=sys.stderr,
                    flush=True,
                )
    print(table(rows))
    for kind, reason in skipped.items():
        print(f"\n{kind} skipped: {reason}")
    print(f"\ntotal {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return {"dim": args.dim, "queries": args.queries, "rows": rows, "skipped": skipped}
