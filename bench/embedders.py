"""Embedders side by side: ingest cost per 1,000 chunks and query latency, on the same texts.

    .venv/bin/python -m bench run embedders [--kinds minilm,e5-multilingual] [--docs 60]
        [--rounds 2] [--queries 100] [--quick] [--json]

The texts are the chunks' embed texts of the first --docs SciFact abstracts
(../shared/data/scifact, $CLEF_SHARED_DATA), parsed and chunked as ingest does (default
settings). Each embedder is built from `embedder.kind` as the product builds it, loaded and
warmed before any timing; then all of them embed the same chunks, one after another, --rounds
times (so that the load of a shared machine falls on each alike): seconds per 1,000 chunks per
round, and each one's ratio to the first kind's. Queries: the first --queries SciFact queries,
one at a time, through the query path (`Embedder.embed_queries`; MiniLM's numpy query
embedder, as `clef-pipelines query` runs it), after 5 warm-up queries: median and p90 ms.
A kind whose package is missing is reported as left out, with the extra to install.

Retrieval quality is the eval harness's (docs/RESULTS.md, "Embedders on SciFact").
`--quick`: 10 abstracts, one round, 20 queries.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import SCIFACT, need_shared

QUICK = {"docs": 10, "rounds": 1, "queries": 20}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kinds", default="minilm,e5-multilingual", help="embedder.kind list.")
    parser.add_argument("--docs", type=int, default=60, help="SciFact abstracts to chunk.")
    parser.add_argument("--rounds", type=int, default=2, help="Passes over the chunks.")
    parser.add_argument("--queries", type=int, default=100, help="Single queries timed.")


def _chunks(docs: int) -> list[str]:
    """The chunks' embed texts of the first ``docs`` SciFact abstracts, as ingest cuts them."""
    from clef_pipelines.chunking import chunk_blocks
    from clef_pipelines.config import Settings, SourceConfig
    from clef_pipelines.parsing.loaders import iter_source_entries
    from clef_pipelines.parsing.parse import parse_document

    settings = Settings()
    texts: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "scifact.jsonl"
        with (SCIFACT / "corpus.jsonl").open() as src:
            corpus.write_text("".join(line for _, line in zip(range(docs), src, strict=False)))
        source = SourceConfig(name="scifact", path=str(corpus), kind="jsonl")
        for entry in iter_source_entries(source, Path(tmp), settings.parsing):
            doc = entry.load()
            blocks = parse_document(doc, settings.parsing)
            cut = chunk_blocks(blocks, doc.title, doc.doc_id, settings.chunking)
            texts += [c.embed_text for c in cut]
    return texts


def _build(kind: str) -> Any:
    from clef_pipelines.config import Settings
    from clef_pipelines.embedding import make_embedder
    from clef_pipelines.retrieval.config import RetrievalConfig
    from clef_pipelines.retrieval.retriever import query_embedder

    settings = Settings.model_validate({"embedder": {"kind": kind}})
    return make_embedder(settings.embedder), query_embedder(settings, RetrievalConfig())


def run(args: argparse.Namespace) -> dict[str, Any]:
    from clef_pipelines.embedding import EmbedderError

    need_shared(SCIFACT)
    chunks = _chunks(args.docs)
    queries = [json.loads(x)["text"] for x in (SCIFACT / "queries.jsonl").open()][: args.queries]
    built: dict[str, Any] = {}
    left_out: dict[str, str] = {}
    for kind in [k.strip() for k in args.kinds.split(",") if k.strip()]:
        try:
            passages, query = _build(kind)
            passages.embed(chunks[:4])  # load and warm: no model load is timed
            query.embed_queries(queries[:5])
            built[kind] = (passages, query)
        except EmbedderError as exc:
            left_out[kind] = str(exc)
    per_1000: dict[str, list[float]] = {k: [] for k in built}
    for _ in range(args.rounds):
        for kind, (passages, _) in built.items():
            started = time.perf_counter()
            passages.embed(chunks)
            per_1000[kind].append(round((time.perf_counter() - started) / len(chunks) * 1000, 1))
    results: dict[str, Any] = {"chunks": len(chunks), "left_out": left_out, "kinds": {}}
    first = next(iter(per_1000.values()), [])
    for kind, (passages, query) in built.items():
        ms = []
        for text in queries:
            started = time.perf_counter()
            query.embed_queries([text])
            ms.append((time.perf_counter() - started) * 1000)
        results["kinds"][kind] = {
            "name": passages.name,
            "s_per_1000_chunks": per_1000[kind],
            "ratio_to_first": [round(b / a, 2) for a, b in zip(first, per_1000[kind], strict=True)],
            "query_ms_median": round(statistics.median(ms), 2),
            "query_ms_p90": round(sorted(ms)[int(0.9 * (len(ms) - 1))], 2),
        }
    print(f"{len(chunks)} chunks of {args.docs} SciFact abstracts, {args.rounds} rounds\n")
    print("| kind | s per 1,000 chunks | ratio | query ms p50 / p90 |\n|---|---|---|---|")
    for kind, r in results["kinds"].items():
        print(
            f"| {kind} | {r['s_per_1000_chunks']} | {r['ratio_to_first']} | "
            f"{r['query_ms_median']} / {r['query_ms_p90']} |"
        )
    for kind, why in left_out.items():
        print(f"| {kind} | left out: {why} | | |")
    return results
