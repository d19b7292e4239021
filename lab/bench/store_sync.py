"""The `store_sync` step alone, as the table grows (issue 13, item 3: linear time).

Replays the sync of a kept `bench/scale.py` run: its inventory (`source_documents`) and its
embedded chunks (`embeddings`, the Parquet batches the step reads) go through the step's own
code (`batch_steps.sync_batches`: writes, stale deletes, manifest, closing upkeep; then the
totals the asset reads for its metadata) into a fresh LanceDB folder, with the run's
settings. Prints, every ``--every`` rows, the table's size, the mean milliseconds of a write
(one slice of `sync_batch_rows` rows, upkeep not included) over that window, and the upkeeps
run in it; then the step's total seconds, ms per document and per 1,000 chunks, and the peak
resident memory (`ru_maxrss`; run one size per process so each peak is its own).

    # a kept run (the Parquet intermediates), once per size:
    nice -n 5 .venv/bin/python -m bench run scale --sizes 50000 --runs first --guard off \\
        --keep /tmp/scale-keep
    # the sync step alone, replayed from it:
    nice -n 5 .venv/bin/python -m lab.bench.store_sync --run-dir /tmp/scale-keep/n50000
    # only the first N chunks (whole batches are cut at N):
    nice -n 5 .venv/bin/python -m lab.bench.store_sync --run-dir ... --rows 100000
    # four copies of the run's documents, each with ids of its own (4 times the size):
    nice -n 5 .venv/bin/python -m lab.bench.store_sync --run-dir ... --repeat 4
    # where the memory goes: resident memory sampled every 50 ms, its maximum per part (writes,
    # each part of an upkeep, the totals and each check), glibc heap and LanceDB cache per line:
    nice -n 5 .venv/bin/python -m lab.bench.store_sync --run-dir ... --phases
    # a setting changed for the replay:
    nice -n 5 .venv/bin/python -m lab.bench.store_sync --run-dir ... \\
        --set store.lancedb.metadata_cache_mb=16
    # before and after side by side: a commit's code and the working tree, two sizes:
    nice -n 5 .venv/bin/python -m lab.bench.store_sync --compare d358147,. \\
        --run-dir /tmp/scale-keep/n5000 --run-dir /tmp/scale-keep/n50000
    # one run folder once and twice over (--repeat takes a list with --compare):
    nice -n 5 .venv/bin/python -m lab.bench.store_sync --compare 0f8d900,. \\
        --run-dir /tmp/scale-keep/n50000 --repeat 1,2 --phases
"""

from __future__ import annotations

import argparse
import json
import os
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

reexec_with_code("lab.bench.store_sync")

from clef_pipelines.config import load_settings  # noqa: E402
from clef_pipelines.embedding import make_embedder  # noqa: E402
from clef_pipelines.ingest import batch_steps  # noqa: E402
from clef_pipelines.ingest.batches import BATCH, FrameBatches  # noqa: E402
from clef_pipelines.ingest.documents import REMOVED, TO_PROCESS  # noqa: E402
from clef_pipelines.ingest.process_memory import (  # noqa: E402
    limit_malloc_arenas,
    peak_rss_gb,
    rss_gb,
)
from clef_pipelines.ingest.totals import source_totals  # noqa: E402
from clef_pipelines.steering import checks  # noqa: E402
from clef_pipelines.stores import open_store  # noqa: E402
from lab.bench._store_calls import time_store_calls  # noqa: E402

#: Batch keys of the copies made by --repeat: copy r's batch k is r * _STRIDE + k.
_STRIDE = 1_000_000


def _copy_ids(ids: pl.Series, r: int) -> pl.Series:
    """Ids of copy ``r`` (copy 0 keeps the run's own): other valid UUIDs, one per id."""
    if r == 0:
        return ids
    return pl.Series(ids.name, [str(uuid.uuid5(uuid.NAMESPACE_OID, f"{i}:{r}")) for i in ids])


