"""LanceDB's caches across a load's upkeeps: what appends leave cached, with and without the
fresh session the store starts after every upkeep (issue 13, item 1).

Copies the LanceDB folder of a kept `bench/scale.py` run (its table and indexes), then, a
round at a time, appends 256 slices of 512 rows (a copy of the table's first 512 rows: the
sync's write size, and the writes between two upkeeps at `upkeep_rows` 131,072) and runs the
store's upkeep. Prints, per round, the bytes and entries in the store's LanceDB session and the
resident memory after the appends and after the upkeep. Run it on a small and a large table to
see how the cached entries of each version grow with the table:

    .venv/bin/python -m lab.bench.version_cache --lancedb /tmp/scale-keep/n50000/state/lancedb
    .venv/bin/python -m lab.bench.version_cache --lancedb /tmp/scale-keep/n500000/state/lancedb
    # as before the fresh session (the caches kept across upkeeps):
    .venv/bin/python -m lab.bench.version_cache --lancedb ... --keep-session

The copy is made next to the system's temporary folder and removed afterwards (a 500,000
document run's table is about 8 GB).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

from clef_pipelines.ingest.process_memory import limit_malloc_arenas, rss_gb  # noqa: E402
from clef_pipelines.stores.lancedb_store import LanceDBStore  # noqa: E402


def rss_mb() -> float:
    return rss_gb() * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lancedb", type=Path, required=True, help="A kept run's LanceDB folder.")
    ap.add_argument("--table", default="scale")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--appends", type=int, default=256, help="Appends between two upkeeps.")
    ap.add_argument("--rows", type=int, default=512, help="Rows an append.")
    ap.add_argument(
        "--keep-session", action="store_true", help="Keep the session across upkeeps (before)."
    )
    args = ap.parse_args()
    limit_malloc_arenas()  # as the ingest processes do
    with tempfile.TemporaryDirectory(prefix="bench-version-cache-") as tmp:
        path = Path(tmp) / "lancedb"
        shutil.copytree(args.lancedb, path)
        # The Dagster steps' cache sizes (pipeline_metadata_cache_mb 16, index_cache_mb 128);
        # upkeeps only when this script runs them.
        store = LanceDBStore(path, metadata_cache_mb=16, index_cache_mb=128, optimize_every=0)
        if args.keep_session:
            store._connect = lambda: None  # type: ignore[method-assign]
        table = store._table(args.table)
        rows = table.count_rows()
        data = table.search().limit(args.rows).to_arrow()
        print(
            f"# {rows:,} rows; {args.rounds} rounds of {args.appends} appends of "
            f"{data.num_rows} rows and an upkeep; "
            f"{'session kept' if args.keep_session else 'fresh session after each upkeep'}"
        )

        def cache() -> str:
            s = store._session
            return f"cache {s.size_bytes / 2**20:6.1f} MB {s.approx_num_items:5d} entries"

        for r in range(args.rounds):
            started = time.perf_counter()
            table = store._table(args.table)
            for _ in range(args.appends):
                table.add(data, mode="append")
            appended = f"{cache()}  rss {rss_mb():5.0f} MB"
            took = time.perf_counter() - started
            started = time.perf_counter()
            store._optimize(args.table)
            print(
                f"round {r}: after appends ({took:4.1f} s) {appended} | after upkeep "
                f"({time.perf_counter() - started:4.1f} s) {cache()}  rss {rss_mb():5.0f} MB",
                flush=True,
            )
        store.close()


if __name__ == "__main__":
    main()
