"""Memory and time of the whole-source part of an ingest: the inventory of a large source.

    .venv/bin/python -m lab.bench.inventory --sizes 50000,500000,1000000

Everything after the inventory streams one batch at a time (`batching.batch_documents`), so the
inventory is the one step whose memory grows with the source: the listing (one row per
document), the plan against the store's per-document facts, and the batch column. For each size
this writes a JSONL source of short documents (the listing reads and hashes every line; the
text length does not change the inventory's memory), then, in a fresh child process, lists it,
plans it against as many stored documents (one fact row each: what a full rerun compares
with) and assigns batches. It prints the child's wall time and peak resident memory
(``wait4``'s ``ru_maxrss``, the interpreter and imports included) and the same for an empty
child that only imports the modules, so the difference is the inventory's own memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def generate(path: Path, n: int) -> None:
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"doc-{i:08d}", "text": f"document number {i} of {n}."}))
            f.write("\n")


def child(corpus: Path | None) -> None:
    import polars as pl

    from clef_pipelines.config import Settings, SourceConfig
    from clef_pipelines.ingest import stages
    from clef_pipelines.ingest.batches import batch_column, batch_count
    from clef_pipelines.ingest.documents import (
        _STORED_SCHEMA,
        listing_frame,
        plan_inventory_frame,
    )

    if corpus is None:
        return
    settings = Settings()
    source = SourceConfig(name="big", path=str(corpus), kind="jsonl")
    listing = listing_frame(stages.iter_entries(settings, source, "fingerprint"))
    # What the store holds for an unchanged source: one fact row per document.
    stored = listing.select(
        "doc_id",
        pl.col("doc_hash").alias("hash_min"),
        pl.col("doc_hash").alias("hash_max"),
        pl.lit(1, dtype=pl.Int64).alias("count_min"),
        pl.lit(1, dtype=pl.Int64).alias("count_max"),
        pl.lit(1, dtype=pl.Int64).alias("records"),
        pl.lit(False).alias("needs_asking"),
    ).cast(_STORED_SCHEMA)
    inventory = plan_inventory_frame("big", listing, stored)
    batches = batch_count(inventory.height, settings.batching.batch_documents)
    inventory = inventory.with_columns(batch_column(inventory["doc_id"], batches))
    assert inventory.filter(pl.col("status") == "unchanged").height == listing.height


def measured(corpus: Path | None) -> tuple[float, float]:
    args = [sys.executable, "-m", "lab.bench.inventory", "--child", str(corpus) if corpus else "-"]
    started = time.perf_counter()
    proc = subprocess.Popen(args, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"the child failed (status {status})")
    return time.perf_counter() - started, usage.ru_maxrss / 1024 / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50000,500000,1000000")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(None if args.child == "-" else Path(args.child))
        return
    wall0, base = measured(None)
    print(f"imports only: {wall0:.1f} s, peak {base:.3f} GB")
    print("| documents | wall s | peak GB | inventory's own GB | bytes a document |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="bench-inventory-") as tmp:
        for n in [int(x) for x in args.sizes.split(",") if x]:
            corpus = Path(tmp) / f"n{n}.jsonl"
            generate(corpus, n)
            wall, peak = measured(corpus)
            own = peak - base
            print(f"| {n:,} | {wall:.1f} | {peak:.3f} | {own:.3f} | {own * 1024**3 / n:.0f} |")
            corpus.unlink()


if __name__ == "__main__":
    main()
