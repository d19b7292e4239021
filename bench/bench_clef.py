"""Clef benchmarks: `serve` batching on the tiny release, client overhead, cache hits.

    python bench/bench_clef.py [--requests 96] [--out bench/results/clef.json]

1. `clef-pipelines serve` (a subprocess) on a tiny random release: requests per second one
   request at a time, then at concurrency 8 without batching (--max-batch 1) and with it.
2. Client overhead: the fake System One server (a subprocess, answering at once) timed with
   bare httpx and through ClefClient (validation, pacing, retry wrapper, answer checks,
   usage); the difference is the client's own cost. Then the cache-hit latency.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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


async def drive(url: str, n: int, concurrency: int, key: str) -> dict[str, float]:
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

        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - started
    return {
        "requests": n,
        "concurrency": concurrency,
        "rps": round(n / wall, 2),
        "p50_ms": round(pct(lat, 50), 1),
        "p95_ms": round(pct(lat, 95), 1),
    }


def bench_serve(release: Path, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    key = "bench-key"
    env = os.environ | {"BENCH_KEY": key, "TOKENIZERS_PARALLELISM": "false"}
    for label, max_batch, conc in (
        ("one at a time", 8, 1),
        ("concurrency 8, no batching (--max-batch 1)", 1, 8),
        ("concurrency 8, batching (--max-batch 8)", 8, 8),
    ):
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
            res = asyncio.run(drive(url, n, conc, key))
            health = httpx.get(url + "/health").json()
            res["mean_batch"] = health.get("mean_batch")
            out[label] = res
            print(f"  serve {label}: {res}", flush=True)
        finally:
            proc.terminate()
            proc.wait(30)
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


FAKE = """
import sys, time
sys.path.insert(0, {root!r})
from tests.clef.fake_server import FakeServer
s = FakeServer().start()
print(s.port, flush=True)
while True:
    time.sleep(3600)
"""


def bench_client(n: int) -> dict[str, Any]:
    from clef_pipelines.clef.client import ClefClient
    from clef_pipelines.clef.config import ClefConfig

    proc = subprocess.Popen(
        [sys.executable, "-c", FAKE.format(root=str(ROOT))], stdout=subprocess.PIPE, text=True
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
    s, c = r["serve"], r["client"]
    rows = [
        "| `serve`, tiny release | requests/s | p50 ms | p95 ms | mean batch |",
        "|---|---:|---:|---:|---:|",
    ]
    for label in (
        "one at a time",
        "concurrency 8, no batching (--max-batch 1)",
        "concurrency 8, batching (--max-batch 8)",
    ):
        x = s[label]
        rows.append(f"| {label} | {x['rps']} | {x['p50_ms']} | {x['p95_ms']} | {x['mean_batch']} |")
    rows += [
        "",
        f"Batching at concurrency 8 vs one at a time: **{s['speedup_batching_vs_one_at_a_time']}x**"
        f" (vs concurrency 8 unbatched: {s['speedup_batching_vs_c8_unbatched']}x).",
        "",
        "| Client vs fake server (0 ms answers) | p50 ms | p95 ms |",
        "|---|---:|---:|",
        f"| bare httpx round trip | {c['bare_httpx_p50_ms']} | |",
        f"| ClefClient.ask, cache off | {c['client_p50_ms']} | {c['client_p95_ms']} |",
        f"| client overhead (difference of p50s) | {c['client_overhead_p50_ms']} | |",
        f"| cache hit | {c['cache_hit_p50_ms']} | {c['cache_hit_p95_ms']} |",
    ]
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=96, help="requests per serve mode")
    ap.add_argument("--client-requests", type=int, default=1000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "clef.json"))
    args = ap.parse_args()

    from tests.clef.tiny_release import build_tiny_release

    results: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    with tempfile.TemporaryDirectory() as tmp:
        release = build_tiny_release(Path(tmp) / "tiny-release")
        print("serve (tiny random release, CPU float32):", flush=True)
        results["serve"] = bench_serve(release, args.requests)
    print("client against the fake server (0 ms answers):", flush=True)
    results["client"] = bench_client(args.client_requests)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    print(markdown(results))


if __name__ == "__main__":
    main()
