"""Clef benchmarks: `serve` batching on the tiny release, client overhead, cache hits.

    python -m bench run clef [--requests 96] [--rounds 3] [--skip-client]
                               [--client-requests 1000] [--out bench/results/clef.json]
                               [--quick] [--json]

1. `clef-pipelines serve` (a subprocess) on a tiny random release: requests per second one
   request at a time, then at concurrency 8 without batching (--max-batch 1) and with it.
   The modes run interleaved `--rounds` times (the machine's other load drifts; the table
   shows the median round) and each run records the load average and the CPU seconds the
   server and this load generator spent per request (from /proc and process_time).
2. Client overhead: the fake System One server (a subprocess, answering at once) timed with
   bare httpx and through ClefClient (validation, pacing, retry wrapper, answer checks,
   usage); the difference is the client's own cost. Then the cache-hit latency.

The tiny release needs torch, transformers and clef-finetune (`pip install --no-deps
clef-finetune==0.1.0`); without them the benchmark is skipped. `--quick`: 16 requests per
mode, one round, 100 client requests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench._common import REPO, Skip, child_env

ROOT = REPO
QUICK = {
    "requests": 16,
    "rounds": 1,
    "client_requests": 100,
    "out": str(REPO / "bench" / "results" / "clef-quick.json"),
}

QUESTIONS = {
    "urgent": {"type": "noul", "instructions": "Is this support request urgent?"},
    "team": {
        "type": "choice",
        "instructions": "Which team should take it?",
        "criteria": {"technical": "Outages and bugs", "billing": "Payments", "sales": "Plans"},
    },
    "severity": {
        "type": "score",
        "instructions": "How severe is it?",
        "criteria": ["None", "Minor", "Major", "Critical"],
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[max(0, min(len(v) - 1, round(q / 100 * (len(v) - 1))))]


def wait_health(url: str, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server did not become healthy")


def body(i: int) -> dict[str, Any]:
    return {
        "model": "clef",
        "state": {
            "ticket": f"Ticket {i}: the dashboard shows error 5{i % 10}0 since this morning."
        },
        "questions": QUESTIONS,
    }


async def drive(url: str, n: int, concurrency: int, key: str, server_pid: int) -> dict[str, Any]:
    sem = asyncio.Semaphore(concurrency)
    lat: list[float] = []
    headers = {"authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(headers=headers, timeout=120, limits=limits) as client:
        # Warm-up: the first passes pay one-off costs (allocator, kernels).
        for i in range(3):
            (await client.post(url + "/v1/systemone", json=body(10_000 + i))).raise_for_status()

        async def one(i: int) -> None:
            async with sem:
                t0 = time.perf_counter()
                r = await client.post(url + "/v1/systemone", json=body(i))
                r.raise_for_status()
                lat.append((time.perf_counter() - t0) * 1e3)

        server_cpu0 = proc_cpu_seconds(server_pid)
        client_cpu0 = time.process_time()
        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - started
        client_cpu = time.process_time() - client_cpu0
        server_cpu = proc_cpu_seconds(server_pid) - server_cpu0
    return {
        "requests": n,
        "concurrency": concurrency,
        "rps": round(n / wall, 2),
        "p50_ms": round(pct(lat, 50), 1),
        "p95_ms": round(pct(lat, 95), 1),
        # CPU the server used, in cores (2.0 = both cores busy the whole time), and per request
        "server_cores": round(server_cpu / wall, 2),
        "server_cpu_ms_per_request": round(server_cpu / n * 1e3, 1),
        "client_cpu_ms_per_request": round(client_cpu / n * 1e3, 2),
    }


def proc_cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a process and its threads (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


MODES = (
    ("one at a time", 8, 1),
    ("concurrency 8, no batching (--max-batch 1)", 1, 8),
    ("concurrency 8, batching (--max-batch 8)", 8, 8),
)


def bench_serve(release: Path, n: int, rounds: int = 1) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in MODES}
    for r in range(rounds):
        for label, max_batch, conc in MODES:
            res = serve_once(release, n, max_batch, conc)
            runs[label].append(res)
            print(f"  round {r + 1} serve {label}: {res}", flush=True)
    out: dict[str, Any] = {}
    for label, results in runs.items():
        median = sorted(results, key=lambda x: x["rps"])[len(results) // 2]
        out[label] = median | {"rps_all_rounds": [x["rps"] for x in results]}
    base = out["one at a time"]["rps"]
    out["speedup_batching_vs_one_at_a_time"] = round(
        out["concurrency 8, batching (--max-batch 8)"]["rps"] / base, 2
    )
    out["speedup_batching_vs_c8_unbatched"] = round(
        out["concurrency 8, batching (--max-batch 8)"]["rps"]
        / out["concurrency 8, no batching (--max-batch 1)"]["rps"],
        2,
    )
    return out


def serve_once(release: Path, n: int, max_batch: int, conc: int) -> dict[str, Any]:
    key = "bench-key"
    env = child_env(BENCH_KEY=key, TOKENIZERS_PARALLELISM="false")
    port = free_port()
    cmd = [
        str(Path(sys.executable).parent / "clef-pipelines"), "serve", str(release),
        "--port", str(port), "--api-key-env", "BENCH_KEY", "--max-batch", str(max_batch),
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=tempfile.gettempdir(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_health(url, proc)
        load_before = os.getloadavg()[0]
        res = asyncio.run(drive(url, n, conc, key, proc.pid))
        res["loadavg_1m_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        health = httpx.get(url + "/health", headers={"authorization": f"Bearer {key}"}).json()
        res["mean_batch"] = health.get("mean_batch")
        return res
    finally:
        proc.terminate()
        proc.wait(30)


FAKE = """
import time
from clef_pipelines.testing.fake_systemone import FakeServer
s = FakeServer().start()
print(s.port, flush=True)
while True:
    time.sleep(3600)
