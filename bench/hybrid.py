"""Hybrid retrieval benchmark on SciFact: vector, text and hybrid recall, quality and speed.

    python -m bench run hybrid cache      # ingest SciFact (project chunking, MiniLM) once and
                                            # cache chunk records + query vectors in bench/results
    python -m bench run hybrid cache --from-store DIR
                                            # the same from a collection already ingested (the
                                            # eval harness's eval-scifact under data_dir DIR)
    python -m bench run hybrid quality    # nDCG@10, recall@10, recall@100 on the train qrels
    python -m bench run hybrid speed      # query p50 per store and mode, text index build time
    python -m bench run hybrid tune       # fusion settings chosen on half of train
    python -m bench run hybrid --quick [--json]
                                          # cache, quality and speed on the first 300 abstracts
                                          # (hash embedder, LanceDB) in a scratch folder

The cache step runs the real ingestion job (Dagster, in-process) into a LanceDB collection and
dumps what it stored; later steps load those records into each store, so the embedder runs once.
Every step's flags are accepted by one parser (the old script's, subcommand first); `--kinds`
defaults to lancedb for quality and lancedb,pgvector for speed. pgvector uses $CLEF_PG_DSN or a
throwaway server (bench/_pg.py); where neither works it is left out with the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np

from bench._common import REPO, SCIFACT, need_shared

ROOT = REPO
DATA = SCIFACT
#: Cache and results; CLEF_BENCH_RESULTS moves them (a scratch run).
RESULTS = pathlib.Path(os.environ.get("CLEF_BENCH_RESULTS") or ROOT / "bench" / "results")
CHUNKS = RESULTS / "scifact_chunks.parquet"
QUERIES = RESULTS / "scifact_queries.parquet"
STEPS = ("cache", "quality", "tune", "speed")
QUICK = {
    "docs": 300,
    "embedder": "hash",
    "limit": 30,
    "queries": 20,
    "kinds": ["lancedb"],
    "sizes": [0],
}


def use_results(folder: pathlib.Path) -> None:
    """Keep the cache and results under ``folder`` (a scratch run: --quick)."""
    global RESULTS, CHUNKS, QUERIES
    RESULTS = folder
    CHUNKS = RESULTS / "scifact_chunks.parquet"
    QUERIES = RESULTS / "scifact_queries.parquet"


MODES = ("vector", "text", "hybrid")
#: Chunks fetched per query for the quality metrics: enough to rank 100 distinct documents.
QUALITY_DEPTH = 300


def cache(args: argparse.Namespace) -> None:
    """Ingest SciFact (the first --docs abstracts; all by default) and cache what was stored."""
    import yaml

    from clef_pipelines.config import load_settings
    from clef_pipelines.jobs.launch import run_ingestion

    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.from_store:
        dump(pathlib.Path(args.from_store), args.collection)
        return
    state = RESULTS / "scifact-state"
    cfg = RESULTS / "scifact.yaml"
    corpus = DATA / "corpus.jsonl"
    if args.docs:
        corpus = RESULTS / "scifact_head.jsonl"
        with (DATA / "corpus.jsonl").open() as src, corpus.open("w") as dst:
            for i, line in enumerate(src):
                if i >= args.docs:
                    break
                dst.write(line)
    cfg.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(state),
                "collection": "scifact",
                "sources": [{"name": "scifact", "path": str(corpus), "kind": "jsonl"}],
                "embedder": {"kind": args.embedder},
                "store": {"kind": "lancedb"},
            }
        )
    )
    os.environ["DAGSTER_HOME"] = str(state / "dagster")
    settings = load_settings(cfg)
    started = time.perf_counter()
    (report,) = run_ingestion(settings, ["scifact"])
    if not report.success:
        raise SystemExit(f"ingestion failed: {report.error}")
    print(f"ingested in {time.perf_counter() - started:.0f} s")
    dump(settings.data_path, "scifact", settings.store, settings.embedder)


def dump(
    data_dir: pathlib.Path, collection: str, store_cfg: Any = None, emb_cfg: Any = None
) -> None:
    """Cache an ingested collection's records (vectors included) and every query's vector."""
    import polars as pl

    from clef_pipelines.config import EmbedderConfig
    from clef_pipelines.embedding import make_embedder
    from clef_pipelines.stores import open_store
    from clef_pipelines.stores.config import StoreConfig

    store = open_store(store_cfg or StoreConfig(kind="lancedb"), data_dir)
    ids = store.list_ids(collection)
    if not ids:
        raise SystemExit(f"collection {collection!r} under {data_dir} is empty or missing")
    rows = []
    for i in range(0, len(ids), 1000):
        rows.extend(store.get(collection, ids[i : i + 1000], with_vectors=True))
    # The schema from every row: a field that is null in the first rows has no type yet.
    pl.DataFrame(rows, infer_schema_length=None).write_parquet(CHUNKS)
    print(f"{len(rows)} chunks of {collection} -> {CHUNKS}")
    queries = [json.loads(line) for line in (DATA / "queries.jsonl").open() if line.strip()]
    embedder = make_embedder(emb_cfg or EmbedderConfig())
    vecs = embedder.embed_queries([q["text"] for q in queries])
    pl.DataFrame(
        {
            "query_id": [str(q["_id"]) for q in queries],
            "text": [q["text"] for q in queries],
            "vector": [np.asarray(v, dtype=np.float32).tolist() for v in vecs],
        }
    ).write_parquet(QUERIES)
    print(f"{len(queries)} queries -> {QUERIES}")


# ------------------------------------------------------------------------------ loading


def load_cached() -> tuple[list[dict[str, Any]], Any]:
    import polars as pl

    if not CHUNKS.exists() or not QUERIES.exists():
        raise SystemExit(f"no cache under {RESULTS}: run `python -m bench run hybrid cache`")
    records = pl.read_parquet(CHUNKS).to_dicts()
    return records, pl.read_parquet(QUERIES)


def chunk_spec(name: str, records: list[dict[str, Any]], *, text: bool = True) -> Any:
    from clef_pipelines.ingest.sync import TEXT_FIELDS
    from clef_pipelines.records import FILTER_FIELDS, RECORD_FIELDS
    from clef_pipelines.stores.base import CollectionSpec

    fields: dict[str, Any] = dict(RECORD_FIELDS)
    fields.update({k: "str" for k in records[0] if k.startswith("m_")})
    return CollectionSpec(
        name=name,
        dimension=len(records[0]["vector"]),
        metric="cosine",
        fields=fields,
        filter_fields=FILTER_FIELDS,
        text_fields=TEXT_FIELDS if text else (),
    )


def scaled(records: list[dict[str, Any]], size: int, seed: int = 0) -> list[dict[str, Any]]:
    """``size`` records: the SciFact chunks, then copies with new ids and document ids and
    slightly perturbed unit vectors (the same text), to reach a 100k-chunk collection without
    embedding 100k new passages on a shared 2-core machine."""
    if size <= len(records):
        return records[:size]
    rng = np.random.default_rng(seed)
    out = list(records)
    copy = 0
    while len(out) < size:
        copy += 1
        for r in records:
            if len(out) >= size:
                break
            v = np.asarray(r["vector"], dtype=np.float32)
            v = v + 0.05 * rng.standard_normal(v.shape).astype(np.float32) / np.sqrt(len(v))
            out.append(
                {
                    **r,
                    "id": str(uuid.uuid5(uuid.UUID(r["id"]), str(copy))),
                    "doc_id": f"{r['doc_id']}~{copy}",
                    "vector": (v / np.linalg.norm(v)).tolist(),
                }
            )
    return out


#: pgvector's full-text budget (store.pgvector.text_candidates); None: the store's default.
PG_TEXT_CANDIDATES: int | None = None
#: pgvector: weigh each query term's ts_rank by its IDF (--pg-text-idf).
PG_TEXT_IDF = False


@contextlib.contextmanager
def open_store(kind: str, root: pathlib.Path, dsn: str | None) -> Iterator[Any]:
    if kind == "memory":
        from clef_pipelines.stores.memory import MemoryStore

        store: Any = MemoryStore()
    elif kind == "lancedb":
        from clef_pipelines.stores.lancedb_store import LanceDBStore

        store = LanceDBStore(root / "lancedb")
    elif kind == "qdrant":
        from clef_pipelines.stores.qdrant_store import QdrantStore

        store = QdrantStore(path=":memory:")
    else:
        from clef_pipelines.stores.pgvector_store import PgVectorStore

        store = PgVectorStore(dsn or "", schema="b_" + uuid.uuid4().hex[:10])
        if PG_TEXT_CANDIDATES is not None:
            store.text_candidates = PG_TEXT_CANDIDATES
        store.text_idf = PG_TEXT_IDF
    try:
        yield store
    finally:
        with contextlib.suppress(Exception):
            store.drop("scifact")
        store.close()


def load(store: Any, records: list[dict[str, Any]], *, text: bool = True) -> dict[str, float]:
    """Upsert in batches of 1,000, then the index step; both timed."""
    store.ensure_collection(chunk_spec("scifact", records, text=text))
    started = time.perf_counter()
    for i in range(0, len(records), 1000):
        store.upsert("scifact", records[i : i + 1000])
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    store.build_indexes("scifact")
    if text:
        store.ensure_text_index("scifact")
    return {"load_s": loaded, "index_s": time.perf_counter() - started}


@contextlib.contextmanager
def stores(kinds: list[str]) -> Iterator[Any]:
    """(kind, store factory) pairs; one PostgreSQL server for every pgvector store."""
    with contextlib.ExitStack() as stack:
        dsn = None
        if "pgvector" in kinds:
            from bench._pg import pg_dsn

            try:
                dsn = stack.enter_context(pg_dsn())
            except Exception as exc:  # noqa: BLE001 - reported, and pgvector left out
                print(f"# pgvector skipped: cannot start PostgreSQL + pgvector: {exc}")
                kinds.remove("pgvector")
        root = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bh-")))

        def factory(kind: str) -> Any:
            return open_store(kind, root / kind / uuid.uuid4().hex[:6], dsn)

        yield factory


# ------------------------------------------------------------------------------ quality


def train_qrels(split: str = "train") -> dict[str, set[str]]:
    qrels: dict[str, set[str]] = {}
    for line in (DATA / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]:
        qid, doc, rel = line.split("\t")[:3]
        if int(rel) > 0:
            qrels.setdefault(qid, set()).add(doc)
    return qrels


def doc_ranking(hits: list[Any]) -> list[str]:
    """Chunk hits -> documents, each at its best chunk's rank."""
    return list(dict.fromkeys(str(h.record["doc_id"]) for h in hits))


