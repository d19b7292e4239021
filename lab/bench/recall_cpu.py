"""Where a warm hybrid recall's CPU goes: each part of `retrieval.recall` timed alone.

    .venv/bin/python -m lab.bench.recall_cpu --config WORKDIR/docs-200/ours.yaml [--queries 15]
                                               [--reps 6]

Run `bench/retrieval.py --workdir WORKDIR ...` once first: it ingests the collection
and writes the config this reads (Clef is not asked here). For the first --queries SciFact
claims, in one warm process (the Retriever's query embedder after `warm()`), it prints the
median and best CPU milliseconds (`time.process_time`: every thread of the process, LanceDB's
runtime included) per query of: the query embedding, the vector leg and the text leg as the
hybrid search asks them (refs, `fusion.candidates` deep), the same two lists read with every
record (the way to fuse without a third call), the fusion, the read of the fused top_k by row
id, and the whole recall with the text leg started beside the embedding
(LanceDB's `concurrent_reads`, the default) and after the vector leg, alternating, with their
wall times. CPU, not wall, because the machine these ran on is shared: wall times there
measure the other work.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data" / "scifact"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--queries", type=int, default=15)
    parser.add_argument("--reps", type=int, default=6)
    args = parser.parse_args()

    from clef_pipelines.config import load_settings
    from clef_pipelines.retrieval.fusion import fuse
    from clef_pipelines.retrieval.recall import recall
    from clef_pipelines.retrieval.retriever import _retrieval_config, query_embedder
    from clef_pipelines.stores import open_store

    settings = load_settings(args.config)
    cfg = _retrieval_config(settings)
    store = open_store(settings.store, settings.data_path)
    embedder = query_embedder(settings, cfg)
    warm = getattr(embedder, "warm", None)
    if callable(warm):
        warm()
    coll, fusion, top_k = settings.collection, cfg.fusion, cfg.top_k
    depth = max(top_k, fusion.candidates)
    with (DATA / "queries.jsonl").open() as fh:
        queries = [json.loads(line)["text"] for line in fh if line.strip()][: args.queries]
    vectors = [embedder.embed_queries([q])[0].tolist() for q in queries]
    vec_hits = [store.query_refs(coll, v, top_k=depth) for v in vectors]
    text_hits = [store.text_query_refs(coll, q, top_k=depth) for q in queries]
    fused = [
        fuse(v, t, fusion, depth=depth, limit=top_k)
        for v, t in zip(vec_hits, text_hits, strict=True)
    ]

    def per_query(fn: Callable[[int], object]) -> tuple[float, float]:
        """CPU and wall milliseconds a query of one pass over the queries."""
        c, t = time.process_time(), time.perf_counter()
        for i in range(len(queries)):
            fn(i)
        n = len(queries)
        return (time.process_time() - c) / n * 1e3, (time.perf_counter() - t) / n * 1e3

    parts: dict[str, Callable[[int], object]] = {
        "query embedding": lambda i: embedder.embed_queries([queries[i]]),
        f"vector leg (refs, {depth} deep)": lambda i: store.query_refs(
            coll, vectors[i], top_k=depth
        ),
        f"text leg (refs, {depth} deep)": lambda i: store.text_query_refs(
            coll, queries[i], top_k=depth
        ),
        # The alternative to the read by row id: both lists read with every record (`query`,
        # `text_query`), so that fusion needs no third call.
        f"vector leg, records read with the list ({depth} deep)": lambda i: store.query(
            coll, vectors[i], top_k=depth
        ),
        f"text leg, records read with the list ({depth} deep)": lambda i: store.text_query(
            coll, queries[i], top_k=depth
        ),
        "fusion": lambda i: fuse(vec_hits[i], text_hits[i], fusion, depth=depth, limit=top_k),
        f"read the fused {top_k} by row id": lambda i: store.fill_records(coll, fused[i]),
    }

    def whole(concurrent: bool) -> Callable[[int], object]:
        def run(i: int) -> object:
            store.concurrent_reads = concurrent
            return recall(
                queries[i],
                store=store,
                embedder=embedder,
                collection=coll,
                top_k=top_k,
                mode="hybrid",
                fusion=fusion,
            )

        return run

    parts["recall, text leg beside the embedding"] = whole(True)
    parts["recall, text leg after the vector leg"] = whole(False)
    default_concurrency = store.concurrent_reads
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in parts}
    load_before = os.getloadavg()[0]
    for fn in parts.values():
        fn(0)
    for _ in range(args.reps):  # the parts alternate, so a change in load hits them all
        for name, fn in parts.items():
            results[name].append(per_query(fn))
    store.concurrent_reads = default_concurrency
    # A quarantined record among the nearest `depth` made the vector leg search a second time
    # until it asked for a few more than `depth` instead (`lancedb_store._overfetch`).
    near_quarantined = sum(
        any(
            h.record.get("quarantined")
            for h in store.query(coll, v, top_k=depth, include_quarantined=True)
        )
        for v in vectors
    )
    print(
        f"{len(queries)} SciFact claims x {args.reps} passes, top_k {top_k}, "
        f"load average {load_before:.2f} before / {os.getloadavg()[0]:.2f} after; "
        f"{near_quarantined} of the claims have a quarantined record among their "
        f"{depth} nearest\n"
    )
    print("| part | CPU ms a query, median (best) | wall ms, median (best) |")
    print("|---|---|---|")
    for name, rows in results.items():
        cpu = [r[0] for r in rows]
        wall = [r[1] for r in rows]
        print(
            f"| {name} | {statistics.median(cpu):.1f} ({min(cpu):.1f}) | "
            f"{statistics.median(wall):.1f} ({min(wall):.1f}) |"
        )
    store.close()
    embedder.close()


if __name__ == "__main__":
    main()
