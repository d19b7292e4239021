"""One upkeep's index update, and the quarantine check's probe query, as the table grows
(issue 13, item 1: the sync's memory set by configuration, not by the table).

Copies a kept `bench/scale.py` run's LanceDB table into --tmp, then for each size in --grow
(K: the table plus K copies of its rows under new ids, folded into its indexes) measures,
with resident memory sampled every 20 ms from a thread:

- for each scalar and full-text index, alone, folding --rows new rows (a copy of the first
  rows under new ids) into it: ``merge`` (Lance's default, what upkeep did before: the new
  rows merged into the index, which is rewritten) and ``delta`` (``num_indices_to_merge=0``,
  what upkeep does once the index's latest delta holds ``index_delta_rows``: a delta of
  their own). The table is restored to its version before each mode.
- the quarantine check's probe: one exact vector search (top 18 of every column the check
  reads) over the whole table, and the same search prefiltered to the probe's document
  (``doc_id``), as `steering.checks.quarantine_hidden` now runs it.

    nice -n 5 .venv/bin/python -m lab.bench.index_update \\
        --run-dir /tmp/lead-scale500/n50000 --grow 0,2 --rows 100000
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

from clef_pipelines.ingest.process_memory import (  # noqa: E402
    limit_malloc_arenas,
    rss_gb,
    trim_heap,
)


class Peak:
    """The highest resident memory seen since `start`, sampled every 20 ms."""

    def __init__(self) -> None:
        self.value = 0.0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            self.value = max(self.value, rss_gb())
            time.sleep(0.02)

    def start(self) -> float:
        trim_heap()
        base = rss_gb()
        self.value = base
        return base


def append_copy(path: str, rows: int, tag: str) -> None:
    """Append the table's first `rows` rows under new ids and document ids."""
    import lance
    import pyarrow as pa
    import pyarrow.compute as pc

    ds = lance.dataset(path)
    tbl = ds.to_table(limit=rows)
    for col in ("id", "doc_id"):
        i = tbl.schema.get_field_index(col)
        tbl = tbl.set_column(i, col, pc.binary_join_element_wise(tbl[col], pa.scalar(tag), ""))
    for start in range(0, tbl.num_rows, 8192):  # writes of the sync's order of size
        lance.write_dataset(tbl.slice(start, 8192), path, mode="append")
    trim_heap()


def index_updates(path: str, rows: int, peak: Peak) -> list[dict]:
    import lance

    out = []
    v0 = lance.dataset(path).version
    for mode in ("merge", "delta"):
        append_copy(path, rows, f"#{mode}")
        for desc in lance.dataset(path).describe_indices():
            if "vector" in desc.field_names:
                continue
            ds = lance.dataset(path)
            base = peak.start()
            started = time.perf_counter()
            kwargs = {"num_indices_to_merge": 0} if mode == "delta" else {}
            ds.optimize.optimize_indices(index_names=[desc.name], **kwargs)
            out.append(
                {
                    "mode": mode,
                    "index": desc.name,
                    "type": desc.index_type,
                    "added_gb": round(peak.value - base, 3),
                    "seconds": round(time.perf_counter() - started, 1),
                }
            )
            print(
                f"  {mode:5s} {desc.name:16s} +{out[-1]['added_gb']:.3f} GB "
                f"(from {base:.3f}) {out[-1]['seconds']} s",
                flush=True,
            )
        lance.dataset(path).checkout_version(v0).restore()
    return out


def probes(folder: str, name: str, peak: Peak) -> list[dict]:
    import lancedb
    import numpy as np

    db = lancedb.connect(folder)
    t = db.open_table(name)
    first = t.search().select(["doc_id", "vector"]).limit(1).to_arrow()
    vec = np.asarray(first["vector"][0].as_py(), dtype=np.float32)
    doc = first["doc_id"][0].as_py()
    cols = ["id", "source", "doc_id", "title", "text", "quarantined", "_extra"]
    out = []
    for label, where in (("whole table", None), ("its document", f"doc_id = '{doc}'")) * 2:
        base = peak.start()
        started = time.perf_counter()
        s = t.search(vec, vector_column_name="vector").distance_type("cosine")
        s = s.bypass_vector_index()
        if where:
            s = s.where(where, prefilter=True)
        n = s.select(cols).limit(18).to_arrow().num_rows
        out.append(
            {
                "probe": label,
                "rows": n,
                "added_gb": round(peak.value - base, 3),
                "seconds": round(time.perf_counter() - started, 2),
            }
        )
        print(
            f"  probe over {label:12s} +{out[-1]['added_gb']:.3f} GB (from {base:.3f}) "
            f"{out[-1]['seconds']} s",
            flush=True,
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", required=True, help="A kept bench_scale size folder.")
    ap.add_argument("--collection", default="scale")
    ap.add_argument("--grow", default="0", help="Comma-separated copies of the rows to add.")
    ap.add_argument("--rows", type=int, default=100_000, help="Rows folded into each index.")
    ap.add_argument("--tmp", default=None, help="Where the table's copy goes ($TMPDIR).")
    a = ap.parse_args()
    limit_malloc_arenas()  # as the ingestion processes do
    import lance

    peak = Peak()
    src = Path(a.run_dir) / "state" / "lancedb" / f"{a.collection}.lance"
    with tempfile.TemporaryDirectory(prefix="bench-index-update-", dir=a.tmp) as tmp:
        path = str(Path(tmp) / f"{a.collection}.lance")
        shutil.copytree(src, path)
        rows0 = lance.dataset(path).count_rows()
        grown = 0
        for k in (int(x) for x in a.grow.split(",")):
            while grown < k:  # grow by copies of the original rows, folded in (merged)
                grown += 1
                append_copy(path, rows0, f"#g{grown}")
                lance.dataset(path).optimize.optimize_indices()
                lance.dataset(path).cleanup_old_versions(older_than=timedelta(seconds=1))
            n = lance.dataset(path).count_rows()
            load = os.getloadavg()[0]
            print(f"table {n} rows, folding {a.rows} rows, load {load:.1f}", flush=True)
            index_updates(path, a.rows, peak)
            probes(tmp, a.collection, peak)
            lance.dataset(path).cleanup_old_versions(older_than=timedelta(seconds=1))
            print(f"  load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
