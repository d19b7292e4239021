"""Hybrid search on LanceDB with and without late records, interleaved in one process.

    python -m lab.bench.hybrid_refs --workdir /tmp/refs --size 100000 --queries 100

"full": both 100-deep lists read with every column, fused, top 30 kept (the path before
`VectorStore.query_refs`); "refs": both lists as id + row id, fused, the top 30 read with one
take (`fill_records`, what `fusion.search` does now); "vector": a plain top-30 vector query.
The collection is the bench_hybrid cache scaled to --size (bench_hybrid.scaled), built once
under --workdir and reused. The three are interleaved per query so load hits them alike.
"""

from __future__ import annotations

import argparse
import pathlib
import time

import numpy as np

from bench import hybrid as bh  # noqa: E402


def main() -> None:
    from clef_pipelines.retrieval.config import FusionConfig
    from clef_pipelines.retrieval.fusion import _pool, fuse
    from clef_pipelines.stores.lancedb_store import LanceDBStore

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--size", type=int, default=0, help="rows (0: the SciFact chunks)")
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    records, queries = bh.load_cached()
    store = LanceDBStore(pathlib.Path(args.workdir))
    if not store.has_collection("scifact"):
        print("load", bh.load(store, bh.scaled(records, args.size or len(records))), flush=True)
    rng = np.random.default_rng(2)
    picks = rng.choice(queries.height, size=min(args.queries, queries.height), replace=False)
    sample = [queries.row(int(i), named=True) for i in picks]
    fusion = FusionConfig()

    def full(q: dict) -> list:
        text = _pool().submit(store.text_query, "scifact", q["text"], top_k=100)
        vector = store.query("scifact", q["vector"], top_k=100)
        return fuse(vector, text.result(), fusion)[:30]

    def refs(q: dict) -> list:
        text = _pool().submit(store.text_query_refs, "scifact", q["text"], top_k=100)
        vector = store.query_refs("scifact", q["vector"], top_k=100)
        return store.fill_records("scifact", fuse(vector, text.result(), fusion)[:30])

    def vector(q: dict) -> list:
        return store.query("scifact", q["vector"], top_k=30)

    cases = {"vector": vector, "full": full, "refs": refs}
    for q in sample[:5]:
        assert [(h.id, h.record) for h in full(q)] == [(h.id, h.record) for h in refs(q)]
        vector(q)
    lat: dict[str, list[float]] = {name: [] for name in cases}
    for q in sample:
        for name, fn in cases.items():
            started = time.perf_counter()
            fn(q)
            lat[name].append((time.perf_counter() - started) * 1000)
    p50 = {name: round(float(np.median(v)), 1) for name, v in lat.items()}
    print(
        f"rows {store.count('scifact'):,}; p50 ms {p50}; hybrid/vector full "
        f"{p50['full'] / p50['vector']:.2f}, refs {p50['refs'] / p50['vector']:.2f}"
    )


if __name__ == "__main__":
    main()
