"""Peak memory, time and recall of LanceDB ANN index builds (issue 13, the index step).

Writes one LanceDB table of N unit vectors (clustered, seeded: recall on uniform random vectors
in 384 dimensions means nothing) in slices, then builds each index configuration in a fresh
child process and reports the child's peak RSS (``ru_maxrss``) and its RSS before the build,
the build seconds and recall@10 against exact search over 100 held-out queries, with the
store's own search settings (nprobes, refine_factor, ef).

    nice -n 5 .venv/bin/python -m lab.bench.vector_index --rows 380000 --dir DIR \\
        --configs hnsw_sq:4,hnsw_sq:auto,ivf_pq:auto,ivf_flat:16

A configuration is ``kind:partitions`` (kind: hnsw_sq, ivf_pq, ivf_flat; ``auto``: what
`LanceDBStore` picks for the row count), or ``kind:seg=R``: the index built in segments of at
most R rows over the table's fragments (`lancedb_store.index_segments`, what `LanceDBStore`
does with ``index_segment_rows`` R). Build one configuration at a time on a table: two
concurrent builds on one table conflict at commit. Each child drops the table's vector index
first, so configurations can follow each other on one table.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DIM = 384
SLICE = 20_000


def _vectors(rng: np.random.Generator, centers: np.ndarray, n: int) -> np.ndarray:
    pick = rng.integers(0, len(centers), n)
    v = centers[pick] + rng.normal(0, 0.6, (n, DIM)).astype(np.float32)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def make_table(path: Path, rows: int, seed: int = 7) -> None:
    import lancedb
    import pyarrow as pa

    db = lancedb.connect(str(path))
    if "t" in db.list_tables().tables:
        return
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 1, (2_000, DIM)).astype(np.float32)
    np.save(path / "centers.npy", centers)
    t = None
    for start in range(0, rows, SLICE):
        n = min(SLICE, rows - start)
        v = _vectors(rng, centers, n)
        batch = pa.table(
            {
                "id": pa.array([f"r{start + i}" for i in range(n)]),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), DIM),
            }
        )
        t = db.create_table("t", batch) if t is None else t
        if start:
            t.add(batch)


def _rss_gb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1e6
    return 0.0


def build(path: Path, config: str) -> dict:
    import lancedb

    from clef_pipelines.stores.lancedb_store import index_segments, vector_index_config

    kind, _, parts = config.partition(":")
    kind = {"hnsw_sq": "IVF_HNSW_SQ"}.get(kind, kind.upper())
    db = lancedb.connect(str(path))
    t = db.open_table("t")
    for ix in t.list_indices():
        t.drop_index(ix.name)
    n = t.count_rows()
    before = _rss_gb()
    t0 = time.perf_counter()
    if parts.startswith("seg="):
        index = None
        index_segments(t, kind, DIM, "cosine", int(parts[4:]))
    else:
        index = vector_index_config(
            kind, n, DIM, "cosine", None if parts in ("", "auto") else int(parts)
        )
        t.create_index("vector", config=index, replace=True)
    secs = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    # Recall@10 against exact search on held-out queries drawn from the same clusters.
    rng = np.random.default_rng(99)
    centers = np.load(path / "centers.npy")
    queries = _vectors(rng, centers, 100)
    hits = 0
    ann_s = 0.0
    for q in queries:
        exact = t.search(q).distance_type("cosine").bypass_vector_index().limit(10).to_list()
        started = time.perf_counter()
        ann = (
            t.search(q).distance_type("cosine").nprobes(20).refine_factor(10).ef(100).limit(10)
        ).to_list()
        ann_s += time.perf_counter() - started
        hits += len({r["id"] for r in exact} & {r["id"] for r in ann})
    stats = t.index_stats(next(ix.name for ix in t.list_indices()))
    return {
        "config": config,
        "index": type(index).__name__ if index is not None else "segments",
        "partitions": getattr(index, "num_partitions", None),
        "segments": stats.num_indices,
        "indexed_rows": stats.num_indexed_rows,
        "ann_ms": round(1000 * ann_s / len(queries), 1),
        "rows": n,
        "build_s": round(secs, 1),
        "rss_before_gb": round(before, 2),
        "peak_gb": round(peak, 2),
        "recall_at_10": round(hits / (10 * len(queries)), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=380_000)
    ap.add_argument("--configs", default="hnsw_sq:auto,ivf_pq:auto")
    ap.add_argument("--dir", help="Table folder to keep/reuse (default: a temp folder).")
    ap.add_argument("--build", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.build:
        print(json.dumps(build(Path(a.dir), a.build)))
        return
    path = Path(a.dir or tempfile.mkdtemp(prefix="bench-vindex-"))
    path.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    make_table(path, a.rows)
    print(f"table: {a.rows} rows x {DIM} in {time.perf_counter() - t0:.1f} s at {path}", flush=True)
    for config in a.configs.split(","):
        out = subprocess.run(
            [sys.executable, "-m", "lab.bench.vector_index", "--dir", str(path), "--build", config],
            capture_output=True,
            text=True,
        )
        if out.returncode:
            print(config, "failed:", out.stderr[-2000:], flush=True)
            continue
        print(out.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
