"""Where a first ingest's memory goes: peak RSS of a first ingest, split by what is loaded.

    .venv/bin/python -m bench run ingest_memory [--limits 12,500] [--guard on|off]
        [--interval-ms 20] [--quick] [--json [OUT]]

Two measurements, each in fresh processes (peak RSS from the kernel, `wait4`'s ru_maxrss):

1. **What each part costs loaded** (one process, `--_parts`): resident memory after each of,
   in this order, the interpreter, the CLI's imports, polars, Dagster with the job's
   definitions built, LanceDB with a store opened, the numpy MiniLM (what small work and the
   guard's small batches use), the guard (its weights), torch, and MiniLM on torch (the
   model loaded and one text embedded). Each row is the growth over the row before it.
2. **A first ingest** of the first N SciFact abstracts (each of `--limits`) with the default
   configuration (MiniLM, LanceDB, the guard `--guard`, Clef off) through `run_ingestion`,
   in one fresh process, as `clef-pipelines ingest` runs it (the job's steps run in that
   process: the executor is in-process, so there is no separate run process). A thread
   samples the process's resident memory every `--interval-ms` and records, per stage that
   reports progress (list, parse, screen, chunk, embed, sync, index), the highest sample,
   and the resident memory at the moment each heavy part first appears in `sys.modules`
   (Dagster, LanceDB, torch) or is first loaded (the numpy MiniLM, the torch MiniLM, the
   guard).

`--quick`: 12 abstracts only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench._common import SCIFACT, bench_cmd, child_env, need_shared
from bench.ingest_peer import clean_env, write_corpus

CORPUS = SCIFACT / "corpus.jsonl"
QUICK = {"limits": "12"}


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _config(root: Path, corpus: Path, guard: str) -> Path:
    import yaml

    cfg = root / "ingest.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(root / "state"),
                "collection": "scifact",
                "sources": [{"name": "scifact", "path": str(corpus), "kind": "jsonl"}],
                "embedder": {"kind": "minilm"},
                "store": {"kind": "lancedb"},
                "clef": {"backend": "off"},
                "steering": {"guard": {"mode": guard}},
            }
        )
    )
    return cfg


def parts_child(cfg: Path, out: Path) -> None:
    """Load the parts one after another; the resident memory after each."""
    rows: list[tuple[str, float]] = [("interpreter and this benchmark's imports", _rss_mb())]

    def step(name: str) -> None:
        rows.append((name, _rss_mb()))

    import clef_pipelines.cli.main  # noqa: F401
    from clef_pipelines.config import load_settings

    settings = load_settings(cfg)
    step("the CLI's imports, the settings loaded")
    import polars  # noqa: F401

    step("polars")
    from clef_pipelines.jobs.location import build_definitions

    build_definitions(settings).resolve_job_def("ingestion_job")
    step("Dagster, the job's definitions built")
    from clef_pipelines.stores import open_store

    store = open_store(settings.store, settings.data_path)
    store.list_collections()
    step("LanceDB, a store opened")
    from clef_pipelines.embedding.minilm import numpy_minilm

    numpy_minilm()._embed_batches(["one short text about memory"])
    step("the numpy MiniLM, one text embedded")
    from clef_pipelines.guard.loading import configured_guard

    configured_guard(settings.steering.guard, settings.base_dir)
    step("the guard's weights")
    import torch  # noqa: F401

    step("torch imported")
    from clef_pipelines.embedding.minilm import MiniLMEmbedder

    MiniLMEmbedder(small_work_tokens=0).embed(["one short text about memory"])
    step("MiniLM on torch, one text embedded")
    out.write_text(json.dumps({"rows": rows}))


#: What the ingest child watches for: (label, test run in the sampling thread).
def _watched() -> list[tuple[str, Any]]:
    def loaded(name: str, attr: str) -> Any:
        def test() -> bool:
            module = sys.modules.get(name)
            return bool(module is not None and getattr(module, attr, None))

        return test

    return [
        ("dagster imported", lambda: "dagster" in sys.modules),
        ("lancedb imported", lambda: "lancedb" in sys.modules),
        ("numpy MiniLM loaded", loaded("clef_pipelines.embedding.minilm", "_NUMPY")),
        ("guard loaded", loaded("clef_pipelines.guard.loading", "_GUARDS")),
        ("torch imported", lambda: "torch" in sys.modules),
        ("torch MiniLM loaded", loaded("clef_pipelines.embedding.minilm", "_SHARED")),
    ]


def ingest_child(cfg: Path, out: Path, interval_s: float) -> None:
    """One first ingest in this process, its memory sampled."""
    from clef_pipelines.config import load_settings
    from clef_pipelines.ingest import progress
    from clef_pipelines.jobs.launch import run_ingestion

    stage = {"now": "start (before the run)"}
    peaks: dict[str, float] = {}
    first_seen: dict[str, float] = {}
    watched = _watched()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            rss = _rss_mb()
            peaks[stage["now"]] = max(peaks.get(stage["now"], 0.0), rss)
            for label, test in watched:
                if label not in first_seen and test():
                    first_seen[label] = rss
            time.sleep(interval_s)

    def listener(name: str, done: int, total: int) -> None:
        stage["now"] = name

    progress.add_listener(listener)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    (report,) = run_ingestion(load_settings(cfg), ["scifact"])
    wall = time.perf_counter() - started
    stage["now"] = "end (after the run)"
    time.sleep(interval_s * 3)
    stop.set()
    sampler.join()
    out.write_text(
        json.dumps(
            {
                "success": report.success,
                "error": report.error,
                "wall_s": wall,
                "chunks": report.assets.get("chunks", {}).get("chunks"),
                "stage_peaks_mb": peaks,
                "first_seen_mb": first_seen,
            }
        )
    )


def _child(args: list[str]) -> tuple[dict[str, Any], float]:
    """Run `python -m bench run ingest_memory ARGS` in a fresh process: (its JSON, peak MB)."""
    out = Path(args[-1])
    # No Clef or Cloudflare variables, no hub downloads (`ingest_peer.clean_env`).
    env = clean_env({"PYTHONPATH": child_env()["PYTHONPATH"]})
    proc = subprocess.Popen(bench_cmd("ingest_memory", *args), env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0 or not out.exists():
        raise SystemExit(f"ingest_memory child {args[0]} failed (status {status})")
    return json.loads(out.read_text()), usage.ru_maxrss / 1024  # KiB on Linux


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--limits", default="12,500", help="First N abstracts, comma-separated.")
    parser.add_argument("--guard", default="on", choices=["on", "off"])
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--_parts", nargs=2, metavar=("CFG", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--_ingest", nargs=3, metavar=("CFG", "INTERVAL", "OUT"), help=argparse.SUPPRESS
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args._parts:
        parts_child(Path(args._parts[0]), Path(args._parts[1]))
        return {}
    if args._ingest:
        ingest_child(Path(args._ingest[0]), Path(args._ingest[2]), float(args._ingest[1]))
        return {}
    need_shared(args.corpus)
    load_before = os.getloadavg()[0]
    results: dict[str, Any] = {"guard": args.guard, "ingests": []}
    with tempfile.TemporaryDirectory(prefix="bench-ingest-memory-") as tmp:
        root = Path(tmp)
        corpus = root / "corpus.jsonl"
        write_corpus(args.corpus, corpus, 12)
        parts, parts_peak = _child(
            ["--_parts", str(_config(root, corpus, args.guard)), str(root / "parts.json")]
        )
        print("\nwhat each part adds, loaded one after another in one process:\n")
        print("| part | resident MB after | added MB |\n|---|---:|---:|")
        before = 0.0
        for name, rss in parts["rows"]:
            print(f"| {name} | {rss:,.0f} | {rss - before:+,.0f} |")
            before = rss
        print(f"| (peak of that process) | {parts_peak:,.0f} | |")
        results["parts"] = {"rows": parts["rows"], "peak_mb": round(parts_peak)}
        for limit in [int(x) for x in args.limits.split(",") if x]:
            work = root / f"n{limit}"
            work.mkdir()
            corpus = work / "corpus.jsonl"
            n = write_corpus(args.corpus, corpus, limit)
            cfg = _config(work, corpus, args.guard)
            os.environ["DAGSTER_HOME"] = str(work / "dagster")
            data, peak = _child(
                ["--_ingest", str(cfg), str(args.interval_ms / 1000), str(work / "out.json")]
            )
            if not data["success"]:
                raise SystemExit(f"the first ingest of {n} abstracts failed: {data['error']}")
            print(
                f"\nfirst ingest of {n} SciFact abstracts (guard {args.guard}): peak "
                f"{peak:,.0f} MB, {data['wall_s']:.1f} s, {data['chunks']} chunks\n"
            )
            print("| stage (progress) | highest sample MB |\n|---|---:|")
            for name, mb in data["stage_peaks_mb"].items():
                print(f"| {name} | {mb:,.0f} |")
            print("\n| first seen | resident MB then |\n|---|---:|")
            for name, mb in sorted(data["first_seen_mb"].items(), key=lambda kv: kv[1]):
                print(f"| {name} | {mb:,.0f} |")
            results["ingests"].append(
                {"documents": n, "peak_mb": round(peak), **{k: data[k] for k in data}}
            )
    load_after = os.getloadavg()[0]
    print(f"\nload average {load_before:.1f} before, {load_after:.1f} after")
    results["load"] = f"{load_before:.1f}-{load_after:.1f}"
    return results
