"""Compaction without a store, side by side with clef-compactor 0.2.1: cold CLI wall and peak
memory, bytes sent to Clef per passage, warm p50; and what a preview costs in kept evidence.

    .venv/bin/python -m bench run compact [--passages 10] [--runs 7] [--warm-rounds 30]
                                          [--latency-ms 40] [--cases 100] [--preview-chars 512]
                                          [--budget 4000] [--skip-peer] [--no-peer-install]
                                          [--no-bytecode-cache] [--callgrind] [--quick]
                                          [--json]

Input: the first SciFact train claim with a relevant abstract, and --passages abstracts (the
relevant one first, then the abstracts sharing the most words with the claim), as `{id, text}`
JSONL for `clef-pipelines compact -i` and as `@file` arguments for `clef-compact -d`.

- **cold**: `clef-pipelines compact -q CLAIM -i FILE --json --budget B` and `clef-compact -q
  CLAIM -d @FILE... --json --budget B`, each a fresh process, interleaved (the first system
  alternates), --runs times each, against one fake System One server (bench/fake_systemone.py,
  its own process; clef-compactor reaches it through its Workers AI route). Per run: wall,
  CPU, peak RSS (the child's own, from wait4), and the request bodies' bytes as the server
  received them, per passage. Both read compiled bytecode (ours from a cache filled by one
  untimed run, as an install would; the peer's venv was byte-compiled by pip).
  clef-compactor counts tokens with tiktoken's cl100k_base, which it downloads on first use;
  offline it falls back to a whitespace estimate after the download fails (reported).
- **instructions** (`--callgrind`): one more cold run of each CLI under valgrind's callgrind,
  the whole process's instruction count: unlike wall and CPU, it does not move with the
  machine's load.
- **warm**: each system's Python API in a process of its own, --warm-rounds compactions of the
  same input after one warm-up (ours: `acompact` with one shared `ClefClient`, as a service
  does; the peer: one `ClefCompactor`). p50 and p95 ms, requests and bytes per compaction.
- **preview**: --cases SciFact train claims, each with its relevant abstracts and the abstracts
  sharing the most words with it up to --passages, compacted by our `compact()` to a budget of
  about three abstracts, with `retrieval.compact.preview_chars` off and at --preview-chars,
  against an in-process fake server whose answers are a *lexical stand-in for Clef*: the
  passage as sent is relevant by the share of the claim's words it holds, and holds evidence
  by the best such share of one sentence. It measures what the cut hides from a reader, not
  Clef's judgement. Reported: relevant abstracts kept (of all relevant), cases with one kept,
  bytes sent per passage. Also, with no judge at all: the share of relevant abstracts whose
  sentence closest to the claim (most claim words) starts past the preview.

The peer runs in its own venv, bench/.compactor-venv (ignored by git), made when missing with
`pip install clef-compactor==0.2.1` from PyPI (`$CLEF_BENCH_COMPACTOR_VENV`: another;
`--no-peer-install`: left out with the reason instead; `--skip-peer`: never asked for).
`--quick`: 3 cold runs, 10 warm rounds, 20 cases, no peer install.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench._common import REPO, SCIFACT, bench_cmd, child_env, need_shared
from bench.ingest_peer import clean_env, tail
from bench.retrieval import Fake  # the fake System One server in its own process

QUICK = {"runs": 3, "warm_rounds": 10, "cases": 20, "no_peer_install": True}

PEER = "clef-compactor==0.2.1"
PEER_VENV = Path(os.environ.get("CLEF_BENCH_COMPACTOR_VENV") or REPO / "bench" / ".compactor-venv")
PEER_ENV = {"CLEF_ACCOUNT_ID": "bench", "CLEF_API_TOKEN": "bench", "CLEF_MODEL": "clef"}
_WORD = re.compile(r"[a-z0-9][a-z0-9-]+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_STOP_WORDS = (
    "the and for with that this from are was were has have had not but its into than then "
    "their there these those which while who whom what when where been being also more most "
    "such can may might will would should could does did our out over under between"
)
STOP = frozenset(_STOP_WORDS.split())

PEER_WARM = textwrap.dedent(
    """\
    import json, sys, time
    from clef_compactor import ClefCompactor

    job = json.loads(open(sys.argv[1]).read())
    c = ClefCompactor()
    c.compact(job["query"], job["texts"], token_budget=job["budget"])  # warm-up
    times = []
    for _ in range(job["rounds"]):
        t = time.perf_counter()
        c.compact(job["query"], job["texts"], token_budget=job["budget"])
        times.append(time.perf_counter() - t)
    print(json.dumps({"times": times}))
    """
)


# --- the input ----------------------------------------------------------------------------


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in STOP}


def load_scifact() -> tuple[dict[str, str], dict[str, str], dict[str, list[str]]]:
    corpus = {}
    with (SCIFACT / "corpus.jsonl").open() as fh:
        for line in fh:
            r = json.loads(line)
            corpus[str(r["_id"])] = r["text"]
    claims = {}
    with (SCIFACT / "queries.jsonl").open() as fh:
        for line in fh:
            r = json.loads(line)
            claims[str(r["_id"])] = r["text"]
    qrels: dict[str, list[str]] = {}
    with (SCIFACT / "qrels" / "train.tsv").open() as fh:
        next(fh)
        for line in fh:
            q, d, score = line.split()
            if int(score) > 0 and d in corpus:
                qrels.setdefault(q, []).append(d)
    return corpus, claims, qrels


class Neighbours:
    """The abstracts sharing the most (rarer-weighted) words with a claim: the distractors."""

    def __init__(self, corpus: dict[str, str]) -> None:
        self.index: dict[str, list[str]] = {}
        for doc, text in corpus.items():
            for w in words(text):
                self.index.setdefault(w, []).append(doc)

    def near(self, claim: str, n: int, exclude: set[str]) -> list[str]:
        score: Counter[str] = Counter()
        for w in words(claim):
            docs = self.index.get(w, [])
            if docs and len(docs) < 2000:
                for d in docs:
                    score[d] += 1.0 / len(docs)
        return [d for d, _ in score.most_common(n + len(exclude)) if d not in exclude][:n]


def cases(n_cases: int, n_passages: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
    corpus, claims, qrels = load_scifact()
    near = Neighbours(corpus)
    out = []
    for qid, rel in qrels.items():
        if len(out) >= n_cases:
            break
        others = near.near(claims[qid], max(n_passages - len(rel), 0), set(rel))
        docs = [*rel, *others][: max(n_passages, len(rel))]
        out.append({"claim": claims[qid], "relevant": rel, "docs": docs})
    return out, corpus


# --- the peer's venv --------------------------------------------------------------------------


def peer_ready(install: bool) -> str:
    """'' when clef-compactor imports in its venv (made when missing and `install`), else why
    it is left out."""
    py = PEER_VENV / "bin" / "python"
    check = [str(py), "-c", "import clef_compactor"]
    if py.exists() and subprocess.run(check, capture_output=True, env=clean_env()).returncode == 0:
        return ""
    if not install:
        return (
            f"no clef-compactor venv at {PEER_VENV} (`python -m bench run compact` without "
            "--no-peer-install creates it; CLEF_BENCH_COMPACTOR_VENV names another)"
        )
    steps = [[str(py), "-m", "pip", "install", "-q", PEER]]
    if not py.exists():
        steps.insert(0, [sys.executable, "-m", "venv", str(PEER_VENV)])
    for step in steps:
        print("peer setup:", " ".join(step), file=sys.stderr)
        proc = subprocess.run(step, capture_output=True, text=True, env=clean_env())
        if proc.returncode != 0:
            return f"`{' '.join(step[-3:])}` failed: {tail(proc.stderr, 6)}"
    return ""


# --- cold -------------------------------------------------------------------------------------


def timed_rusage(cmd: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """A fresh process: wall, CPU and its own peak RSS (wait4's rusage of that child)."""
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out_f, stderr=err_f)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read().decode(), err_f.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} failed: {tail(err)}")
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss_mib": usage.ru_maxrss / 1024,
        "stdout": out,
        "stderr": err,
    }


