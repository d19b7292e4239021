"""The parse step's regroup alone: its time, its peak memory, and the files it leaves.

The parse step reads a source in order and writes one Parquet file per
`batching.batch_documents` parsed documents, each holding a row group of nearly every batch;
`BatchWriter.regroup` then rewrites them as one file per batch (issue 13: bounded memory). This
replays the regroup on a copy of a kept run's parse-step files that were written before it
existed (a `part-*.parquet` layout, e.g. a `bench/scale.py --keep` run made before b4ed775),
in a child process per code version, and prints: seconds, the child's peak resident memory
and how much the regroup added to it and still holds after it (`kept`: where the next steps
start, in the same process), the files' footer bytes (all files and the largest),
row groups per file, and the mean seconds of a batch read (`FrameBatches.read`) afterwards.

    nice -n 5 .venv/bin/python -m lab.bench.regroup \\
        --parsed /tmp/scale-keep/n500000/state/intermediates/clef/parsed_blocks/scale \\
        --compare 0f8d900,.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# `--code DIR`: import clef_pipelines from DIR (another commit's code, see --compare).
from lab.bench._code_at import code_at, code_env, reexec_with_code  # noqa: E402

reexec_with_code("lab.bench.regroup")

import pyarrow.parquet as pq  # noqa: E402

from clef_pipelines.ingest.batches import BatchWriter, FrameBatches  # noqa: E402
from clef_pipelines.ingest.process_memory import (  # noqa: E402
    limit_malloc_arenas,
    peak_rss_gb,
    rss_gb,
)


def regroup(parsed: Path, tmp: Path | None, reads: int, first: int) -> dict[str, object]:
    limit_malloc_arenas()  # as the ingest process does (clef_pipelines/definitions.py)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-regroup-", dir=tmp) as work:
        folder = Path(work) / "parsed"
        folder.mkdir()
        for path in sorted(parsed.glob("part-*.parquet"))[: first or None]:
            shutil.copy(path, folder / path.name)
        inputs = len(list(folder.glob("*.parquet")))
        writer = BatchWriter.__new__(BatchWriter)  # over the copied files, not a fresh folder
        writer.directory, writer._files = folder, inputs
        before = peak_rss_gb()
        t0 = time.perf_counter()
        writer.regroup()
        seconds = time.perf_counter() - t0
        peak = peak_rss_gb()
        # What the process still holds after the regroup: the ingest's next steps run in the
        # same process (Dagster's in-process executor), so this is their starting point.
        after = rss_gb()
        files = sorted(folder.glob("*.parquet"))
        metas = [pq.ParquetFile(p).metadata for p in files]
        batches = FrameBatches(folder)
        keys = batches.keys()
        picked = keys[:: max(1, len(keys) // reads)][:reads]
        t1 = time.perf_counter()
        rows = sum(batches.read(k).height for k in picked)
        read_s = (time.perf_counter() - t1) / max(1, len(picked))
    return {
        "input_files": inputs,
        "files": len(files),
        "regroup_s": round(seconds, 1),
        "peak_gb": round(peak, 2),
        "added_gb": round(peak - before, 2),
        "kept_gb": round(after - before, 2),
        "footer_mb": round(sum(m.serialized_size for m in metas) / 1e6, 1),
        "largest_footer_mb": round(max(m.serialized_size for m in metas) / 1e6, 2),
        "row_groups_per_file": round(sum(m.num_row_groups for m in metas) / len(metas), 1),
        "batch_read_s": round(read_s, 3),
        "rows_read": rows,
        "load": f"{load:.1f} to {os.getloadavg()[0]:.1f}",
    }


def compare(a: argparse.Namespace) -> None:
    """The regroup with each commit's code (``.``: the working tree), a child process each (so
    each peak is its own), then one table."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-regroup-code-") as tmp:
        for rev in a.compare.split(","):
            code = code_at(rev, Path(tmp))
            out = Path(tmp) / "summary.json"
            cmd = [
                sys.executable,
                "-m",
                "lab.bench.regroup",
                "--parsed",
                str(a.parsed),
                "--code",
                str(code),
            ]
            cmd += ["--reads", str(a.reads), "--files", str(a.files), "--json", str(out)]
            if a.tmp:
                cmd += ["--tmp", str(a.tmp)]
            print(f"== {rev}", flush=True)
            subprocess.run(cmd, check=True, env=code_env(code))
            rows.append({"code": rev, **json.loads(out.read_text())})
    print(
        "\n| code | files in | files out | regroup s | peak GB | added GB | kept GB | footers MB "
        "| largest footer MB | row groups a file | batch read s | load |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    )
    for r in rows:
        print(
            f"| {r['code']} | {r['input_files']} | {r['files']} | {r['regroup_s']} | "
            f"{r['peak_gb']:.2f} | {r['added_gb']:.2f} | {r['kept_gb']:.2f} | {r['footer_mb']} | "
            f"{r['largest_footer_mb']} | {r['row_groups_per_file']} | {r['batch_read_s']} | "
            f"{r['load']} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--parsed",
        type=Path,
        required=True,
        help="A parse step's output folder in the part-*.parquet layout (before regroup).",
    )
    ap.add_argument("--reads", type=int, default=16, help="Batches read after the regroup.")
    ap.add_argument(
        "--files", type=int, default=0, help="Only the first N part files (0: all of them)."
    )
    ap.add_argument("--tmp", type=Path, help="Where the copy goes (default: $TMPDIR).")
    ap.add_argument("--json", type=Path, help="Write the summary here too.")
    ap.add_argument("--code", type=Path, help="Import clef_pipelines from here.")
    ap.add_argument(
        "--compare", help="Commits to run, comma-separated ('.': the working tree), then a table."
    )
    a = ap.parse_args()
    if not list(a.parsed.glob("part-*.parquet")):
        ap.error(f"{a.parsed}: no part-*.parquet files (a parse step's output before regroup)")
    if a.compare:
        compare(a)
        return
    summary = regroup(a.parsed, a.tmp, a.reads, a.files)
    print(json.dumps(summary), flush=True)
    if a.json:
        a.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
