"""The peak of each phase of one LanceDB upkeep, on a copy of a kept run's table (issue 13).

    .venv/bin/python -m lab.bench.upkeep_phases --lancedb /tmp/scale-keep/n50000/state/lancedb
    .venv/bin/python -m lab.bench.upkeep_phases --lancedb /tmp/scale-keep/n500000/state/lancedb

Copies the LanceDB folder of a kept `bench/scale.py` run, then, a round at a time, appends 256
slices of 512 rows (the sync's writes between two upkeeps) and runs the steps of the store's
upkeep (`LanceDBStore._optimize`) one by one: compaction, each scalar and full-text index's
update, the version clean-up and the fresh session. Before each phase the process's peak
(`VmHWM`) is reset through `/proc/self/clear_refs`; each phase prints its peak over the resident
memory after the appends. Run it on a small and a large table to see whether an upkeep's
transient grows with the table.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

from clef_pipelines.ingest.process_memory import (  # noqa: E402
    limit_malloc_arenas,
    rss_gb,
    trim_heap,
)
from clef_pipelines.stores.lancedb_store import LanceDBStore  # noqa: E402
from lab.bench._peak_memory import peak_mb, reset_peak  # noqa: E402


def upkeep_round(store: LanceDBStore, name: str) -> str:
    """256 appends, then the steps of `LanceDBStore._optimize` one at a time."""
    table = store._table(name)
    data = table.search().limit(512).to_arrow()
    for _ in range(256):
        table.add(data, mode="append")
    trim_heap()
    base = rss_gb() * 1024
    out: list[str] = []

    def phase(label: str, fn: Callable[[], Any]) -> None:
        reset_peak()
        started = time.perf_counter()
        fn()
        out.append(f"{label} +{peak_mb() - base:.0f} ({time.perf_counter() - started:.1f}s)")

    ds = table.to_lance()
    phase(
        "compact",
        lambda: ds.optimize.compact_files(target_rows_per_fragment=store.compaction_target_rows),
    )
    latest = store._latest_delta_rows(ds)
    for ix in table.list_indices():
        if "vector" not in ix.columns:
            phase(ix.name, lambda n=ix.name: store._update_index(ds, n, latest.get(n)))
            trim_heap()
    phase("cleanup", lambda: ds.cleanup_old_versions(retain_versions=1))
    ds = table = None  # the old session's last users, dropped before the fresh one
    phase("fresh session", lambda: (store._connect(), trim_heap()))
    return f"after appends {base:.0f} MB | peak over it, MB: " + " | ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lancedb", type=Path, required=True, help="A kept run's LanceDB folder.")
    ap.add_argument("--table", default="scale")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if not (args.lancedb / f"{args.table}.lance").is_dir():
        raise SystemExit(f"{args.lancedb}: no table {args.table!r} (a kept bench/scale.py run?)")
    limit_malloc_arenas()  # as the ingest processes do
    with tempfile.TemporaryDirectory(prefix="bench-upkeep-phases-") as tmp:
        path = Path(tmp) / "lancedb"
        shutil.copytree(args.lancedb, path)
        store = LanceDBStore(path, metadata_cache_mb=16, index_cache_mb=128, optimize_every=0)
        rows = store._table(args.table).count_rows()
        print(f"# {rows:,} rows; {args.rounds} rounds of 256 appends and an upkeep", flush=True)
        for r in range(args.rounds):
            print(f"round {r}: {upkeep_round(store, args.table)}", flush=True)
        store.close()


if __name__ == "__main__":
    main()