def instructions(cmd: list[str], env: dict[str, str], cwd: Path) -> int:
    """The instructions one run of `cmd` executes, counted by callgrind (all its threads)."""
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"callgrind run of {Path(cmd[0]).name} failed: {tail(proc.stderr)}")
    return int(found.group(1))


def sent(records: list[dict[str, Any]], passages: int) -> dict[str, Any]:
    return {
        "requests": len(records),
        "bytes": sum(r.get("bytes", 0) for r in records),
        "bytes_per_passage": round(sum(r.get("bytes", 0) for r in records) / passages),
        "input_tokens": sum(r["input_tokens"] for r in records),
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "wall_median_s": round(statistics.median(r["wall"] for r in runs), 3),
        "wall_best_s": round(min(r["wall"] for r in runs), 3),
        "cpu_median_s": round(statistics.median(r["cpu"] for r in runs), 3),
        "rss_median_mib": round(statistics.median(r["rss_mib"] for r in runs), 1),
        **{k: runs[-1][k] for k in ("requests", "bytes", "bytes_per_passage", "input_tokens")},
    }


# --- warm (children) ----------------------------------------------------------------------------


def ours_warm_child(cfg: str, job_path: str) -> None:
    from clef_pipelines.clef.client import ClefClient
    from clef_pipelines.config import load_settings
    from clef_pipelines.retrieval.compaction import acompact

    job = json.loads(Path(job_path).read_text())
    settings = load_settings(cfg)

    async def go() -> list[float]:
        client = ClefClient(settings.clef, data_dir=str(settings.data_path))
        kw = {"token_budget": job["budget"], "client": client, "config": settings.retrieval}
        await acompact(job["query"], job["items"], **kw)  # warm-up
        httpx.post(job["reset_url"]).raise_for_status()
        times = []
        for _ in range(job["rounds"]):
            t = time.perf_counter()
            await acompact(job["query"], job["items"], **kw)
            times.append(time.perf_counter() - t)
        await client.aclose()
        return times

    print(json.dumps({"times": asyncio.run(go())}))


