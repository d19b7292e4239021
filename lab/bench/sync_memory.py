"""Resident memory of a LanceDB sync as the table grows (issue 13: what sets an ingest's peak).

Upserts ``--rows`` records of 384-d vectors with the ingest's kind of payload (a text field
under full-text search, filter fields) into a fresh `LanceDBStore` in slices of ``--batch``
rows (512: `sync_batch_rows`' default), as `store_sync` does, and prints the process's resident
memory every few slices. It isolates the store's part of a sync from the pipeline's.

    nice -n 5 .venv/bin/python -m lab.bench.sync_memory --rows 100000 --batch 512
    # the ingest's own collection spec (every payload field, its filter and text fields):
    nice -n 5 .venv/bin/python -m lab.bench.sync_memory --rows 100000 --batch 512 \\
        --spec DATA_DIR/lancedb/_clef_meta/COLLECTION.json
    # upkeep every 20 writes whatever the table's size (the behaviour before upkeep_fraction):
    nice -n 5 .venv/bin/python -m lab.bench.sync_memory --rows 150000 --batch 512 \\
        --spec ... --upkeep-fraction 0
    # LanceDB's own compaction target (every fragment below 1M rows rewritten, as before
    # compaction_target_rows):
    nice -n 5 .venv/bin/python -m lab.bench.sync_memory --rows 100000 --batch 512 \\
        --spec ... --compaction-target-rows 1048576
    # no upkeep during the load, then one over the whole table (what one upkeep costs at N):
    nice -n 5 .venv/bin/python -m lab.bench.sync_memory --rows 150000 --batch 512 \\
        --spec ... --optimize-every 0 --final-upkeep
    # the same, trimming the heap after every upsert (retained vs needed memory):
    ARROW_DEFAULT_MEMORY_POOL=system nice -n 5 .venv/bin/python -m lab.bench.sync_memory \\
        --rows 60000 --batch 512 --spec ... --trim
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np

from clef_pipelines.ingest.process_memory import peak_rss_gb, rss_gb, trim_heap  # noqa: E402
from clef_pipelines.stores._common import spec_from_json  # noqa: E402
from clef_pipelines.stores.base import CollectionSpec  # noqa: E402
from clef_pipelines.stores.lancedb_store import LanceDBStore  # noqa: E402


def _value(kind: str, rng: np.random.Generator, words: np.ndarray, i: int) -> object:
    if kind == "str":
        return " ".join(rng.choice(words, 40))
    if kind == "int":
        return i % 100
    if kind == "float":
        return float(i % 10) / 10
    return i % 2 == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=5_000)
    ap.add_argument(
        "--optimize-every", type=int, default=20, help="LanceDBStore optimize_every (0: never)."
    )
    ap.add_argument(
        "--upkeep-fraction",
        type=float,
        default=0.5,
        help="LanceDBStore upkeep_fraction (0: upkeep every --optimize-every writes).",
    )
    ap.add_argument(
        "--compaction-target-rows",
        type=int,
        default=16_384,
        help="LanceDBStore compaction_target_rows (1048576: LanceDB's own optimize target, "
        "the behaviour before it).",
    )
    ap.add_argument(
        "--final-upkeep",
        action="store_true",
        help="After the load, one maintain() with the memory it adds (with --optimize-every 0: "
        "one compaction of the whole table).",
    )
    ap.add_argument("--spec", type=Path, help="A collection's _clef_meta JSON to copy the spec of.")
    ap.add_argument(
        "--trim",
        action="store_true",
        help="Hand freed heap back to the OS after every upsert (malloc_trim): tells memory "
        "the process keeps from what a write needs while it runs. With "
        "ARROW_DEFAULT_MEMORY_POOL=system, pyarrow's buffers are trimmed too.",
    )
    a = ap.parse_args()
    rng = np.random.default_rng(3)
    words = np.array(["".join(rng.choice(list("abcdefghij"), 6)) for _ in range(5_000)])
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp:
        store = LanceDBStore(
            Path(tmp),
            optimize_every=a.optimize_every,
            upkeep_fraction=a.upkeep_fraction,
            compaction_target_rows=a.compaction_target_rows,
        )
        upkeeps = _count_upkeeps(store)
        spec = CollectionSpec(
            name="m",
            dimension=384,
            fields={"doc_id": "str", "text": "str", "n": "int"},
            filter_fields=("doc_id", "n"),
            text_fields=("text",),
        )
        if a.spec:
            spec = replace(spec_from_json(json.loads(a.spec.read_text())["spec"]), name="m")
        store.ensure_collection(spec)
        t0 = time.perf_counter()
        for start in range(0, a.rows, a.batch):
            v = rng.standard_normal((a.batch, 384)).astype(np.float32)
            recs = []
            for i in range(a.batch):
                rec = {f: _value(t, rng, words, i) for f, t in spec.fields.items()}
                rec.update(
                    id=str(uuid.UUID(int=start + i)),
                    vector=v[i],
                    doc_id=f"d{(start + i) // 7}",
                )
                recs.append(rec)
            store.upsert("m", recs)
            if a.trim:
                trim_heap()
            done = start + a.batch
            if done % (a.batch * 5) == 0 or done >= a.rows:
                peak = peak_rss_gb()
                frags = store._table("m").stats()["fragment_stats"]["num_fragments"]
                print(
                    f"{done:>8} rows  {time.perf_counter() - t0:7.1f} s  rss {rss_gb():.2f} GB"
                    f"  peak {peak:.2f} GB  fragments {frags}  upkeeps {upkeeps[0]} "
                    f"({upkeeps[1]:.1f} s)  load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
        if a.final_upkeep:
            _one_upkeep(store)


def _count_upkeeps(store: LanceDBStore) -> list[float]:
    """[upkeeps so far, seconds spent in them], kept current by wrapping the store's upkeep."""
    counts = [0.0, 0.0]
    real = store._optimize

    def counted(name: str) -> None:
        t0 = time.perf_counter()
        real(name)
        counts[0] += 1
        counts[1] += time.perf_counter() - t0

    store._optimize = counted  # type: ignore[method-assign]
    return counts


def _one_upkeep(store: LanceDBStore) -> None:
    """One `maintain` (compaction of every small fragment, index updates, version clean-up)
    over the table as loaded, with the resident memory it adds (sampled every 10 ms)."""
    trim_heap()
    before = rss_gb()
    top = [before]
    running = threading.Event()
    running.set()

    def sample() -> None:
        while running.is_set():
            top[0] = max(top[0], rss_gb())
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    store.maintain("m")
    running.clear()
    sampler.join()
    print(
        f"one upkeep over {store.count('m')} rows: {time.perf_counter() - t0:.1f} s, resident "
        f"{before:.2f} -> peak {top[0]:.2f} GB (+{top[0] - before:.2f})  "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