def _copy_docs(frame: pl.DataFrame, r: int) -> pl.DataFrame:
    """Copy ``r`` of a frame with ``doc_id`` and ``batch`` (and ``id``, if any) made its own."""
    if r == 0:
        return frame
    out = frame.with_columns(
        (pl.col("doc_id") + f"~{r}").alias("doc_id"),
        (pl.col(BATCH) + r * _STRIDE).alias(BATCH),
    )
    return out.with_columns(_copy_ids(out["id"], r)) if "id" in out.columns else out


class ReplayedBatches(FrameBatches):
    """The run's embedded batches, cut after ``limit`` rows (--rows), or ``repeat`` copies of
    them, each with document ids and record ids of its own (--repeat: a source that many
    times the run's size, with the same documents' text and vectors)."""

    def __init__(self, directory: Path, limit: int | None, repeat: int = 1) -> None:
        super().__init__(directory)
        self.limit = limit
        self.repeat = repeat
        self.given = 0

    def keys(self) -> list[int]:
        own = list(self.index())  # the run's batch keys
        return [r * _STRIDE + k for r in range(self.repeat) for k in own]

    def rows(self) -> int:
        return super().rows() * self.repeat

    def read(self, key: int) -> pl.DataFrame:
        r, k = divmod(key, _STRIDE)
        frame = _copy_docs(super().read(k), r)
        if self.limit is None:
            return frame
        frame = frame.head(max(0, self.limit - self.given))
        self.given += frame.height
        return frame


def _instrument(store: Any, log: list[dict[str, Any]], upkeep_lines: bool = False) -> None:
    """Time every write, delete and upkeep of the store; with ``upkeep_lines``, a line per
    upkeep (the table's rows, its seconds, the peak so far)."""

    def line(args: tuple[Any, ...], took: float) -> None:
        print(
            f"  upkeep at {store.count(*args[:1])} rows: {took:.1f} s, peak {peak_rss_gb():.2f} GB",
            flush=True,
        )

    time_store_calls(store, log, line if upkeep_lines else None)


class PhaseSampler:
    """Resident memory sampled every ``interval`` s by a thread, its maximum kept per phase
    (``--phases``): which part of the sync (a write, a delete, an upkeep's compaction, index
    update or version clean-up) holds the memory when the process peaks. Phases nest: the
    innermost one open is charged."""

    def __init__(self, interval: float = 0.05) -> None:
        import threading

        self.stack: list[str] = ["other"]
        self.peak: dict[str, float] = {}
        self.window = 0.0  # max since the last `take_window`
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.sample()

    def sample(self) -> float:
        now = rss_gb()
        name = self.stack[-1]
        self.peak[name] = max(self.peak.get(name, 0.0), now)
        self.window = max(self.window, now)
        return now

    def take_window(self) -> float:
        w, self.window = self.window, self.sample()
        return w

    def wrap(self, owner: Any, attr: str, name: str, report: bool = False) -> None:
        """Charge the time inside ``owner.attr`` (a class's or an object's) to ``name``; with
        ``report``, print its seconds and the resident memory before, at most and after."""
        real = getattr(owner, attr)
        sampler = self

        def inside(*args: Any, **kw: Any) -> Any:
            before = sampler.sample()
            sampler.stack.append(name)
            outer_window, sampler.window = sampler.window, before
            t0 = time.perf_counter()
            try:
                return real(*args, **kw)
            finally:
                took = time.perf_counter() - t0
                after = sampler.sample()
                top = sampler.window
                sampler.stack.pop()
                sampler.window = max(outer_window, top)
                if report:
                    print(
                        f"    {name}: {took:6.1f} s  rss {before:.2f} -> max {top:.2f} -> "
                        f"{after:.2f} GB",
                        flush=True,
                    )

        setattr(owner, attr, inside)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return {k: round(v, 3) for k, v in sorted(self.peak.items(), key=lambda kv: -kv[1])}