def warm_row(name: str, times: list[float], records: list[dict], rounds: int, n: int) -> dict:
    ms = sorted(t * 1e3 for t in times)
    per = sent(records, n * rounds)
    return {
        "system": name,
        "p50_ms": round(statistics.median(ms), 1),
        "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 1),
        "requests_per_compaction": round(per["requests"] / rounds, 2),
        "bytes_per_compaction": round(per["bytes"] / rounds),
        "bytes_per_passage": per["bytes_per_passage"],
    }


# --- preview: kept evidence on SciFact, a lexical stand-in for Clef -------------------------------


def lexical_reader(claim_words: dict[str, set[str]]) -> Any:
    """Answers from the passage text as sent: relevant by the share of the claim's words it
    holds, evidence by the best share in one sentence. `claim_words[""]`: the current claim."""

    def share(text: str) -> float:
        want = claim_words[""]
        return len(want & words(text)) / max(len(want), 1)

    def answer(qid: str, question: dict[str, Any], state: Any) -> float | None:
        if question["type"] != "noul":
            return None
        name = qid.rsplit(".", 1)[-1]
        if name in ("instructs_ai", "contradicts_query_premise"):
            return 0.02
        ins = question["instructions"]
        text = ins["passage"] if isinstance(ins, dict) else state[ins.split("`")[1]]
        if name == "is_relevant":
            return round(min(0.98, 0.05 + 1.2 * share(text)), 4)
        if name == "contains_answer_evidence":
            best = max((share(s) for s in _SENTENCE.split(text)), default=0.0)
            return round(min(0.98, 0.05 + 1.2 * best), 4)
        return None

    return answer


