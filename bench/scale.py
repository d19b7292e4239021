"""Ingestion at scale: synthetic JSONL documents of 80 to 400 words, hash embedder, one source.

    .venv/bin/python -m bench run scale --sizes 5000,50000 [--store lancedb] [--keep DIR]
        [--batch-documents 2000] [--runs first,unchanged,edited] [--guard off|on]
        [--index on|off] [--resume] [--quick] [--json]

For each size it generates the corpus (seeded, so every run sees the same documents), then runs
the Dagster ingestion job three times, each in a fresh child process: the first run, an
unchanged rerun, and a rerun after 1% of the documents were edited. For each run: wall time,
peak resident memory of the child (``wait4``'s ``ru_maxrss``: the whole ingestion, Dagster
included), and each step's own seconds from its materialisation metadata. The hash embedder
makes the figures the pipeline's own cost, not a model's. Each run also reports the child's CPU
seconds (user + system, from ``wait4``): on a shared machine the wall time follows the load,
the CPU time much less, so CPU ms per document is the figure to compare across sizes when the
load moved. ``--index off`` leaves the LanceDB ANN index unbuilt (its threshold above any
size here), for a run of the streaming steps alone; ``lab/bench/index_segments.py`` measures
the segmented build on its own. Prints a markdown table and writes the rows as JSON next to
the work folder. `--quick`: 1,000 documents. `python -m bench run refresh` reports the two
reruns of the same runs against the first.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench._common import bench_cmd, child_env

QUICK = {"sizes": "1000"}
STEPS = ("source_documents", "parsed_blocks", "chunks", "embeddings", "store_sync")


def _vocabulary(rng: random.Random, size: int = 20_000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 10))) for _ in range(size)]


def _text(rng: random.Random, vocab: list[str]) -> str:
    words = rng.randint(80, 400)
    out: list[str] = []
    sentence = 0
    for i in range(words):
        w = (
            vocab[min(int(rng.paretovariate(1.1)) - 1, len(vocab) - 1)]
            if i % 3
            else rng.choice(vocab)
        )
        if sentence == 0:
            # Sentences start with a capital, as in prose: without one no sentence boundary is
            # found, and every document is split word by word (far slower than real text).
            w = w.capitalize()
        sentence += 1
        if sentence > rng.randint(8, 20):
            w += "."
            sentence = 0
        out.append(w)
    return " ".join(out) + "."


def generate(path: Path, n: int, seed: int = 13) -> None:
    """``n`` JSONL documents: id, title, text of 80-400 words, a year in metadata."""
    rng = random.Random(seed)
    vocab = _vocabulary(rng)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            title = " ".join(rng.choice(vocab) for _ in range(rng.randint(2, 6))).title()
            doc = {
                "id": f"doc-{i:08d}",
                "title": title,
                "text": _text(rng, vocab),
                "metadata": {"year": 1990 + i % 35},
            }
            f.write(json.dumps(doc) + "\n")


def _reusable(corpus: Path, n: int) -> bool:
    """A corpus of this size from an earlier `--keep` run, not edited since."""
    if not corpus.exists() or (corpus.parent / "edited").exists():
        return False
    with corpus.open("rb") as f:
        return sum(1 for _ in f) == n


def edit_one_percent(path: Path, seed: int = 14) -> int:
    """Rewrite 1% of the documents' text in place (same ids); returns how many."""
    rng = random.Random(seed)
    tmp = path.with_suffix(".tmp")
    edited = 0
    with path.open(encoding="utf-8") as src, tmp.open("w", encoding="utf-8") as dst:
        for line in src:
            if rng.random() < 0.01:
                doc = json.loads(line)
                doc["text"] = doc["text"] + f" Edited passage {edited} about refresh."
                line = json.dumps(doc) + "\n"
                edited += 1
            dst.write(line)
    os.replace(tmp, path)
    return edited


def child_run(config: Path, out: Path) -> None:
    """One ingestion run in this process; writes its per-step metadata as JSON."""
    from clef_pipelines.config import load_settings
    from clef_pipelines.jobs.launch import run_ingestion

    settings = load_settings(config)
    started = time.perf_counter()
    (report,) = run_ingestion(settings, ["scale"])
    wall = time.perf_counter() - started
    assets = {
        k: {m: v for m, v in meta.items() if isinstance(v, int | float | str)}
        for k, meta in report.assets.items()
    }
    out.write_text(
        json.dumps(
            {"success": report.success, "error": report.error, "wall_s": wall, "assets": assets}
        )
    )


