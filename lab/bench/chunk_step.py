"""CPU seconds of the chunks step's core and of the hash embedder, on a kept bench_scale run.

    .venv/bin/python -m bench run scale --sizes 5000 --runs first --guard off --keep DIR
    .venv/bin/python -m lab.bench.chunk_step DIR/n5000 [--write OUT.parquet]
        [--compare REF.parquet] [--profile]

Reads the run's screened_paragraphs batches and runs `stages.chunk_documents` on each, as the
`chunks` asset does (no Dagster, no store), then embeds every chunk's embed text with the hash
embedder in batches of 256. Prints process CPU and wall seconds with the load average.
`--write` keeps the chunk table (without `ingested_at`, the clock) and the vectors' digest;
`--compare` checks a kept table is equal, to show a change leaves the outputs unchanged.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import os
import pstats
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from clef_pipelines.chunking import get_token_counter  # noqa: E402
from clef_pipelines.config import load_settings  # noqa: E402
from clef_pipelines.embedding.hashing import HashEmbedder  # noqa: E402
from clef_pipelines.ingest import stages  # noqa: E402
from clef_pipelines.ingest.metadata import FieldTypes  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="A kept bench_scale folder (DIR/n5000).")
    parser.add_argument("--write", type=Path)
    parser.add_argument("--compare", type=Path)
    parser.add_argument("--profile", action="store_true", help="cProfile the chunking, top 30.")
    args = parser.parse_args()
    settings = load_settings(args.run / "bench.yaml")
    source = settings.sources[0].name
    folder = args.run / "state" / "intermediates" / "clef" / "screened_paragraphs"
    frames = [pl.read_parquet(p) for p in sorted(folder.rglob("*.parquet"))]
    get_token_counter()  # loading the tokenizer is not the step's per-document cost

    def chunk_all() -> pl.DataFrame:
        types = FieldTypes()
        return pl.concat(
            [stages.chunk_documents(settings, source, f, None, types=types)[0] for f in frames]
        )

    cpu, wall = time.process_time(), time.perf_counter()
    if args.profile:
        prof = cProfile.Profile()
        chunks = prof.runcall(chunk_all)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
    else:
        chunks = chunk_all()
    chunk_cpu, chunk_wall = time.process_time() - cpu, time.perf_counter() - wall
    docs = chunks["doc_id"].n_unique()
    texts = chunks["embed_text"].to_list()
    embedder = HashEmbedder(settings.embedder.dimension)
    cpu, wall = time.process_time(), time.perf_counter()
    vectors = np.concatenate(
        [embedder.embed(texts[i : i + 256]) for i in range(0, len(texts), 256)]
    )
    embed_cpu, embed_wall = time.process_time() - cpu, time.perf_counter() - wall
    digest = hashlib.sha256(vectors.tobytes()).hexdigest()[:16]
    load = os.getloadavg()[0]
    print(
        f"{docs} documents, {chunks.height} chunks | chunking cpu {chunk_cpu:.2f} s "
        f"(wall {chunk_wall:.2f} s, {1000 * chunk_cpu / docs:.2f} ms cpu a document) | "
        f"hash embedding cpu {embed_cpu:.2f} s (wall {embed_wall:.2f} s) | vectors {digest} | "
        f"load {load:.2f}"
    )
    table = chunks.drop("ingested_at")
    if args.write:
        table.write_parquet(args.write)
    if args.compare:
        same = table.equals(pl.read_parquet(args.compare))
        print(f"chunk table equal to {args.compare}: {same}")
        if not same:
            sys.exit(1)


if __name__ == "__main__":
    main()