def metrics(ranking: list[str], relevant: set[str]) -> dict[str, float]:
    gains = [1.0 if d in relevant else 0.0 for d in ranking[:10]]
    dcg = sum(g / np.log2(i + 2) for i, g in enumerate(gains))
    idcg = sum(1.0 / np.log2(i + 2) for i in range(min(10, len(relevant))))
    return {
        "ndcg@10": dcg / idcg,
        "recall@10": len(relevant & set(ranking[:10])) / len(relevant),
        "recall@100": len(relevant & set(ranking[:100])) / len(relevant),
    }


def quality(args: argparse.Namespace) -> list[dict[str, Any]]:
    from clef_pipelines.retrieval.config import FusionConfig
    from clef_pipelines.retrieval.fusion import search

    records, queries = load_cached()
    qrels = train_qrels()
    queries = queries.filter(queries["query_id"].is_in(list(qrels)))
    if args.limit:
        queries = queries.head(args.limit)
    fusion = FusionConfig(
        method=args.fusion,
        rrf_k=args.rrf_k,
        candidates=args.candidates or QUALITY_DEPTH,
        vector_weight=args.vector_weight,
        text_weight=args.text_weight,
    )
    rows = []
    with stores(args.kinds) as factory:
        for kind in args.kinds:
            with factory(kind) as store:
                load(store, records)
                for mode in args.modes:
                    per_query = []
                    for q in queries.iter_rows(named=True):
                        hits = search(
                            store,
                            "scifact",
                            mode=mode,
                            text=q["text"],
                            vector=q["vector"],
                            top_k=QUALITY_DEPTH,
                            fusion=fusion,
                        )
                        per_query.append(metrics(doc_ranking(hits), qrels[q["query_id"]]))
                    row = {"store": kind, "mode": mode, "queries": len(per_query)}
                    for m in ("ndcg@10", "recall@10", "recall@100"):
                        row[m] = round(float(np.mean([p[m] for p in per_query])), 4)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    out = RESULTS / (
        f"hybrid_quality_{args.fusion}_k{args.rrf_k}_d{fusion.candidates}"
        f"_w{args.vector_weight:g}-{args.text_weight:g}.json"
    )
    out.write_text(json.dumps(rows, indent=1))
    print("\n| store | mode | nDCG@10 | recall@10 | recall@100 |\n|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['store']} | {r['mode']} | {r['ndcg@10']:.3f} | {r['recall@10']:.3f} | "
            f"{r['recall@100']:.3f} |"
        )
    return rows