def _malloc_gb() -> str:
    """glibc's heap now (mallinfo2): in use and free but kept, in GB ('' elsewhere): tells
    memory the process holds from memory freed that its arenas have not returned."""
    import ctypes
    import ctypes.util

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (n, ctypes.c_size_t)
            for n in [
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            ]
        ]

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.mallinfo2.restype = MallInfo2
        m = libc.mallinfo2()
    except (OSError, AttributeError):
        return ""
    import pyarrow as pa

    return (
        f"heap used {(m.uordblks + m.hblkhd) / 1e9:.2f} free {m.fordblks / 1e9:.2f}  "
        f"arrow {pa.total_allocated_bytes() / 1e9:.2f}  "
    )


def _capture_sessions() -> list[Any]:
    """The LanceDB sessions made from now on (``--phases`` reports their caches' size)."""
    import lancedb

    made: list[Any] = []
    real = lancedb.Session

    def capture(*args: Any, **kw: Any) -> Any:
        made.append(real(*args, **kw))
        return made[-1]

    lancedb.Session = capture
    return made


def _sample_phases(store: Any) -> PhaseSampler:
    """A `PhaseSampler` over the store's writes and deletes and over the parts of an upkeep
    (Lance's compaction, index update and version clean-up, wrapped on their classes)."""
    from lance.dataset import DatasetOptimizer, LanceDataset

    sampler = PhaseSampler()
    sampler.wrap(DatasetOptimizer, "compact_files", "upkeep: compact_files", report=True)
    sampler.wrap(DatasetOptimizer, "optimize_indices", "upkeep: optimize_indices", report=True)
    sampler.wrap(LanceDataset, "cleanup_old_versions", "upkeep: cleanup_old_versions", True)
    for name in ("insert", "upsert"):
        if hasattr(store, name):
            sampler.wrap(store, name, "write")
    sampler.wrap(store, "delete", "delete")
    sampler.wrap(store, "_optimize", "upkeep: other")
    return sampler


