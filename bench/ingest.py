"""Ingest the SciFact corpus end to end through the Dagster job, then again unchanged.

    .venv/bin/python -m bench run ingest [--limit N] [--embedder minilm|hash] [--store lancedb]
        [--chunker structural|fixed] [--quick] [--json]

Prints a markdown table: documents per second, the share of wall time spent outside the
embedder, and the unchanged rerun's seconds and embedder calls. Everything runs in a temporary
folder; the corpus is read from ../shared/data/scifact/corpus.jsonl ($CLEF_SHARED_DATA).
`--quick`: the first 200 documents, hash embedder.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench._common import SCIFACT, need_shared

CORPUS = SCIFACT / "corpus.jsonl"
QUICK = {"limit": 200, "embedder": "hash"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--limit", type=int, default=0, help="Only the first N documents.")
    parser.add_argument("--embedder", default="minilm", choices=["minilm", "hash"])
    parser.add_argument("--store", default="lancedb", choices=["lancedb", "memory", "qdrant"])
    parser.add_argument("--chunker", default="structural", choices=["structural", "fixed"])


def run(args: argparse.Namespace) -> dict[str, Any]:
    need_shared(args.corpus)
    from clef_pipelines.config import load_settings
    from clef_pipelines.jobs.launch import run_ingestion

    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        root = Path(tmp)
        corpus = args.corpus
        if args.limit:
            corpus = root / "corpus.jsonl"
            with args.corpus.open() as src, corpus.open("w") as dst:
                for i, line in enumerate(src):
                    if i >= args.limit:
                        break
                    dst.write(line)
        n_docs = sum(1 for line in corpus.open() if line.strip())
        cfg = root / "bench.yaml"
        cfg.write_text(
            yaml.safe_dump(
                {
                    "data_dir": str(root / "state"),
                    "collection": "scifact",
                    "sources": [{"name": "scifact", "path": str(corpus), "kind": "jsonl"}],
                    "embedder": {"kind": args.embedder},
                    "store": {"kind": args.store},
                    "chunking": {"strategy": args.chunker},
                }
            )
        )
        os.environ["DAGSTER_HOME"] = str(root / "dagster")
        settings = load_settings(cfg)

        results = []
        for label in ("first run", "unchanged rerun"):
            started = time.perf_counter()
            (report,) = run_ingestion(settings, ["scifact"])
            wall = time.perf_counter() - started
            if not report.success:
                raise SystemExit(f"{label} failed: {report.error}")
            # An unchanged rerun skips every step after the inventory: no embedder, no writes.
            emb = report.assets.get("embeddings", {"embedder_seconds": 0.0, "embedder_calls": 0})
            results.append(
                {
                    "run": label,
                    "documents": n_docs,
                    "chunks": report.assets.get("chunks", {}).get("chunks", 0),
                    "wall_s": round(wall, 2),
                    "docs_per_s": round(n_docs / wall, 1),
                    "embedder_s": emb["embedder_seconds"],
                    "embedder_calls": emb["embedder_calls"],
                    "outside_embedder": round(1 - emb["embedder_seconds"] / wall, 3),
                    "writes": report.assets.get("store_sync", {}).get("writes", 0),
                    "step_seconds": {
                        k: v.get("seconds") for k, v in report.assets.items() if "seconds" in v
                    },
                }
            )
    first, rerun = results
    print(
        f"SciFact ingestion: {n_docs} documents, embedder {args.embedder}, store {args.store}, "
        f"chunker {args.chunker}\n"
    )
    print(
        "| run | wall s | docs/s | chunks | embedder s | embedder calls | outside embedder | writes |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['run']} | {r['wall_s']} | {r['docs_per_s']} | {r['chunks']} | {r['embedder_s']} "
            f"| {r['embedder_calls']} | {r['outside_embedder']:.1%} | {r['writes']} |"
        )
    print(f"\nrerun / first run wall time: {rerun['wall_s'] / first['wall_s']:.1%}")
    print("\nstep seconds (first run):", json.dumps(first["step_seconds"]))
    print("step seconds (rerun):", json.dumps(rerun["step_seconds"]))
    return {
        "documents": n_docs,
        "embedder": args.embedder,
        "store": args.store,
        "chunker": args.chunker,
        "runs": results,
        "rerun_over_first": round(rerun["wall_s"] / first["wall_s"], 3),
    }
