"""The whole evaluation run: SciFact train (vector), SQuAD 2.0 (abstention), injections.

    .venv/bin/python -m bench run eval [--data-dir DIR] [--embedder minilm|hash] [--only NAME]
        [--no-guard] [--limit N] [--scifact-docs N] [--quick] [--json]

Each dataset runs as `clef-pipelines eval ... --json` in a child process (ingestion of the
dataset's collection by the normal graph, then eval_job), timed, with the child's peak
memory (ru_maxrss from wait4). Prints each report's Markdown table and a timing table.
With a persistent --data-dir, a second run reuses the collections (nothing re-embedded).
The Clef rows compute only when a Clef backend is configured in the environment
(CLEF_BASE_URL, or Workers AI credentials); otherwise they say they need one.
--no-guard ingests with the offline guard off (with Clef off nothing is screened): the
injection rows' unscreened baseline. Use another --data-dir than the guarded run's.
--limit N evaluates the first N queries of each dataset (`clef-pipelines eval --limit`; the
corpus is still the dataset's whole corpus: SQuAD's, and the injections' SQuAD host).
--scifact-docs N evaluates SciFact on a scratch BEIR folder: the first --limit (default 50)
train queries, their relevant abstracts and the first N abstracts of the corpus.
`--quick`: SciFact alone on 200 abstracts and 30 queries, hash embedder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench._common import REPO, SHARED_DATA, child_env, need_shared

DATA = SHARED_DATA
DATASETS = {
    "scifact": ["beir:" + str(DATA / "scifact"), "--split", "train"],
    "squad2": ["squad:" + str(DATA / "squad2" / "train-v2.0.json")],
    "injections": [
        "injections:" + str(DATA / "prompt_injections" / "train.jsonl"),
        "--host",
        "squad:" + str(DATA / "squad2" / "train-v2.0.json"),
    ],
}
QUICK = {"only": ["scifact"], "limit": 30, "scifact_docs": 200, "embedder": "hash"}


def scifact_subset(root: Path, docs: int, queries: int) -> Path:
    """A BEIR folder: the first ``queries`` train queries of SciFact, their relevant abstracts
    and the first ``docs`` abstracts."""
    src = DATA / "scifact"
    out = root / "scifact-subset"
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    lines = (src / "qrels" / "train.tsv").read_text().splitlines()
    kept, qids, relevant = [lines[0]], [], set()
    for line in lines[1:]:
        qid, doc_id = line.split("\t")[:2]
        if qid not in qids:
            if len(qids) >= queries:
                continue
            qids.append(qid)
        kept.append(line)
        relevant.add(doc_id)
    (out / "qrels" / "train.tsv").write_text("\n".join(kept) + "\n")
    with (src / "queries.jsonl").open() as fh, (out / "queries.jsonl").open("w") as dst:
        dst.writelines(line for line in fh if str(json.loads(line)["_id"]) in qids)
    with (src / "corpus.jsonl").open() as fh, (out / "corpus.jsonl").open("w") as dst:
        for n, line in enumerate(fh):
            if n < docs or str(json.loads(line)["_id"]) in relevant:
                dst.write(line)
    return out


def run_one(name: str, args: list[str], config: Path, env: dict[str, str]) -> dict:
    cmd = [sys.executable, "-m", "clef_pipelines", "eval", *args, "--name", name, "--json"]
    cmd += ["-c", str(config)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=REPO)
        # wait4 reaps the child itself and returns its own rusage (peak RSS of that child).
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{name} failed:\n{err.read().decode()[-3000:]}")
        report = json.loads(out.read())
    return {"report": report, "seconds": wall, "peak_rss_mb": usage.ru_maxrss / 1024}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=None, help="Keep state here.")
    parser.add_argument("--embedder", default="minilm", choices=["minilm", "hash"])
    parser.add_argument("--only", action="append", choices=list(DATASETS))
    parser.add_argument(
        "--no-guard", action="store_true", help="Ingest with steering.guard.mode off."
    )
    parser.add_argument("--limit", type=int, help="The first N queries of each dataset.")
    parser.add_argument(
        "--scifact-docs",
        type=int,
        default=0,
        help="SciFact on a scratch subset: the first N abstracts (plus the relevant ones).",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    names = args.only or list(DATASETS)
    for name in names:
        need_shared(Path(DATASETS[name][0].split(":", 1)[1]))
    tmp = tempfile.TemporaryDirectory(prefix="bench-eval-")
    root = args.data_dir or Path(tmp.name)
    root.mkdir(parents=True, exist_ok=True)
    config = root / "clef-pipelines.yaml"
    raw: dict = {"data_dir": str(root / "state"), "embedder": {"kind": args.embedder}}
    if args.embedder == "hash":
        raw["embedder"]["dimension"] = 256
    if args.no_guard:
        raw["steering"] = {"guard": {"mode": "off"}}
    config.write_text(yaml.safe_dump(raw))
    env = child_env(DAGSTER_HOME=str(root / "dagster"))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")

    timings = []
    reports = {}
    limit = ["--limit", str(args.limit)] if args.limit else []
    datasets = dict(DATASETS)
    if args.scifact_docs:
        subset = scifact_subset(root, args.scifact_docs, args.limit or 50)
        datasets["scifact"] = ["beir:" + str(subset), "--split", "train"]
    for name in names:
        result = run_one(name, [*datasets[name], *limit], config, env)
        report = result["report"]
        md = Path(root / "state" / "evals" / name / "report.md").read_text()
        print(md)
        timings.append((name, result["seconds"], result["peak_rss_mb"], report["queries"]))
        reports[name] = report
    print("| dataset | queries | wall s | peak RSS MB |\n|---|---|---|---|")
    for name, seconds, rss, queries in timings:
        rss_text = f"{rss:.0f}" if rss else "?"
        print(f"| {name} | {queries} | {seconds:.1f} | {rss_text} |")
    total = sum(t[1] for t in timings)
    peak = max((t[2] or 0) for t in timings)
    print(f"| all | | {total:.1f} | {peak:.0f} |")
    tmp.cleanup()
    return {
        "embedder": args.embedder,
        "guard": not args.no_guard,
        "scifact_docs": args.scifact_docs or None,
        "timings": [
            {"dataset": n, "queries": q, "wall_s": round(s, 2), "peak_rss_mb": round(r or 0)}
            for n, s, r, q in timings
        ],
        "wall_s": round(total, 2),
        "peak_rss_mb": round(peak),
        "reports": reports,
    }