def measured_run(config: Path, work: Path, label: str) -> dict[str, Any]:
    out = work / f"{label}.json"
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.Popen(
        bench_cmd("scale", "--child", str(config), "--child-out", str(out)),
        env=child_env(),
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if status != 0 or not out.exists():
        raise SystemExit(f"{label}: the ingestion child failed (status {status})")
    result = json.loads(out.read_text())
    if not result["success"]:
        raise SystemExit(f"{label}: {result['error']}")
    assets = result["assets"]
    row: dict[str, Any] = {
        "run": label,
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_gb": round(usage.ru_maxrss / 1024 / 1024, 2),  # ru_maxrss is in KiB on Linux
        # 1-minute load average at the start and end of the run: the machine is shared.
        "load": f"{load_before:.1f}-{os.getloadavg()[0]:.1f}",
        "chunks": assets.get("chunks", {}).get("chunks", 0),
        "embedded": assets.get("embeddings", {}).get("embedded", 0),
        "writes": assets.get("store_sync", {}).get("writes", 0),
    }
    for step in (*STEPS, "vector_indexes"):
        row[f"{step}_s"] = assets.get(step, {}).get("seconds")
    row["vector_index"] = assets.get("vector_indexes", {}).get("vector_index")
    for k in (
        "process_rss_gb_before",
        "process_rss_gb_trimmed",
        "process_peak_gb_before",
        "process_peak_gb_after",
        "vector_index_s",
        "text_index_s",
    ):
        row[f"vector_indexes_{k}"] = assets.get("vector_indexes", {}).get(k)
    return row


def cli_unchanged_run(config: Path, work: Path) -> dict[str, Any]:
    """`clef-pipelines ingest` in a fresh process with nothing changed since the last clean
    run: the no-change fast path (no Dagster run). Fails when it starts a run."""
    out = work / "cli_unchanged.txt"
    cli = str(Path(sys.executable).with_name("clef-pipelines"))
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with out.open("w") as stdout:
        proc = subprocess.Popen(
            [cli, "ingest", "--config", str(config)], env=child_env(), stdout=stdout
        )
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    said = out.read_text()
    if status != 0 or "unchanged since its last clean run" not in said:
        raise SystemExit(f"the unchanged `ingest` started a run (status {status}):\n{said[-2000:]}")
    return {
        "run": "unchanged `ingest` (CLI, no run)",
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_gb": round(usage.ru_maxrss / 1024 / 1024, 2),
        "load": f"{load_before:.1f}-{os.getloadavg()[0]:.1f}",
        "chunks": 0,
        "embedded": 0,
        "writes": 0,
    }


def bench_size(
    n: int,
    root: Path,
    store: str,
    batch_documents: int | None,
    runs: list[str],
    guard: str,
    index: str = "on",
    resume: bool = False,
) -> list[dict[str, Any]]:
    work = root / f"n{n}"
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus.jsonl"
    t = time.perf_counter()
    if resume:
        # A kept folder's corpus and state as they are: the runs continue the earlier ones.
        if not (corpus.exists() and (work / "state").exists()):
            raise SystemExit(f"--resume: {work} holds no corpus and state of an earlier run")
        print(f"# resuming {work} (its corpus and state as they are)", flush=True)
    elif _reusable(corpus, n):
        # Seeded, so the kept corpus of a `--keep` folder is the one `generate` would write
        # (500,000 documents take minutes to generate); its state is not reused.
        for stale in ("state", "dagster"):
            shutil.rmtree(work / stale, ignore_errors=True)
        print(f"# reusing the {n:,} generated documents in {corpus}", flush=True)
    else:
        generate(corpus, n)
        print(f"# generated {n:,} documents in {time.perf_counter() - t:.1f} s", flush=True)
    config = work / "bench.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(work / "state"),
                "collection": "scale",
                "sources": [{"name": "scale", "path": str(corpus), "kind": "jsonl"}],
                "embedder": {"kind": "hash", "dimension": 384},
                "store": {
                    "kind": store,
                    # `--index off`: no ANN build at any size here (queries would search
                    # exactly); the streaming steps' cost alone.
                    **({"lancedb": {"index_threshold": 10**12}} if index == "off" else {}),
                },
                **({"batching": {"batch_documents": batch_documents}} if batch_documents else {}),
                # The offline guard runs MiniLM over every paragraph: a model's cost, like an
                # embedder's. Off by default here so the figures are the pipeline's own, as
                # with the hash embedder; `--guard on` measures the default configuration.
                "steering": {"guard": {"mode": guard}},
            }
        )
    )
    os.environ["DAGSTER_HOME"] = str(work / "dagster")
    rows = []
    for key, label in (("first", "first run"), ("unchanged", "unchanged rerun")):
        if key in runs:
            rows.append({"documents": n, **measured_run(config, work, label.replace(" ", "_"))})
            print(f"# {n:,} {label}: {rows[-1]}", flush=True)
    if "cli" in runs:
        rows.append({"documents": n, **cli_unchanged_run(config, work)})
        print(f"# {n:,} unchanged `ingest` (CLI): {rows[-1]}", flush=True)
    if "edited" in runs:
        edited = edit_one_percent(corpus)
        (work / "edited").touch()
        rows.append(
            {"documents": n, **measured_run(config, work, "edited_rerun"), "edited": edited}
        )
        rows[-1]["run"] = f"1% edited rerun ({edited} docs)"
        print(f"# {n:,} edited: {rows[-1]}", flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    def s(v: Any) -> str:
        return "" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)

    lines = [
        "| documents | run | wall s | peak GB | source_documents s | parsed_blocks s | chunks s "
        "| embeddings s | store_sync s | vector_indexes s | chunks | writes | ms per doc "
        "| CPU ms per doc | load |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['documents']:,} | {r['run']} | {s(r['wall_s'])} | {s(r['peak_rss_gb'])} | "
            + " | ".join(s(r.get(f"{k}_s")) for k in (*STEPS, "vector_indexes"))
            + f" | {r['chunks']:,} | {r['writes']:,} | {1000 * r['wall_s'] / r['documents']:.2f}"
            + f" | {1000 * r.get('cpu_s', 0) / r['documents']:.2f} | {r.get('load', '')} |"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="5000,50000", help="Comma-separated document counts.")
    parser.add_argument("--store", default="lancedb", choices=["lancedb", "memory", "qdrant"])
    parser.add_argument("--keep", type=Path, help="Work folder to keep (default: a temp folder).")
    parser.add_argument(
        "--batch-documents",
        type=int,
        help="batching.batch_documents of the runs (default: the pipeline's default).",
    )
    parser.add_argument(
        "--runs",
        default="first,unchanged,edited",
        help="Which runs per size: first, unchanged (rerun), cli (an unchanged `clef-pipelines "
        "ingest`: the no-change fast path, no Dagster run), edited (1%% edited rerun).",
    )
    parser.add_argument(
        "--guard",
        default="off",
        choices=["off", "on"],
        help="steering.guard.mode of the runs (off: the pipeline's own cost; on: the default "
        "configuration, MiniLM over every paragraph).",
    )
    parser.add_argument(
        "--index",
        default="on",
        choices=["on", "off"],
        help="off: the LanceDB ANN index is not built (the streaming steps alone).",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="Continue a --keep folder's runs on its corpus and state as they are (e.g. "
        "--runs edited after a first run that was stopped there); pass the flags it ran with.",
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.child:
        child_run(args.child, args.child_out)
        return {}
    sizes = [int(x) for x in args.sizes.split(",") if x]
    if args.resume and not args.keep:
        raise SystemExit("--resume needs --keep (the folder of the runs to continue)")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        root = args.keep or Path(tmp)
        for n in sizes:
            rows.extend(
                bench_size(
                    n,
                    root,
                    args.store,
                    args.batch_documents,
                    args.runs.split(","),
                    args.guard,
                    args.index,
                    args.resume,
                )
            )
            (root / "bench_scale.json").write_text(json.dumps(rows, indent=1))
    print(
        f"\nstore {args.store}, hash embedder (384-d), guard {args.guard}, ANN index "
        f"{args.index}, {os.cpu_count()} CPUs\n"
    )
    print(table(rows))
    return {
        "store": args.store,
        "guard": args.guard,
        "index": args.index,
        "cpus": os.cpu_count(),
        "rows": rows,
    }