def evidence_position(all_cases: list[dict[str, Any]], corpus: dict[str, str], chars: int) -> dict:
    """With no judge: where the sentence closest to the claim starts in each relevant abstract."""
    past = total = longer = 0
    for case in all_cases:
        want = words(case["claim"])
        for d in case["relevant"]:
            text = corpus[d]
            total += 1
            longer += len(text) > chars
            best, best_at, at = -1.0, 0, 0
            for s in _SENTENCE.split(text):
                at = text.find(s, at)
                score = len(want & words(s))
                if score > best:
                    best, best_at = score, at
            past += best_at >= chars
    return {
        "relevant_abstracts": total,
        "longer_than_preview": longer,
        "closest_sentence_past_preview": past,
        "share_past_preview": round(past / max(total, 1), 3),
    }


def preview_run(args: argparse.Namespace) -> dict[str, Any]:
    from clef_pipelines.clef.config import ClefConfig
    from clef_pipelines.retrieval import compact
    from clef_pipelines.retrieval.config import RetrievalConfig
    from clef_pipelines.testing.fake_systemone import FakeServer

    all_cases, corpus = cases(args.cases, args.passages)
    claim_words: dict[str, set[str]] = {"": set()}
    out: dict[str, Any] = {
        "cases": len(all_cases),
        "passages": args.passages,
        "judge": "lexical stand-in (not Clef)",
        "position": evidence_position(all_cases, corpus, args.preview_chars),
    }
    with FakeServer(answerer=lexical_reader(claim_words)) as fake:
        clef = ClefConfig(backend="self-hosted", base_url=fake.base_url, cache=False)
        for label, chars in (("off", None), (f"{args.preview_chars}", args.preview_chars)):
            cfg = RetrievalConfig.model_validate({"compact": {"preview_chars": chars}})
            kept = relevant = hit = 0
            before = len(fake.requests)
            body_bytes = 0
            for case in all_cases:
                claim_words[""] = words(case["claim"])
                items = [{"id": d, "text": corpus[d]} for d in case["docs"]]
                budget = sum(len(corpus[d].split()) for d in case["docs"][:3]) * 4 // 3
                n_before = len(fake.requests)
                res = compact(case["claim"], items, token_budget=budget, config=cfg, clef=clef)
                body_bytes += sum(
                    len(json.dumps(b, ensure_ascii=False, separators=(",", ":")).encode())
                    for b in fake.requests[n_before:]
                )
                ids = {c.id for c in [*res.passages, *res.conflicts]}
                got = len(ids & set(case["relevant"]))
                kept += got
                relevant += len(case["relevant"])
                hit += got > 0
            n_passages = sum(len(c["docs"]) for c in all_cases)
            out[f"preview_{label}"] = {
                "relevant_kept": kept,
                "relevant": relevant,
                "share_kept": round(kept / max(relevant, 1), 3),
                "cases_with_one_kept": hit,
                "requests": len(fake.requests) - before,
                "bytes_per_passage": round(body_bytes / max(n_passages, 1)),
            }
    return out


