"""Resident memory after each segment of a segmented ANN index build (issue 13, index step).

Builds LanceDB's IVF_HNSW_SQ index over a `lab/bench/vector_index.py` table in segments of at most
``--segment-rows`` rows, the way `lancedb_store.index_segments` does (the same fragment
groups and per-segment arguments), without committing, and prints the process's resident
memory (VmRSS) and peak (VmHWM) after each segment: whether what one process keeps grows with
the number of segments, i.e. with the table.

    nice -n 5 .venv/bin/python -m lab.bench.index_segments --dir DIR --rows 120000 \\
        --segment-rows 20000 [--fresh-dataset] [--trim]

``--fresh-dataset`` opens the dataset anew for every segment (Lance's caches dropped);
``--trim`` hands the freed heap back to the OS after every segment (``malloc_trim``). Run it
with ``MALLOC_ARENA_MAX=2`` for the arenas an ingest process keeps to.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from lab.bench.vector_index import DIM, make_table


def _status() -> dict[str, float]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                key, value = line.split(":")
                out[key] = round(int(value.split()[0]) / 1e6, 3)
    return out


def main() -> None:
    import lance
    import lancedb

    from clef_pipelines.ingest.process_memory import trim_heap
    from clef_pipelines.stores.lancedb_store import group_fragments, segment_index_args

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=120_000)
    ap.add_argument("--segment-rows", type=int, default=20_000)
    ap.add_argument("--fresh-dataset", action="store_true")
    ap.add_argument("--trim", action="store_true")
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    make_table(a.dir, a.rows)
    t = lancedb.connect(str(a.dir)).open_table("t")
    for ix in t.list_indices():
        t.drop_index(ix.name)
    ds = t.to_lance()
    rows = {f.fragment_id: f.count_rows() for f in ds.get_fragments()}
    print("start", _status(), flush=True)
    started = time.perf_counter()
    for n, group in enumerate(group_fragments(rows, a.segment_rows), 1):
        d = lance.dataset(ds.uri) if a.fresh_dataset else ds
        args = segment_index_args("IVF_HNSW_SQ", sum(rows[f] for f in group), DIM, "cosine")
        d.create_index_uncommitted(
            "vector", name="vector_idx", replace=True, fragment_ids=group, **args
        )
        if a.trim:
            trim_heap()
        print("segment", n, _status(), round(time.perf_counter() - started, 1), flush=True)


if __name__ == "__main__":
    main()