def compare(a: argparse.Namespace) -> None:
    """Each run folder with each commit's code (``.``: the working tree), one child process
    each (so each peak is its own), then one table."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-store-sync-code-") as tmp:
        for rev in a.compare.split(","):
            code = code_at(rev, Path(tmp))
            for run_dir, repeat in [(d, k) for d in a.run_dir for k in a.repeat.split(",")]:
                out = Path(tmp) / "summary.json"
                cmd = [
                    sys.executable,
                    "-m",
                    "lab.bench.store_sync",
                    "--run-dir",
                    str(run_dir),
                    "--code",
                    str(code),
                ]
                cmd += ["--every", str(a.every), "--source", a.source, "--json", str(out)]
                cmd += [f"--set={item}" for item in a.set]
                if a.rows:
                    cmd += ["--rows", str(a.rows)]
                if repeat != "1":
                    cmd += ["--repeat", repeat]
                if a.phases:
                    cmd += ["--phases"]
                print(f"== {rev} {run_dir} x{repeat}", flush=True)
                subprocess.run(cmd, check=True, env=code_env(code))
                rows.append({"code": rev, **json.loads(out.read_text())})
    print(
        "\n| code | documents | chunks | store_sync s | ms per document | writes s | upkeeps "
        "| upkeeps s | totals s | peak GB | load |\n|---|---:|---:|---:|---:|---:|---:|---:|"
        "---:|---:|---|"
    )
    for r in rows:
        print(
            f"| {r['code']} | {r['documents']:,} | {r['chunks']:,} | {r['store_sync_s']} | "
            f"{r['ms_per_document']} | {r['writes_s']} | {r['upkeeps']} | {r['upkeeps_s']} | "
            f"{r['totals_s']} | {r['peak_gb']:.2f} | {r['load_start']} to {r['load_end']} |"
        )
    for r in rows:
        if "phase_peak_gb" in r:
            print(f"{r['code']} {r['documents']:,}: peak by phase {r['phase_peak_gb']}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--run-dir",
        type=Path,
        action="append",
        required=True,
        help="A kept bench_scale size folder (repeat for several sizes with --compare).",
    )
    ap.add_argument("--rows", type=int, help="Only the first N embedded chunks.")
    ap.add_argument(
        "--repeat",
        default="1",
        help="Sync K copies of the run's documents (own doc and record ids): K times the size "
        "(with --compare, a comma-separated list: each run folder at each K).",
    )
    ap.add_argument("--every", type=int, default=50_000, help="Rows per progress line.")
    ap.add_argument("--upkeeps", action="store_true", help="A line per upkeep.")
    ap.add_argument(
        "--phases",
        action="store_true",
        help="Sample resident memory (a thread, every 50 ms) and report its maximum per part "
        "of the sync (writes, deletes, each kind of upkeep work); a line per upkeep part.",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a setting of the run's bench.yaml (dotted, e.g. sync_batch_rows=4096 "
        "or store.lancedb.metadata_cache_mb=32).",
    )
    ap.add_argument("--source", default="scale")
    ap.add_argument("--json", type=Path, help="Write the summary here too.")
    ap.add_argument("--code", type=Path, help="Import clef_pipelines from here.")
    ap.add_argument(
        "--compare",
        help="Commits to run, comma-separated ('.': the working tree), each in a child "
        "process per --run-dir, then one table (e.g. d358147,.).",
    )
    a = ap.parse_args()
    if a.compare:
        compare(a)
        return
    if len(a.run_dir) != 1:
        ap.error("several --run-dir need --compare")
    a.run_dir = a.run_dir[0]
    a.repeat = int(a.repeat)
    limit_malloc_arenas()  # as the ingest process does (clef_pipelines/definitions.py)
    load_start = os.getloadavg()
    clef = a.run_dir / "state" / "intermediates" / "clef"
    inventory = pl.read_parquet(clef / "source_documents" / f"{a.source}.parquet")
    inventory = pl.concat([_copy_docs(inventory, r) for r in range(a.repeat)])
    embedded = ReplayedBatches(clef / "embeddings" / a.source, a.rows, a.repeat)
    with tempfile.TemporaryDirectory(prefix="bench-store-sync-") as tmp:
        raw = json.loads(json.dumps(_yaml(a.run_dir / "bench.yaml")))
        raw["data_dir"] = tmp
        for item in a.set:
            key, _, value = item.partition("=")
            *path, last = key.split(".")
            node = raw
            for part in path:
                node = node.setdefault(part, {})
            node[last] = yaml_value(value)
        cfg = Path(tmp) / "bench.yaml"
        cfg.write_text(json.dumps(raw))
        settings = load_settings(cfg)
        sessions = _capture_sessions() if a.phases else []
        try:  # opened as the sync step's store resource opens it
            store = open_store(settings.store, settings.data_path, for_pipeline=True)
        except TypeError:  # code before for_pipeline (--compare, --code)
            store = open_store(settings.store, settings.data_path)
        embedder = make_embedder(settings.embedder)
        touched = inventory.filter(pl.col("status").is_in([*TO_PROCESS, REMOVED]))
        if a.rows is not None:
            touched = touched.filter(pl.col(BATCH) <= max(embedded.keys()))
        log: list[dict[str, Any]] = []
        sampler = _sample_phases(store) if a.phases else None
        _instrument(store, log, a.upkeeps or a.phases)
        batch_rows = settings.sync_batch_rows
        printed = [0, 0]  # log entries and rows covered by the lines printed so far
        t0 = time.perf_counter()

        def line(final: bool = False) -> None:
            part = log[printed[0] :]
            writes = [e["s"] for e in part if e["kind"] == "write"]
            upkeeps = [e["s"] for e in part if e["kind"] == "upkeep"]
            rows = printed[1] + len(writes) * batch_rows
            if not final and rows - printed[1] < a.every:
                return
            print(
                f"{min(rows, embedded.rows()):>9} rows  {time.perf_counter() - t0:7.1f} s  "
                f"write {1000 * sum(writes) / max(1, len(writes)):6.0f} ms mean "
                f"({len(writes)} writes, {sum(writes):6.1f} s)  upkeep {len(upkeeps)} "
                f"({sum(upkeeps):5.1f} s)  peak {peak_rss_gb():.2f} GB  "
                + (f"window max {sampler.take_window():.2f}  " if sampler else "")
                + f"rss {rss_gb():.2f}  "
                + (_malloc_gb() if sampler else "")
                + "".join(
                    f"cache {x.size_bytes / 1e9:.3f} GB/{x.approx_num_items}  " for x in sessions
                )
                + f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            printed[0], printed[1] = len(log), rows

        for name in ("upsert", "insert"):
            if not hasattr(store, name):  # (no `insert` before it was added)
                continue
            real = getattr(store, name)

            def write_and_report(*args: Any, _real: Any = real, **kw: Any) -> Any:
                out = _real(*args, **kw)
                line()
                return out

            setattr(store, name, write_and_report)
        done = batch_steps.sync_batches(settings, a.source, store, embedder, touched, embedded)
        line(final=True)
        # What the asset reads after the sync for its metadata (part of its seconds).
        t1 = time.perf_counter()
        collection = settings.collection_of(settings.source(a.source))
        after = [
            (
                "totals",
                lambda: (store.count(collection), source_totals(store, collection, a.source)),
            ),
            # ... and the asset's checks (each reads the source's records again).
            (
                "check: no_removed_documents",
                lambda: checks.no_removed_documents(store, collection, a.source, inventory),
            ),
            (
                "check: quarantine_hidden",
                lambda: checks.quarantine_hidden(store, collection, a.source),
            ),
        ]
        for name, step in after:
            if sampler is not None:
                sampler.stack.append(name)
                before = sampler.window = sampler.sample()
                t2 = time.perf_counter()
            step()
            if sampler is not None:
                top = sampler.take_window()
                sampler.stack.pop()
                print(
                    f"  {name}: {time.perf_counter() - t2:.1f} s  rss {before:.2f} -> max "
                    f"{top:.2f} -> {rss_gb():.2f} GB",
                    flush=True,
                )
        totals_s = time.perf_counter() - t1
        seconds = time.perf_counter() - t0
        docs = done.report.documents_synced
        summary = {
            "chunks": done.report.upserted,
            "documents": docs,
            "store_sync_s": round(seconds, 1),
            "ms_per_document": round(1000 * seconds / max(1, docs), 2),
            "ms_per_1000_chunks": round(1e6 * seconds / max(1, done.report.upserted), 1),
            "writes": sum(1 for e in log if e["kind"] == "write"),
            "writes_s": round(sum(e["s"] for e in log if e["kind"] == "write"), 1),
            "deletes_s": round(sum(e["s"] for e in log if e["kind"] == "delete"), 1),
            "upkeeps": sum(1 for e in log if e["kind"] == "upkeep"),
            "upkeeps_s": round(sum(e["s"] for e in log if e["kind"] == "upkeep"), 1),
            "totals_s": round(totals_s, 1),
            "peak_gb": peak_rss_gb(),
            "load_start": round(load_start[0], 2),
            "load_end": round(os.getloadavg()[0], 2),
        }
        if sampler is not None:
            summary["phase_peak_gb"] = sampler.stop()
        print(json.dumps(summary), flush=True)
        if a.json:
            a.json.write_text(json.dumps(summary, indent=1))


def yaml_value(text: str) -> Any:
    """A --set value as YAML reads it (numbers, booleans, strings)."""
    import yaml

    return yaml.safe_load(text)


def _yaml(path: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(path.read_text()) or {}


if __name__ == "__main__":
    main()
