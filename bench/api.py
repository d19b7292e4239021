"""Throughput of the HTTP API (`clef-pipelines api`) under concurrent clients.

    .venv/bin/python -m bench run api [--docs 2000] [--requests 200] [--concurrency 1 8 32]
                                        [--embedder hash|minilm] [--clef-latency-ms 40]
                                        [--quick] [--json]

Ingests the first `--docs` SciFact abstracts into LanceDB, starts the API as its own process
(the real CLI), then sends `--requests` POST /v1/retrieve with SciFact claims as queries from
N concurrent clients, twice: vector only (Clef off) and Clef-steered against the fake System One
server answering after a fixed latency (default 40 ms). Prints a Markdown table: requests/s,
p50 and p95 latency, and Clef requests per query. The fake server measures the pipeline around
Clef, never Clef's own quality or speed. `--quick`: 200 abstracts, 40 requests, 1 and 8
clients.

Beside the API's Clef-steered rows, a warm `Retriever` row: the same settings, the same
queries, the same fake server, in this process, one query after another (after one warm-up
query, as the API's): the API must ask Clef no more often (issue 56). The fake answers as the
`retrieval` benchmark's does (`--fake-answers spread`: noul probabilities spread by question,
so that a first wave of classification can settle a query); `--fake-answers constant`: every
noul 0.7, as the test fake answers by default (no first wave ever settles, so `classify.waves:
auto` asks every candidate at once: the "3 requests a query" the API showed before, which a
warm `Retriever` shows too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench._common import SCIFACT, child_env, need_shared

QUICK = {"docs": 200, "requests": 40, "concurrency": [1, 8]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(root: Path, docs: int, embedder: str, clef: dict[str, Any]) -> Path:
    corpus = root / "corpus.jsonl"
    with (SCIFACT / "corpus.jsonl").open() as src, corpus.open("w") as dst:
        for i, line in enumerate(src):
            if i >= docs:
                break
            dst.write(line)
    cfg = root / "bench.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(root / "state"),
                "collection": "scifact",
                "sources": [{"name": "scifact", "path": str(corpus), "kind": "jsonl"}],
                "embedder": {"kind": embedder},
                "store": {"kind": "lancedb"},
                "clef": clef,
                "retrieval": {"top_k": 30},
            }
        )
    )
    return cfg


def queries(n: int) -> list[str]:
    out = []
    with (SCIFACT / "queries.jsonl").open() as f:
        for line in f:
            out.append(json.loads(line)["text"])
            if len(out) >= n:
                break
    return out


def start_api(cfg: Path, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    cli = Path(sys.executable).with_name("clef-pipelines")
    proc = subprocess.Popen(
        [str(cli), "api", "--config", str(cfg), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"api exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("api did not start")


async def load(base: str, qs: list[str], concurrency: int) -> dict[str, Any]:
    latencies: list[float] = []
    clef_requests: list[int] = []
    stage_ms: dict[str, list[float]] = {}
    errors = 0
    queue: asyncio.Queue[str] = asyncio.Queue()
    for q in qs:
        queue.put_nowait(q)

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal errors
        while not queue.empty():
            q = queue.get_nowait()
            t = time.perf_counter()
            r = await client.post(f"{base}/v1/retrieve", json={"query": q})
            latencies.append((time.perf_counter() - t) * 1e3)
            if r.status_code != 200:
                errors += 1
                continue
            trace = r.json()["trace"]
            clef_requests.append(trace["clef_requests"])
            for st in trace["stages"]:
                stage_ms.setdefault(st["stage"], []).append(st["ms"])

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        # Warm-up: the first query pays for nothing the others do not.
        await client.post(f"{base}/v1/retrieve", json={"query": qs[0]})
        started = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        wall = time.perf_counter() - started
    latencies.sort()
    return {
        "concurrency": concurrency,
        "requests": len(qs),
        "errors": errors,
        "rps": len(qs) / wall,
        "p50_ms": statistics.median(latencies),
        "p95_ms": latencies[int(0.95 * (len(latencies) - 1))],
        "clef_requests_per_query": statistics.mean(clef_requests) if clef_requests else 0.0,
        "stage_ms": {k: statistics.median(v) for k, v in stage_ms.items() if max(v) > 0},
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--embedder", default="hash", choices=["hash", "minilm"])
    parser.add_argument("--clef-latency-ms", type=float, default=40.0)
    parser.add_argument("--fake-answers", default="spread", choices=["spread", "constant"])
    # --json (the results on stdout) is the harness's, as before.


def warm_retriever(cfg: Path, qs: list[str]) -> dict[str, Any]:
    """The same queries through a warm `Retriever` in this process, one after another."""
    from clef_pipelines.config import load_settings
    from clef_pipelines.retrieval import Retriever

    latencies: list[float] = []
    clef_requests: list[int] = []
    with Retriever(load_settings(cfg)) as r:
        r.warm()
        r.retrieve(qs[0])  # warm-up, as the API's
        started = time.perf_counter()
        for q in qs:
            t = time.perf_counter()
            res = r.retrieve(q)
            latencies.append((time.perf_counter() - t) * 1e3)
            clef_requests.append(res.to_dict()["trace"]["clef_requests"])
        wall = time.perf_counter() - started
    latencies.sort()
    return {
        "concurrency": 1,
        "requests": len(qs),
        "errors": 0,
        "rps": len(qs) / wall,
        "p50_ms": statistics.median(latencies),
        "p95_ms": latencies[int(0.95 * (len(latencies) - 1))],
        "clef_requests_per_query": statistics.mean(clef_requests),
        "stage_ms": {},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    need_shared(SCIFACT / "corpus.jsonl")
    from bench.fake_systemone import noul_answer
    from clef_pipelines.testing.fake_systemone import FakeServer

    env = child_env(TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    env.pop("CLEF_API_KEY", None)
    qs = queries(args.requests)
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-api-") as tmp,
        FakeServer(
            delay_s=args.clef_latency_ms / 1e3,
            answerer=noul_answer if args.fake_answers == "spread" else None,
        ) as fake,
    ):
        root = Path(tmp)
        systems = {
            "vector only (Clef off)": {"backend": "off"},
            f"Clef-steered (fake server, {args.clef_latency_ms:g} ms)": {
                "backend": "self-hosted",
                "base_url": fake.base_url,
                "cache": False,
                "max_concurrency": 64,
                # The client's own pacing is not what this measures.
                "requests_per_second": 1000,
                "tokens_per_second": 1e9,
            },
        }
        ingested = False
        for name, clef in systems.items():
            cfg = write_config(root, args.docs, args.embedder, clef)
            if not ingested:
                cli = Path(sys.executable).with_name("clef-pipelines")
                subprocess.run(
                    [str(cli), "ingest", "--config", str(cfg)],
                    env=env,
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
                ingested = True
            port = free_port()
            proc = start_api(cfg, port, env)
            try:
                for c in args.concurrency:
                    row = asyncio.run(load(f"http://127.0.0.1:{port}", qs, c))
                    row["system"] = name
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
            finally:
                proc.terminate()
                proc.wait(30)
            if clef["backend"] != "off":
                # HF_HUB_OFFLINE and the tokenizer setting, as the API process had them.
                with _env(env):
                    row = warm_retriever(cfg, qs)
                row["system"] = "warm Retriever, same settings (in process)"
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    print(
        f"{args.docs} SciFact abstracts, {args.embedder} embedder, LanceDB, top_k 30, "
        f"{args.requests} requests per row, fake answers {args.fake_answers}\n"
    )
    print(
        "| system | clients | req/s | p50 ms | p95 ms | Clef requests/query | "
        "stage p50 ms (server side) | errors |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        stages = ", ".join(f"{k} {v:.0f}" for k, v in r["stage_ms"].items())
        print(
            f"| {r['system']} | {r['concurrency']} | {r['rps']:.1f} | {r['p50_ms']:.1f} | "
            f"{r['p95_ms']:.1f} | {r['clef_requests_per_query']:.2f} | {stages} | {r['errors']} |"
        )
    return {
        "docs": args.docs,
        "embedder": args.embedder,
        "requests": args.requests,
        "fake_answers": args.fake_answers,
        "rows": rows,
    }


@contextmanager
def _env(env: dict[str, str]) -> Iterator[None]:
    keys = ("TOKENIZERS_PARALLELISM", "HF_HUB_OFFLINE")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: env[k] for k in keys if k in env})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
