"""Steering costs: Clef requests and input tokens per 1,000 paragraphs for the paragraph screen
and the chunk enrichment, and SciFact ingest wall time with the offline guard on vs off.

    .venv/bin/python bench/bench_steering.py [--paragraphs 1000] [--guard-docs 300] [--skip-guard]

Part 1 runs the core stages (parse, screen, chunk, enrich) over N real paragraphs (half SQuAD
2.0 paragraphs, half SciFact abstracts, one document each) against the fake System One server
answering every request after a fixed 40 ms. Input tokens are counted on the requests sent, as
the release prompt lays them out (fixed prompt, state, question headers, instructions and
options), twice: with the client's estimate and with the Qwen3.5 tokenizer (exact); the
paragraphs' own tokens with the same counter each time.
Part 2 ingests the first M SciFact abstracts through the Dagster job (MiniLM embedder,
LanceDB, Clef off) twice in fresh folders, guard off then on, and reports wall times.
Prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
LATENCY_S = 0.040


def paragraphs(n: int) -> list[dict[str, str]]:
    """n documents of one paragraph: half SQuAD paragraphs, half SciFact abstracts."""
    squad = json.loads((DATA / "squad2" / "train-v2.0.json").read_text())
    out: list[dict[str, str]] = []
    for article in squad["data"]:
        for p in article["paragraphs"]:
            if len(out) >= n // 2:
                break
            out.append({"id": f"squad-{len(out)}", "title": article["title"], "text": p["context"]})
    with (DATA / "scifact" / "corpus.jsonl").open() as f:
        for line in f:
            if len(out) >= n:
                break
            doc = json.loads(line)
            out.append({"id": f"scifact-{doc['_id']}", "title": doc["title"], "text": doc["text"]})
    return out


def prompt_tokens(bodies: list[dict[str, Any]], counter: Any) -> int:
    """Input tokens of requests as the release prompt counts them (fixed prompt, state, each
    question's header, instructions and options) with `counter`."""
    from clef_pipelines.clef.tokens import PROMPT_OVERHEAD_TOKENS, question_tokens, state_tokens

    total = 0
    for body in bodies:
        total += PROMPT_OVERHEAD_TOKENS + state_tokens(counter, body["state"])
        for i, (qid, q) in enumerate(body["questions"].items(), start=1):
            total += question_tokens(counter, qid, q, i)
    return total


def bench_requests(n: int, context_tokens: int) -> list[str]:
    from clef_pipelines.clef.client import SyncClefClient
    from clef_pipelines.clef.tokens import EstimateCounter, QwenCounter
    from clef_pipelines.config import settings_from_dict
    from clef_pipelines.ingest import stages
    from clef_pipelines.ingest.documents import plan_inventory
    from clef_pipelines.testing.fake_systemone import FakeServer

    docs = paragraphs(n)
    fake = FakeServer(delay_s=LATENCY_S).start()
    base_url = fake.base_url
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-steering-") as tmp:
        root = Path(tmp)
        corpus = root / "paragraphs.jsonl"
        corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
        settings = settings_from_dict(
            {
                "data_dir": str(root / "state"),
                "sources": [{"name": "bench", "path": str(corpus), "kind": "jsonl"}],
                "clef": {
                    "backend": "self-hosted",
                    "base_url": base_url,
                    "cache": False,
                    "context_tokens": context_tokens,
                },
                "steering": {"guard": {"mode": "off"}},
            },
            base_dir=root,
        )
        source = settings.sources[0]
        entries = stages.list_entries(settings, source, "bench")
        inventory = plan_inventory(source.name, entries, {})
        blocks, _ = stages.parse_source(settings, source, inventory, "bench")
        paragraph_texts = [
            t for t, k in zip(blocks["text"], blocks["kind"], strict=True) if k == "paragraph"
        ]
        counters = {"estimate": EstimateCounter(), "qwen": QwenCounter()}
        own = {k: sum(c.count(t) for t in paragraph_texts) for k, c in counters.items()}
        clef = SyncClefClient(settings.clef, data_dir=settings.data_path)
        steering = stages.open_steering(settings, clef)
        try:
            started = time.perf_counter()
            screened, screen = stages.screen_paragraphs(blocks, steering)
            t_screen = time.perf_counter() - started
            screen_bodies = list(fake.requests)
            chunks, _ = stages.chunk_documents(settings, source.name, screened)
            started = time.perf_counter()
            _, enrich = stages.enrich_chunks(chunks, steering)
            t_enrich = time.perf_counter() - started
            enrich_bodies = fake.requests[len(screen_bodies) :]
        finally:
            steering.close()
            clef.close()
            fake.stop()
    most = max(len(b["questions"]) for b in fake.requests)
    per = 1000 / max(1, len(paragraph_texts))
    total_req = screen.requests + enrich.requests
    ratios = []
    for name, counter in counters.items():
        screen_tokens = prompt_tokens(screen_bodies, counter)
        enrich_tokens = prompt_tokens(enrich_bodies, counter)
        total_tok = screen_tokens + enrich_tokens
        ratios.append(
            f"{screen_tokens / own[name]:.2f}x + {enrich_tokens / own[name]:.2f}x = "
            f"**{total_tok / own[name]:.2f}x**"
        )
    rows.append(
        f"| {len(paragraph_texts)} paragraphs, {chunks.height} chunks | {context_tokens:,} | "
        f"{screen.requests * per:.0f} | {enrich.requests * per:.0f} | {total_req * per:.0f} | "
        f"{most} | {ratios[0]} | {ratios[1]} | {t_screen:.1f} s + {t_enrich:.1f} s |"
    )
    return rows


def bench_guard(docs: int) -> list[str]:
    from clef_pipelines.config import load_settings
    from clef_pipelines.jobs.launch import run_ingestion

    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-guard-") as tmp:
        root = Path(tmp)
        corpus = root / "scifact.jsonl"
        with (DATA / "scifact" / "corpus.jsonl").open() as src, corpus.open("w") as dst:
            for i, line in enumerate(src):
                if i >= docs:
                    break
                dst.write(line)
        times: dict[str, float] = {}
        # Load MiniLM (and the guard) once before timing, so neither run pays the import.
        from clef_pipelines.steering.runtime import load_guard

        load_guard()
        for mode in ("off", "on", "off", "on"):
            folder = root / f"{mode}-{len(times)}"
            cfg = folder / "bench.yaml"
            folder.mkdir()
            cfg.write_text(
                yaml.safe_dump(
                    {
                        "data_dir": str(folder / "state"),
                        "collection": "scifact",
                        "sources": [{"name": "scifact", "path": str(corpus), "kind": "jsonl"}],
                        "embedder": {"kind": "minilm"},
                        "clef": {"backend": "off"},
                        "steering": {"guard": {"mode": mode}},
                    }
                )
            )
            os.environ["DAGSTER_HOME"] = str(folder / "dagster")
            settings = load_settings(cfg)
            started = time.perf_counter()
            (report,) = run_ingestion(settings, ["scifact"], config_path=str(cfg))
            elapsed = time.perf_counter() - started
            if not report.success:
                raise SystemExit(f"ingest failed: {report.error}")
            times[mode] = min(times.get(mode, float("inf")), elapsed)
            q = report.assets["screened_paragraphs"].get("decisions", {})
            print(f"guard {mode}: {elapsed:.1f} s, decisions {q}", file=sys.stderr)
        rows.append(
            f"| {docs} SciFact abstracts | {times['off']:.1f} s | {times['on']:.1f} s | "
            f"{(times['on'] / times['off'] - 1) * 100:+.0f}% |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paragraphs", type=int, default=1000)
    parser.add_argument("--guard-docs", type=int, default=300)
    parser.add_argument("--skip-guard", action="store_true")
    parser.add_argument(
        "--skip-requests", action="store_true", help="only the guard on/off ingest timing"
    )
    parser.add_argument(
        "--context-tokens",
        type=int,
        nargs="+",
        default=[16_384, 24_576],
        help="Request token budgets: self-hosted's default max_length, Workers AI's smallest.",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    if not args.skip_requests:
        print(
            "| paragraphs | token budget | screen requests / 1k | enrich requests / 1k | total / 1k | "
            "most questions in a request | tokens / own, screen + enrich (client estimate) | "
            "tokens / own, screen + enrich (Qwen3.5 tokenizer, exact) | wall (screen + enrich) |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for budget in args.context_tokens:
            for row in bench_requests(args.paragraphs, budget):
                print(row, flush=True)
    if not args.skip_guard:
        print()
        print("| corpus | guard off | guard on | guard adds |")
        print("|---|---|---|---|")
        for row in bench_guard(args.guard_docs):
            print(row)


if __name__ == "__main__":
    main()
