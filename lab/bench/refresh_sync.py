"""The `store_sync` step of a refresh: a fraction of a kept run's documents edited, synced into
a copy of that run's store (issue 13: the 1% edited rerun of a large source).

Copies a kept `bench/scale.py` run's LanceDB folder (the table after its first run), picks
every k-th document so that ``--fraction`` of them change, gives each changed document a new
last chunk (a new record id and text, the same vector) and keeps its other chunks, then runs
the step's own code (`batch_steps.sync_batches`: upserts, stale deletes, manifest, upkeep) with
those documents marked CHANGED. Prints the step's seconds, the store calls it made (writes,
deletes, upkeeps), the rows deleted, the peak resident memory, and checks that the table
holds as many rows as before with every replaced chunk gone.

    # the refresh alone, the working tree's code against a commit's, from one kept run:
    nice -n 5 .venv/bin/python -m lab.bench.refresh_sync \\
        --run-dir /tmp/scale-keep/n50000 --compare 0f8d900,.
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
import uuid
from pathlib import Path
from typing import Any

import polars as pl

REPO = Path(__file__).resolve().parents[2]
# `--code DIR`: import clef_pipelines from DIR (another commit's code, see --compare).
from lab.bench._code_at import code_at, code_env, reexec_with_code  # noqa: E402

reexec_with_code("lab.bench.refresh_sync")
from clef_pipelines.config import load_settings  # noqa: E402
from clef_pipelines.embedding import make_embedder  # noqa: E402
from clef_pipelines.ingest import batch_steps  # noqa: E402
from clef_pipelines.ingest.batches import BATCH, FrameBatches  # noqa: E402
from clef_pipelines.ingest.documents import CHANGED  # noqa: E402
from clef_pipelines.ingest.process_memory import limit_malloc_arenas, peak_rss_gb  # noqa: E402
from clef_pipelines.stores import open_store  # noqa: E402
from lab.bench._store_calls import time_store_calls  # noqa: E402


class EditedBatches(FrameBatches):
    """The kept run's embedded batches, holding only the edited documents' chunks."""

    def __init__(self, directory: Path, edited: set[str]) -> None:
        super().__init__(directory)
        self.edited = edited
        self.replaced: list[str] = []  # record ids that the edit replaced

    def read(self, key: int) -> pl.DataFrame:
        frame = super().read(key).filter(pl.col("doc_id").is_in(list(self.edited)))
        if frame.height == 0:
            return frame
        last = pl.col("chunk_index") == pl.col("chunk_index").max().over("doc_id")
        self.replaced += frame.filter(last)["id"].to_list()
        new_ids = [str(uuid.uuid5(uuid.NAMESPACE_OID, f"{i}:edited")) for i in frame["id"]]
        return frame.with_columns(
            pl.when(last).then(pl.Series(new_ids)).otherwise(pl.col("id")).alias("id"),
            pl.when(last)
            .then(pl.col("text") + " Edited passage about refresh.")
            .otherwise(pl.col("text"))
            .alias("text"),
        )


def refresh(a: argparse.Namespace) -> dict[str, Any]:
    limit_malloc_arenas()  # as the ingest process does (clef_pipelines/definitions.py)
    load_start = os.getloadavg()[0]
    clef = a.run_dir / "state" / "intermediates" / "clef"
    inventory = pl.read_parquet(clef / "source_documents" / f"{a.source}.parquet")
    step = max(1, round(1 / a.fraction))
    edited = inventory.sort("doc_id").gather_every(step)
    touched = edited.with_columns(pl.lit(CHANGED).alias("status"))
    embedded = EditedBatches(clef / "embeddings" / a.source, set(edited["doc_id"]))
    with tempfile.TemporaryDirectory(prefix="bench-refresh-sync-", dir=a.tmp) as tmp:
        shutil.copytree(a.run_dir / "state" / "lancedb", Path(tmp) / "lancedb")
        raw = json.loads(json.dumps(_yaml(a.run_dir / "bench.yaml")))
        raw["data_dir"] = tmp
        cfg = Path(tmp) / "bench.yaml"
        cfg.write_text(json.dumps(raw))
        settings = load_settings(cfg)
        try:  # opened as the sync step's store resource opens it
            store = open_store(settings.store, settings.data_path, for_pipeline=True)
        except TypeError:  # code before for_pipeline (--compare, --code)
            store = open_store(settings.store, settings.data_path)
        embedder = make_embedder(settings.embedder)
        collection = settings.collection_of(settings.source(a.source))
        rows_before = store.count(collection)
        log: list[dict[str, Any]] = []
        time_store_calls(store, log)
        t0 = time.perf_counter()
        done = batch_steps.sync_batches(
            settings, a.source, store, embedder, touched.select("doc_id", "status", BATCH), embedded
        )
        seconds = time.perf_counter() - t0
        rows_after = store.count(collection)
        left = sum(1 for _ in store.scan(collection, where={"id": {"in": embedded.replaced}}))
    if rows_after != rows_before or left:
        raise SystemExit(f"wrong refresh: {rows_before} -> {rows_after} rows, {left} stale left")
    calls = {k: sum(1 for e in log if e["kind"] == k) for k in ("write", "delete", "upkeep")}
    return {
        "documents": inventory.height,
        "edited": edited.height,
        "rows": rows_before,
        "store_sync_s": round(seconds, 1),
        "writes": calls["write"],
        "writes_s": round(sum(e["s"] for e in log if e["kind"] == "write"), 1),
        "deletes": calls["delete"],
        "deletes_s": round(sum(e["s"] for e in log if e["kind"] == "delete"), 1),
        "upkeeps": calls["upkeep"],
        "upkeeps_s": round(sum(e["s"] for e in log if e["kind"] == "upkeep"), 1),
        "deleted_stale": done.report.deleted_stale,
        "peak_gb": peak_rss_gb(),
        "load": f"{load_start:.1f} to {os.getloadavg()[0]:.1f}",
    }


def compare(a: argparse.Namespace) -> None:
    """The refresh with each commit's code (``.``: the working tree), one child process each
    (so each peak is its own), then one table."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-refresh-sync-code-") as tmp:
        for rev in a.compare.split(","):
            code = code_at(rev, Path(tmp))
            out = Path(tmp) / "summary.json"
            cmd = [
                sys.executable,
                "-m",
                "lab.bench.refresh_sync",
                "--run-dir",
                str(a.run_dir),
                "--code",
                str(code),
            ]
            cmd += ["--fraction", str(a.fraction), "--source", a.source, "--json", str(out)]
            if a.tmp:
                cmd += ["--tmp", str(a.tmp)]
            print(f"== {rev}", flush=True)
            subprocess.run(cmd, check=True, env=code_env(code))
            rows.append({"code": rev, **json.loads(out.read_text())})
    print(
        "\n| code | documents | edited | rows | store_sync s | writes | writes s | deletes "
        "| deletes s | upkeeps | upkeeps s | stale rows deleted | peak GB | load |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    )
    for r in rows:
        print(
            f"| {r['code']} | {r['documents']:,} | {r['edited']:,} | {r['rows']:,} | "
            f"{r['store_sync_s']} | {r['writes']} | {r['writes_s']} | {r['deletes']} | "
            f"{r['deletes_s']} | {r['upkeeps']} | {r['upkeeps_s']} | {r['deleted_stale']:,} | "
            f"{r['peak_gb']:.2f} | {r['load']} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, required=True, help="A kept bench_scale size folder.")
    ap.add_argument("--fraction", type=float, default=0.01, help="Documents edited (0.01: 1%%).")
    ap.add_argument("--source", default="scale")
    ap.add_argument("--tmp", type=Path, help="Where the store's copy goes (default: $TMPDIR).")
    ap.add_argument("--json", type=Path, help="Write the summary here too.")
    ap.add_argument("--code", type=Path, help="Import clef_pipelines from here.")
    ap.add_argument(
        "--compare", help="Commits to run, comma-separated ('.': the working tree), then a table."
    )
    a = ap.parse_args()
    if not 0 < a.fraction <= 1:
        ap.error("--fraction must be in (0, 1]")
    if a.compare:
        compare(a)
        return
    summary = refresh(a)
    print(json.dumps(summary), flush=True)
    if a.json:
        a.json.write_text(json.dumps(summary, indent=1))


def _yaml(path: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(path.read_text()) or {}


if __name__ == "__main__":
    main()
