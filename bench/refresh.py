"""A refresh: an unchanged rerun and a 1% edited rerun of an ingested source, against its first run.

    .venv/bin/python -m bench run refresh [--sizes 5000] [--store lancedb] [--guard off|on]
        [--batch-documents N] [--keep DIR] [--quick] [--json]

The refresh part of `python -m bench run scale` (the same generated JSONL documents of 80 to
400 words, hash embedder, each run a fresh child process): per size, the first run, then an
unchanged rerun (the inventory finds nothing to do), an unchanged `clef-pipelines ingest` (the
CLI's no-change fast path: no Dagster run at all) and a rerun after 1% of the documents were
edited (only they are parsed, chunked, embedded and replaced). Prints, per rerun, its wall and
CPU seconds, peak memory and writes, and its share of the first run's wall and CPU time.
`--quick`: 1,000 documents.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from bench import scale

QUICK = {"sizes": "1000"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="5000", help="Comma-separated document counts.")
    parser.add_argument("--store", default="lancedb", choices=["lancedb", "memory", "qdrant"])
    parser.add_argument("--keep", type=Path, help="Work folder to keep (default: a temp folder).")
    parser.add_argument("--batch-documents", type=int, help="batching.batch_documents.")
    parser.add_argument("--guard", default="off", choices=["off", "on"])


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(x) for x in args.sizes.split(",") if x]
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-refresh-") as tmp:
        root = args.keep or Path(tmp)
        for n in sizes:
            rows = scale.bench_size(
                n,
                root,
                args.store,
                args.batch_documents,
                ["first", "unchanged", "cli", "edited"],
                args.guard,
            )
            first = rows[0]
            for r in rows[1:]:
                out.append(
                    {
                        "documents": n,
                        "run": r["run"],
                        "wall_s": r["wall_s"],
                        "cpu_s": r["cpu_s"],
                        "peak_rss_gb": r["peak_rss_gb"],
                        "writes": r["writes"],
                        "embedded": r["embedded"],
                        "wall_of_first": round(r["wall_s"] / first["wall_s"], 3),
                        "cpu_of_first": round(r["cpu_s"] / max(first["cpu_s"], 1e-9), 3),
                        "first_wall_s": first["wall_s"],
                        "first_cpu_s": first["cpu_s"],
                        "load": r["load"],
                    }
                )
    print(
        f"\nrefresh: store {args.store}, hash embedder, guard {args.guard}, {os.cpu_count()} CPUs\n"
    )
    print(
        "| documents | rerun | wall s | CPU s | of first (wall) | of first (CPU) | peak GB "
        "| embedded | writes | load |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in out:
        print(
            f"| {r['documents']:,} | {r['run']} | {r['wall_s']} | {r['cpu_s']} "
            f"| {r['wall_of_first']:.1%} | {r['cpu_of_first']:.1%} | {r['peak_rss_gb']} "
            f"| {r['embedded']:,} | {r['writes']:,} | {r['load']} |"
        )
    return {"store": args.store, "guard": args.guard, "rows": out}
