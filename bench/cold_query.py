"""Cold `clef-pipelines query`: wall and CPU seconds of a fresh process on the demo collection.

    .venv/bin/python -m bench run cold_query [--runs 7] [--data-dir DIR] [--imports]
        [--no-bytecode-cache] [--unchanged-ingest] [--quick] [--json]

Uses data/demo.yaml (the embedded defaults: LanceDB, MiniLM, no keys so Clef is off) with
its data_dir moved to --data-dir (default: a temporary folder), ingests the demo corpus
there once if it is not there yet, then runs `clef-pipelines query "<the first demo
question>"` --runs times, each in a new process, and prints the median and best wall and
CPU (user + system) seconds. CPU seconds are what a busy shared machine distorts least.
--imports also prints the packages that cost most import time in one run (-X importtime).
--unchanged-ingest also times `clef-pipelines ingest` of the unchanged demo source right after
each query run (the no-change fast path: no Dagster run) and its ratio to the cold query.

Bytecode: this machine's environment sets PYTHONDONTWRITEBYTECODE, so an editable install
compiles this package's sources on every start, which an installed wheel (byte-compiled by
pip) never does. By default the runs share a bytecode cache (PYTHONPYCACHEPREFIX in the data
dir) filled by one untimed run first; `--no-bytecode-cache` measures compile-per-start, as
earlier figures did. `--quick`: 2 runs.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench._common import REPO, child_env

QUICK = {"runs": 2}


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed:\n{proc.stderr[-2000:]}")
    return wall, cpu, proc


def import_costs(stderr: str, top: int = 10) -> list[tuple[str, float]]:
    agg: collections.Counter[str] = collections.Counter()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            own, _, name = line.split("|")
            agg[name.strip().split(".")[0]] += int(own.split(":")[1])
    return [(k, round(v / 1e6, 3)) for k, v in agg.most_common(top)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--imports", action="store_true")
    parser.add_argument(
        "--unchanged-ingest",
        action="store_true",
        help="Also time `clef-pipelines ingest` with nothing changed (the no-change fast path), "
        "each run right after a query run, and print its ratio to the cold query.",
    )
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="Keep this environment's bytecode setting (compile the sources on every start).",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = tempfile.TemporaryDirectory(prefix="bench-cold-query-")
    data_dir = (args.data_dir or Path(tmp.name)).resolve()
    cfg = yaml.safe_load((REPO / "data" / "demo.yaml").read_text())
    cfg["data_dir"] = str(data_dir / "state")
    cfg["sources"] = [
        {**s, "path": str((REPO / "data" / s["path"]).resolve())} for s in cfg["sources"]
    ]
    config = data_dir / "demo.yaml"
    data_dir.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in child_env().items() if not k.startswith(("CLEF_", "CLOUDFLARE_"))}
    env.update(DAGSTER_HOME=str(data_dir / "dagster"), TOKENIZERS_PARALLELISM="false")
    cli = str(Path(sys.executable).with_name("clef-pipelines"))
    if not (data_dir / "state").exists():
        print("ingesting the demo corpus ...", file=sys.stderr)
        _timed([cli, "ingest", "--config", str(config)], env)
    question = next(
        q.strip() for q in (REPO / "data" / "queries.txt").read_text().splitlines() if q.strip()
    )
    cmd = [cli, "query", question, "--config", str(config)]
    if not args.no_bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(data_dir / "pycache")
        _timed(cmd, env)  # untimed: writes the bytecode cache, as an install would
    walls, cpus = [], []
    ingest_cmd = [cli, "ingest", "--config", str(config)]
    ingest_walls, ingest_cpus = [], []
    for _ in range(args.runs):
        wall, cpu, _ = _timed(cmd, env)
        walls.append(wall)
        cpus.append(cpu)
        if args.unchanged_ingest:  # interleaved: both see the same load
            wall, cpu, proc = _timed(ingest_cmd, env)
            if "unchanged since its last clean run" not in proc.stdout:
                raise SystemExit(f"the unchanged ingest started a run:\n{proc.stdout[-2000:]}")
            ingest_walls.append(wall)
            ingest_cpus.append(cpu)
    load = os.getloadavg()[0]
    print(
        f"cold `clef-pipelines query` on the demo collection, {args.runs} runs, load {load:.1f}, "
        f"{'compiling per start' if args.no_bytecode_cache else 'bytecode cached'}: "
        f"wall median {statistics.median(walls):.2f} s (best {min(walls):.2f}), "
        f"CPU median {statistics.median(cpus):.2f} s (best {min(cpus):.2f})"
    )
    unchanged: dict[str, Any] = {}
    if args.unchanged_ingest:
        ratio = statistics.median(ingest_walls) / statistics.median(walls)
        print(
            f"unchanged `clef-pipelines ingest` of the demo, interleaved: wall median "
            f"{statistics.median(ingest_walls):.2f} s (best {min(ingest_walls):.2f}), CPU median "
            f"{statistics.median(ingest_cpus):.2f} s; {ratio:.2f}x the cold query's wall"
        )
        unchanged = {
            "unchanged_ingest_wall_s": [round(w, 3) for w in ingest_walls],
            "unchanged_ingest_wall_median_s": round(statistics.median(ingest_walls), 3),
            "unchanged_ingest_cpu_median_s": round(statistics.median(ingest_cpus), 3),
            "unchanged_ingest_of_query": round(ratio, 3),
        }
    if args.imports:
        _, _, proc = _timed(
            [sys.executable, "-X", "importtime", "-m", "clef_pipelines", *cmd[1:]], env
        )
        imports = import_costs(proc.stderr)
        print("import time by package (s, self):", imports)
    tmp.cleanup()
    return {
        "runs": args.runs,
        "load": round(load, 2),
        "bytecode_cache": not args.no_bytecode_cache,
        "wall_s": [round(w, 3) for w in walls],
        "cpu_s": [round(c, 3) for c in cpus],
        "wall_median_s": round(statistics.median(walls), 3),
        "wall_best_s": round(min(walls), 3),
        "cpu_median_s": round(statistics.median(cpus), 3),
        "cpu_best_s": round(min(cpus), 3),
        **({"imports": imports} if args.imports else {}),
        **unchanged,
    }