"""


def bench_client(n: int) -> dict[str, Any]:
    from clef_pipelines.clef.client import ClefClient
    from clef_pipelines.clef.config import ClefConfig

    proc = subprocess.Popen(
        [sys.executable, "-c", FAKE.format(root=str(ROOT))],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        url = f"http://127.0.0.1:{port}"

        async def run() -> dict[str, Any]:
            payload = body(0)
            async with httpx.AsyncClient() as raw:
                bare = []
                for i in range(n + 50):
                    payload["state"] = {"i": i}
                    t0 = time.perf_counter()
                    r = await raw.post(url + "/v1/systemone", json=payload)
                    r.json()
                    if i >= 50:
                        bare.append((time.perf_counter() - t0) * 1e3)
            cfg = ClefConfig(
                backend="self-hosted",
                base_url=url,
                requests_per_second=1e6,
                tokens_per_second=1e9,
                cache_path=str(Path(tempfile.mkdtemp()) / "cache.sqlite3"),
            )
            async with ClefClient(cfg) as c:
                full = []
                for i in range(n + 50):
                    t0 = time.perf_counter()
                    await c.ask({"i": i}, QUESTIONS)
                    if i >= 50:
                        full.append((time.perf_counter() - t0) * 1e3)
                hits = []
                for i in range(50, n + 50):
                    t0 = time.perf_counter()
                    await c.ask({"i": i}, QUESTIONS)
                    hits.append((time.perf_counter() - t0) * 1e3)
                assert c.usage.cached == n
            return {
                "requests": n,
                "bare_httpx_p50_ms": round(statistics.median(bare), 3),
                "client_p50_ms": round(statistics.median(full), 3),
                "client_p95_ms": round(pct(full, 95), 3),
                "client_overhead_p50_ms": round(
                    statistics.median(full) - statistics.median(bare), 3
                ),
                "cache_hit_p50_ms": round(statistics.median(hits), 3),
                "cache_hit_p95_ms": round(pct(hits, 95), 3),
            }

        res = asyncio.run(run())
        print(f"  client: {res}", flush=True)
        return res
    finally:
        proc.terminate()
        proc.wait(10)


def markdown(r: dict[str, Any]) -> str:
    """The results as the table docs/BENCHMARKS.md shows."""
    s, c = r["serve"], r.get("client")
    rows = [
        "| `serve`, tiny release | requests/s (median; all rounds) | p50 ms | p95 ms "
        "| mean batch | server cores | load avg |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, _, _ in MODES:
        x = s[label]
        rounds = ", ".join(str(v) for v in x["rps_all_rounds"])
        load = " / ".join(str(v) for v in x["loadavg_1m_before_after"])
        rows.append(
            f"| {label} | {x['rps']} ({rounds}) | {x['p50_ms']} | {x['p95_ms']} "
            f"| {x['mean_batch']} | {x['server_cores']} | {load} |"
        )
    rows += [
        "",
        f"Batching at concurrency 8 vs one at a time: **{s['speedup_batching_vs_one_at_a_time']}x**"
        f" (vs concurrency 8 unbatched: {s['speedup_batching_vs_c8_unbatched']}x).",
    ]
    if c:
        rows += [
            "",
            "| Client vs fake server (0 ms answers) | p50 ms | p95 ms |",
            "|---|---:|---:|",
            f"| bare httpx round trip | {c['bare_httpx_p50_ms']} | |",
            f"| ClefClient.ask, cache off | {c['client_p50_ms']} | {c['client_p95_ms']} |",
            f"| client overhead (difference of p50s) | {c['client_overhead_p50_ms']} | |",
            f"| cache hit | {c['cache_hit_p50_ms']} | {c['cache_hit_p95_ms']} |",
        ]
    return "\n".join(rows)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--requests", type=int, default=96, help="requests per serve mode")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the serve modes")
    ap.add_argument("--skip-client", action="store_true", help="serve only")
    ap.add_argument("--client-requests", type=int, default=1000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "clef.json"))


def run(args: argparse.Namespace) -> dict[str, Any]:
    import importlib.util

    missing = [
        m for m in ("torch", "transformers", "clef_finetune") if importlib.util.find_spec(m) is None
    ]
    if missing:
        raise Skip(
            f"the tiny release needs {', '.join(missing)} (the `serve` extra, clef-finetune)"
        )
    from clef_pipelines.testing.tiny_release import build_tiny_release

    results: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    with tempfile.TemporaryDirectory() as tmp:
        release = build_tiny_release(Path(tmp) / "tiny-release")
        print("serve (tiny random release, CPU float32):", flush=True)
        results["serve"] = bench_serve(release, args.requests, args.rounds)
    if not args.skip_client:
        print("client against the fake server (0 ms answers):", flush=True)
        results["client"] = bench_client(args.client_requests)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    print(markdown(results))
    return results
