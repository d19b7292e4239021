"""The first two steps of a first run alone: the inventory and the parse step (with its regroup).

    nice -n 5 .venv/bin/python -m lab.bench.parse_step --sizes 50000,200000 --compare HEAD~2,.

For each size this writes a JSONL source of synthetic documents (80 to 400 words, as
`bench/scale.py` does), then, per code version (``.``: the working tree), a fresh child
process lists it against an empty store (every document new), assigns batches, and runs the
parse step's core (`stages.parse_source_batches`: parse, one file per
`batching.batch_documents` documents, then the regroup into one file per batch) into a temporary
folder. It prints the child's seconds and memory: resident memory after the inventory, the
highest during the parse step (sampled every 20 ms), what the process still holds after it
(the next steps of an ingest run in the same process, Dagster's in-process executor) and the
child's peak (``ru_maxrss``, interpreter and imports included). The issue (13, item 1) asks
for a peak set by the batch size, not the source's: compare the sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORDS = [f"w{i}" for i in range(2000)]


def generate(path: Path, n: int) -> None:
    rnd = random.Random(13)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            words = rnd.choices(WORDS, k=rnd.randint(80, 400))
            paras = [" ".join(words[j : j + 60]) + "." for j in range(0, len(words), 60)]
            doc = {"id": f"doc-{i:08d}", "title": f"Document {i}", "text": "\n\n".join(paras)}
            f.write(json.dumps(doc) + "\n")


def child(code: Path, corpus: Path, work: Path, out: Path) -> None:
    del code  # the parent put it first on PYTHONPATH (lab.bench._code_at.code_env)
    from clef_pipelines.ingest.process_memory import limit_malloc_arenas, peak_rss_gb, rss_gb

    limit_malloc_arenas()  # as the ingest process does (clef_pipelines/definitions.py)
    import polars as pl

    from clef_pipelines.config import Settings, SourceConfig
    from clef_pipelines.ingest import stages
    from clef_pipelines.ingest.batches import BatchWriter, batch_column, batch_count
    from clef_pipelines.ingest.documents import (
        _STORED_SCHEMA,
        listing_frame,
        plan_inventory_frame,
    )

    settings = Settings()
    source = SourceConfig(name="big", path=str(corpus), kind="jsonl")
    start = rss_gb()
    t0 = time.perf_counter()
    # A first run: the store holds nothing yet (the inventory's own empty stored frame).
    stored = pl.DataFrame(schema=_STORED_SCHEMA)
    listing = listing_frame(stages.iter_entries(settings, source, "fingerprint"))
    inventory = plan_inventory_frame("big", listing, stored)
    del listing
    count = batch_count(inventory.height, settings.batching.batch_documents)
    inventory = inventory.with_columns(batch_column(inventory["doc_id"], count))
    inventory_s = time.perf_counter() - t0
    after_inventory, inventory_peak = rss_gb(), peak_rss_gb()
    high = [after_inventory]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            high[0] = max(high[0], rss_gb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t1 = time.perf_counter()
    writer = BatchWriter(work / "parsed")
    stats, failures = stages.parse_source_batches(
        settings, source, inventory, "fingerprint", writer
    )
    parse_s = time.perf_counter() - t1
    done.set()
    sampler.join()
    files = len(writer.finish().files())
    out.write_text(
        json.dumps(
            {
                "documents": stats.documents,
                "failed": failures.height,
                "batches": count,
                "files": files,
                "start_gb": start,
                "inventory_s": round(inventory_s, 1),
                "parse_s": round(parse_s, 1),
                "after_inventory_gb": after_inventory,
                "inventory_peak_gb": inventory_peak,
                "parse_high_gb": round(high[0], 3),
                "kept_gb": rss_gb(),
                "peak_gb": peak_rss_gb(),
            }
        )
    )


def main() -> None:
    from lab.bench._code_at import code_at, code_env, module_cmd

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="50000,200000")
    ap.add_argument("--compare", default=".", help="Commits, comma-separated ('.': this tree).")
    ap.add_argument("--tmp", type=Path, help="Where the corpus and the files go.")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(*(Path(p) for p in a.child))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-parse-step-", dir=a.tmp) as tmp:
        for n in [int(x) for x in a.sizes.split(",") if x]:
            corpus = Path(tmp) / f"n{n}.jsonl"
            generate(corpus, n)
            for rev in a.compare.split(","):
                code = code_at(rev, Path(tmp) / "code" / f"{n}") if rev != "." else REPO
                load = os.getloadavg()[0]
                with tempfile.TemporaryDirectory(dir=tmp) as work:
                    out = Path(work) / "summary.json"
                    args = module_cmd(
                        "lab.bench.parse_step", "--child", str(code), str(corpus), work
                    )
                    subprocess.run([*args, str(out)], check=True, env=code_env(code))
                    r = json.loads(out.read_text())
                r.update(code=rev, n=n, load=f"{load:.1f} to {os.getloadavg()[0]:.1f}")
                print(json.dumps(r), flush=True)
                rows.append(r)
            corpus.unlink()
    print(
        "\n| code | documents | batches | inventory s | parse s | after inventory GB "
        "| highest in the parse GB | kept after GB | peak GB | load |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    )
    for r in rows:
        print(
            f"| {r['code']} | {r['n']:,} | {r['batches']} | {r['inventory_s']} | "
            f"{r['parse_s']} | {r['after_inventory_gb']:.2f} | {r['parse_high_gb']:.2f} | "
            f"{r['kept_gb']:.2f} | {r['peak_gb']:.2f} | {r['load']} |"
        )


if __name__ == "__main__":
    main()