# --- the benchmark ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--passages", type=int, default=10)
    parser.add_argument("--runs", type=int, default=7, help="Cold runs of each system.")
    parser.add_argument("--warm-rounds", type=int, default=30)
    parser.add_argument("--latency-ms", type=float, default=40.0)
    parser.add_argument("--cases", type=int, default=100, help="SciFact claims for preview.")
    parser.add_argument("--preview-chars", type=int, default=512)
    parser.add_argument("--budget", type=int, default=4000, help="Both CLIs' token budget.")
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--no-peer-install", action="store_true")
    parser.add_argument("--no-bytecode-cache", action="store_true")
    parser.add_argument("--skip-preview", action="store_true")
    parser.add_argument(
        "--callgrind", action="store_true", help="Also count each CLI's instructions (valgrind)."
    )
    parser.add_argument("--_ours-warm", nargs=2, metavar=("CFG", "JOB"), help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> dict[str, Any]:  # noqa: C901 - one linear script
    if args._ours_warm:
        ours_warm_child(*args._ours_warm)
        return {}
    need_shared(SCIFACT / "corpus.jsonl")
    load_before = os.getloadavg()[0]
    (case,), corpus = cases(1, args.passages)
    texts = [corpus[d] for d in case["docs"]]
    n = len(texts)
    problem = "--skip-peer" if args.skip_peer else peer_ready(not args.no_peer_install)

    fake = Fake(args.latency_ms)
    tmp = tempfile.TemporaryDirectory(prefix="bench-compact-")
    root = Path(tmp.name)
    try:
        inp = root / "passages.jsonl"
        inp.write_text(
            "".join(json.dumps({"id": d, "text": corpus[d]}) + "\n" for d in case["docs"])
        )
        files = []
        for i, t in enumerate(texts):
            f = root / f"p{i}.txt"
            f.write_text(t)
            files.append(f"@{f}")
        cfg = root / "ours.yaml"
        cfg.write_text(
            json.dumps(
                {
                    "data_dir": str(root / "state"),
                    "clef": {"backend": "self-hosted", "base_url": fake.url, "cache": False},
                }
            )
        )
        ours_env = {k: v for k, v in child_env().items() if not k.startswith("CLOUDFLARE_")}
        ours_env = {k: v for k, v in ours_env.items() if k not in ("CLEF_BASE_URL",)}
        if not args.no_bytecode_cache:
            ours_env.pop("PYTHONDONTWRITEBYTECODE", None)
            ours_env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
        cli = str(Path(sys.executable).with_name("clef-pipelines"))
        q = case["claim"]
        budget = str(args.budget)
        systems: dict[str, tuple[list[str], dict[str, str]]] = {
            "clef-pipelines": (
                [cli, "compact", "-q", q, "-i", str(inp), "--json", "--budget", budget],
                {**ours_env, "CLEF_PIPELINES_CONFIG": str(cfg)},
            )
        }
        if not problem:
            peer_env = clean_env({**PEER_ENV, "CLEF_BASE_URL": fake.url})
            systems["clef-compactor 0.2.1"] = (
                [str(PEER_VENV / "bin" / "clef-compact"), "-q", q, "-d", *files, "--json"]
                + ["--budget", budget],
                peer_env,
            )
        for cmd, env in systems.values():  # untimed: bytecode cache, first-use files
            timed_rusage(cmd, env, root)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
        names = list(systems)
        for r in range(args.runs):
            for name in names if r % 2 == 0 else names[::-1]:
                fake.reset()
                got = timed_rusage(*systems[name], root)
                got.update(sent(fake.stats(), n))
                runs[name].append(got)
        notes = []
        if not problem and any("tiktoken" in r["stderr"] for r in runs["clef-compactor 0.2.1"]):
            notes.append(
                "clef-compactor could not download tiktoken's cl100k_base (offline) and "
                "counted tokens by whitespace"
            )
        cold = {name: summary(rs) for name, rs in runs.items()}
        if args.callgrind:
            for name, (cmd, env) in systems.items():
                cold[name]["instructions"] = instructions(cmd, env, root)

        # warm
        warm: list[dict[str, Any]] = []
        job = root / "warm.json"
        job.write_text(
            json.dumps(
                {
                    "query": q,
                    "items": [{"id": d, "text": corpus[d]} for d in case["docs"]],
                    "texts": texts,
                    "budget": args.budget,
                    "rounds": args.warm_rounds,
                    "reset_url": f"{fake.url}/reset",
                }
            )
        )
        fake.reset()
        proc = subprocess.run(
            bench_cmd("compact", "--_ours-warm", str(cfg), str(job)),
            capture_output=True,
            text=True,
            env=ours_env,
            cwd=REPO,
            timeout=600,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"ours warm failed: {tail(proc.stderr)}")
        times = json.loads(proc.stdout.strip().splitlines()[-1])["times"]
        warm.append(warm_row("clef-pipelines", times, fake.stats(), args.warm_rounds, n))
        if not problem:
            driver = root / "peer_warm.py"
            driver.write_text(PEER_WARM)
            fake.reset()
            proc = subprocess.run(
                [str(PEER_VENV / "bin" / "python"), str(driver), str(job)],
                capture_output=True,
                text=True,
                env=clean_env({**PEER_ENV, "CLEF_BASE_URL": fake.url}),
                cwd=root,
                timeout=600,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"peer warm failed: {tail(proc.stderr)}")
            records = fake.stats()
            times = json.loads(proc.stdout.strip().splitlines()[-1])["times"]
            # The warm-up's requests are in the records too: count the rounds' only.
            per_round = len(records) // (args.warm_rounds + 1)
            records = records[per_round:]
            warm.append(warm_row(PEER, times, records, args.warm_rounds, n))
    finally:
        fake.stop()
        tmp.cleanup()

    preview = None if args.skip_preview else preview_run(args)
    load_after = os.getloadavg()[0]

    print(
        f"{n} SciFact abstracts ({sum(map(len, texts)):,} characters), one claim, fake System "
        f"One at {args.latency_ms:g} ms; load average {load_before:.1f} before, "
        f"{load_after:.1f} after"
    )
    print("\ncold CLI, interleaved, median of", args.runs)
    print("| system | wall s (best) | CPU s | peak RSS MiB | requests | bytes per passage |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, c in cold.items():
        print(
            f"| {name} | {c['wall_median_s']:.2f} ({c['wall_best_s']:.2f}) | "
            f"{c['cpu_median_s']:.2f} | {c['rss_median_mib']:.0f} | {c['requests']} | "
            f"{c['bytes_per_passage']:,} |"
        )
    for name, c in cold.items():
        if "instructions" in c:
            print(f"{name}: {c['instructions'] / 1e9:.3f} G instructions (callgrind, one run)")
    if problem:
        print(f"clef-compactor 0.2.1 left out: {problem}")
    for note in notes:
        print("note:", note)
    print(f"\nwarm, {args.warm_rounds} compactions after one warm-up")
    print("| system | p50 ms | p95 ms | requests | bytes per passage |")
    print("|---|---:|---:|---:|---:|")
    for w in warm:
        print(
            f"| {w['system']} | {w['p50_ms']:.1f} | {w['p95_ms']:.1f} | "
            f"{w['requests_per_compaction']} | {w['bytes_per_passage']:,} |"
        )
    if preview is not None:
        pos = preview["position"]
        print(
            f"\npreview on {preview['cases']} SciFact claims ({preview['passages']} abstracts "
            f"each), judge: {preview['judge']}"
        )
        print("| preview_chars | relevant kept | cases with one kept | bytes per passage |")
        print("|---|---:|---:|---:|")
        for key in (k for k in preview if k.startswith("preview_")):
            p = preview[key]
            print(
                f"| {key.removeprefix('preview_')} | {p['relevant_kept']} of {p['relevant']} "
                f"({p['share_kept']:.1%}) | {p['cases_with_one_kept']} | "
                f"{p['bytes_per_passage']:,} |"
            )
        print(
            f"relevant abstracts whose sentence closest to the claim starts past "
            f"{args.preview_chars} characters: {pos['closest_sentence_past_preview']} of "
            f"{pos['relevant_abstracts']} ({pos['share_past_preview']:.1%}); longer than the "
            f"preview: {pos['longer_than_preview']}"
        )
    return {
        "passages": n,
        "characters": sum(map(len, texts)),
        "latency_ms": args.latency_ms,
        "load_before": round(load_before, 2),
        "load_after": round(load_after, 2),
        "cold": cold,
        "peer_left_out": problem or None,
        "notes": notes,
        "warm": warm,
        "preview": preview,
    }