# ------------------------------------------------------------------------------ tune


def tune(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Fusion settings compared on the SciFact train qrels (the only labelled split here): each
    store is asked once per query (lists QUALITY_DEPTH deep), then fused offline. The train
    queries are split in two stable halves by a hash of the id: settings are chosen on the
    `tune` half and shown on the `check` half, which chooses nothing, and on all of train."""
    from clef_pipelines.evals.clef_systems import dev_split
    from clef_pipelines.retrieval.config import FusionConfig
    from clef_pipelines.retrieval.fusion import fuse

    records, queries = load_cached()
    train = train_qrels("train")
    half = dev_split(sorted(train))
    splits = {
        "tune": {q: r for q, r in train.items() if q in half},
        "check": {q: r for q, r in train.items() if q not in half},
        "train": train,
    }
    queries = queries.filter(queries["query_id"].is_in(list(train)))
    lists: dict[str, tuple[list[Any], list[Any]]] = {}
    with stores([args.kind]) as factory, factory(args.kind) as store:
        load(store, records)
        for q in queries.iter_rows(named=True):
            lists[q["query_id"]] = (
                store.query("scifact", q["vector"], top_k=QUALITY_DEPTH),
                store.text_query("scifact", q["text"], top_k=QUALITY_DEPTH),
            )

    def score(cfg: FusionConfig | str, split: str) -> dict[str, float]:
        per_query = []
        for qid, relevant in splits[split].items():
            vector, text = lists[qid]
            if cfg == "vector":
                hits = vector
            elif cfg == "text":
                hits = text
            else:
                hits = fuse(vector[: cfg.candidates], text[: cfg.candidates], cfg)  # type: ignore[union-attr]
            per_query.append(metrics(doc_ranking(hits), relevant))
        return {m: round(float(np.mean([p[m] for p in per_query])), 4) for m in per_query[0]}

    grid: list[FusionConfig] = []
    for depth in (30, 100, 300):
        for k in (5, 10, 20, 30, 60, 100):
            for vw, tw in ((1.0, 1.0), (1.0, 0.75), (1.0, 0.5), (0.75, 1.0), (0.5, 1.0)):
                grid.append(
                    FusionConfig(
                        method="rrf", rrf_k=k, candidates=depth, vector_weight=vw, text_weight=tw
                    )
                )
        for method in ("weighted", "zscore"):
            for vw, tw in ((1.0, 1.0), (1.0, 0.75), (1.0, 0.5), (0.75, 1.0), (0.5, 1.0)):
                grid.append(
                    FusionConfig(method=method, candidates=depth, vector_weight=vw, text_weight=tw)
                )
    rows = [{"fusion": name, "tune": score(name, "tune")} for name in ("vector", "text")]
    for cfg in grid:
        k = f" k={cfg.rrf_k}" if cfg.method == "rrf" else ""
        label = (
            f"{cfg.method}{k} depth={cfg.candidates} w={cfg.vector_weight:g}/{cfg.text_weight:g}"
        )
        rows.append({"fusion": label, "tune": score(cfg, "tune"), "cfg": cfg})
    default = FusionConfig(candidates=100)
    best = max(rows[2:], key=lambda r: r["tune"]["ndcg@10"])
    shown = [
        *rows[:2],
        {
            "fusion": "rrf k=60 depth=100 w=1/1 (default until 1 Dec)",
            "cfg": FusionConfig(method="rrf", candidates=100),
        },
        {"fusion": f"default: {default.method} depth=100 w=1/1", "cfg": default},
        best,
    ]
    print(
        f"store {args.kind}; train {len(train)} queries = tune {len(splits['tune'])} + check "
        f"{len(splits['check'])}; {len(grid)} fusion settings tried on the tune half"
    )
    print("\n| fusion | half | nDCG@10 | recall@10 | recall@100 |\n|---|---|---|---|---|")
    for r in shown:
        cfg = r.get("cfg") or r["fusion"]
        for split in ("tune", "check", "train"):
            m = r[split] = score(cfg, split)
            print(
                f"| {r['fusion']} | {split} | {m['ndcg@10']:.3f} | {m['recall@10']:.3f} | "
                f"{m['recall@100']:.3f} |"
            )
    top = sorted(rows[2:], key=lambda r: -r["tune"]["ndcg@10"])[:10]
    print("\ntop 10 on the tune half (nDCG@10):")
    for r in top:
        print(f"  {r['tune']['ndcg@10']:.4f}  {r['fusion']}")
    # Each method family at the default depth and weights, on every half: is the choice of a
    # family (not of its best point on tune) what holds on the check half?
    print("\nper method at depth 100, w 1/1 (nDCG@10 tune / check / train):")
    for cfg in (FusionConfig(method=m, candidates=100) for m in ("rrf", "weighted", "zscore")):
        got = [score(cfg, split)["ndcg@10"] for split in ("tune", "check", "train")]
        print(f"  {cfg.method:8s} " + " / ".join(f"{g:.4f}" for g in got))
    out = RESULTS / f"hybrid_tune_{args.kind}.json"
    kept = [{k: v for k, v in r.items() if k != "cfg"} for r in rows]
    out.write_text(json.dumps(kept, indent=1))
    print(f"-> {out}")
    return kept


# ------------------------------------------------------------------------------ speed


def speed(args: argparse.Namespace) -> list[dict[str, Any]]:
    from clef_pipelines.retrieval.config import FusionConfig
    from clef_pipelines.retrieval.fusion import search

    records, queries = load_cached()
    rng = np.random.default_rng(0)
    picks = rng.choice(queries.height, size=min(args.queries, queries.height), replace=False)
    sample = [queries.row(int(i), named=True) for i in picks]
    fusion = FusionConfig(candidates=args.candidates) if args.candidates else FusionConfig()
    rows = []
    with stores(args.kinds) as factory:
        for size in args.sizes:
            data = scaled(records, size)
            for kind in args.kinds:
                if kind in ("memory", "qdrant") and size > 20_000:
                    continue  # reference / local-mode stores: brute force, not for 100k
                with factory(kind) as store:
                    timing = load(store, data)
                    row: dict[str, Any] = {"store": kind, "rows": len(data), **timing}
                    for mode in MODES:
                        for q in sample[:5]:  # warm caches
                            search(store, "scifact", mode=mode, text=q["text"],
                                   vector=q["vector"], top_k=args.top_k, fusion=fusion)  # fmt: skip
                    # Modes interleaved per query, so load from elsewhere hits all three alike.
                    lat: dict[str, list[float]] = {mode: [] for mode in MODES}
                    for q in sample:
                        for mode in MODES:
                            started = time.perf_counter()
                            search(store, "scifact", mode=mode, text=q["text"],
                                   vector=q["vector"], top_k=args.top_k, fusion=fusion)  # fmt: skip
                            lat[mode].append((time.perf_counter() - started) * 1000)
                    for mode in MODES:
                        row[f"{mode}_p50_ms"] = round(float(np.percentile(lat[mode], 50)), 2)
                        row[f"{mode}_p95_ms"] = round(float(np.percentile(lat[mode], 95)), 2)
                    row["hybrid/vector"] = round(row["hybrid_p50_ms"] / row["vector_p50_ms"], 2)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    (RESULTS / f"hybrid_speed_d{fusion.candidates}.json").write_text(json.dumps(rows, indent=1))
    print(
        "\n| store | rows | load s | index step s | vector p50 ms | text p50 ms | "
        "hybrid p50 ms | hybrid / vector |\n|---|---|---|---|---|---|---|---|"
    )
    for r in rows:
        print(
            f"| {r['store']} | {r['rows']:,} | {r['load_s']:.1f} | {r['index_s']:.1f} | "
            f"{r['vector_p50_ms']:.1f} | {r['text_p50_ms']:.1f} | {r['hybrid_p50_ms']:.1f} | "
            f"{r['hybrid/vector']:.2f} |"
        )
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "cmd",
        nargs="?",
        choices=STEPS,
        help="cache: ingest SciFact once and cache chunks and query vectors; quality: nDCG@10, "
        "recall@10, recall@100 on the train qrels; tune: fusion settings chosen on half of "
        "train, checked on the rest; speed: query p50 per store and mode, load and index time "
        "(none with --quick: cache, quality and speed in a scratch folder)",
    )
    c = parser.add_argument_group("cache")
    c.add_argument("--from-store", help="data_dir of a LanceDB store that already holds it")
    c.add_argument("--collection", default="eval-scifact", help="with --from-store")
    c.add_argument("--docs", type=int, default=0, help="Only the first N abstracts (0: all).")
    c.add_argument("--embedder", default="minilm", choices=["minilm", "hash"])
    q = parser.add_argument_group("quality and speed")
    q.add_argument(
        "--kinds",
        type=lambda s: s.split(","),
        help="Stores (quality: lancedb; speed: lancedb,pgvector).",
    )
    q.add_argument("--candidates", type=int, default=0, help="quality: per-list depth (default "
                   "300); speed: fusion.candidates (default: its)")  # fmt: skip
    q.add_argument("--pg-text-candidates", type=int, help="pgvector text budget (0: unbounded)")
    q.add_argument("--pg-text-idf", action="store_true", help="pgvector: IDF-weighted ts_rank")
    q = parser.add_argument_group("quality")
    q.add_argument("--fusion", choices=["zscore", "weighted", "rrf"], default="zscore")
    q.add_argument("--rrf-k", type=int, default=60)
    q.add_argument("--vector-weight", type=float, default=1.0)
    q.add_argument("--text-weight", type=float, default=1.0)
    q.add_argument("--limit", type=int, default=0, help="Only the first N train queries.")
    q.add_argument("--modes", type=lambda s: s.split(","), default=list(MODES))
    t = parser.add_argument_group("tune")
    t.add_argument("--kind", default="lancedb")
    p = parser.add_argument_group("speed")
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[0, 100_000])
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--top-k", type=int, default=30, help="retrieval.top_k (the default: 30)")


def run_step(cmd: str, args: argparse.Namespace) -> Any:
    step = argparse.Namespace(**vars(args))
    if step.kinds is None:
        step.kinds = ["lancedb", "pgvector"] if cmd == "speed" else ["lancedb"]
    else:
        step.kinds = list(step.kinds)
    if cmd == "speed":
        # size 0: the SciFact collection as ingested.
        n = len(load_cached()[0])
        step.sizes = [s or n for s in step.sizes]
    return {"cache": cache, "quality": quality, "tune": tune, "speed": speed}[cmd](step)


def run(args: argparse.Namespace) -> dict[str, Any]:
    global PG_TEXT_CANDIDATES, PG_TEXT_IDF
    PG_TEXT_CANDIDATES = args.pg_text_candidates
    PG_TEXT_IDF = bool(args.pg_text_idf)
    if args.cmd:
        if args.cmd == "cache" and not args.from_store:
            need_shared(DATA / "corpus.jsonl")
        return {args.cmd: run_step(args.cmd, args)}
    if not args.quick:
        raise SystemExit(f"hybrid: name a step ({', '.join(STEPS)}), or --quick")
    need_shared(DATA / "corpus.jsonl")
    with tempfile.TemporaryDirectory(prefix="bench-hybrid-quick-") as tmp:
        use_results(pathlib.Path(tmp))
        out = {step: run_step(step, args) for step in ("cache", "quality", "speed")}
    return {"docs": args.docs, "embedder": args.embedder, **out}
