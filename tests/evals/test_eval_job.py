"""The evaluation assets in real in-process Dagster runs, and `clef-pipelines eval`."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import ir_measures
import polars as pl
from ir_measures import nDCG
from typer.testing import CliRunner

from clef_pipelines.cli.eval_cmds import eval_overrides
from clef_pipelines.cli.main import app
from clef_pipelines.config import apply_overrides, load_settings
from clef_pipelines.evals.config import EvalDatasetConfig
from clef_pipelines.evals.metrics import doc_ranking
from clef_pipelines.jobs.launch import run_evaluation
from clef_pipelines.stores import open_store
from tests.shared_data import INJECTIONS, SQUAD, need


def test_squad_through_ingestion_and_eval_job(eval_config: Path) -> None:
    settings = load_settings(eval_config)
    dataset = EvalDatasetConfig(name="squad", spec=f"squad:{need(SQUAD)}")
    overrides = eval_overrides(settings, dataset, top_k=10)
    settings = apply_overrides(settings, overrides)
    result = run_evaluation(settings, "squad")
    assert result.success, result.error

    # The collection was built by the ingestion graph, under the dataset's partition key.
    instance = dg.DagsterInstance.get()
    for key in ("store_sync", "chunks", "eval_candidates", "eval_report"):
        mat = instance.get_latest_materialization_event(dg.AssetKey(["clef", key]))
        assert mat is not None and mat.dagster_event.partition == "squad", key  # type: ignore[union-attr]
    store = open_store(settings.store, settings.data_path)
    try:
        assert {r["doc_id"] for r in store.scan("eval-squad", fields=["doc_id"])} == {
            d for d in _squad_doc_ids(settings.data_path)
        }
    finally:
        store.close()

    meta = result.assets["eval_report"]
    assert "data:image/png;base64," in meta["report"]
    assert "| vector |" in meta["report"]
    report = json.loads(Path(meta["report_json"]).read_text())
    assert Path(meta["chart"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["queries"] == 626 and report["unanswerable"] == 333 and report["documents"] == 87
    vector = report["systems"]["vector"]
    assert meta["vector/ndcg@10"] == round(vector["ndcg@10"], 6)
    assert vector["abstain_unanswerable"] == 0.0 and vector["context_tokens"] > 0
    # Full-text and fused recall are scored on the same candidates.
    for name in ("text", "hybrid"):
        assert 0.0 < report["systems"][name]["ndcg@10"] <= 1.0, name
    low, high = report["intervals"]["vector"]["ndcg@10"]
    assert low <= vector["ndcg@10"] <= high

    # Recompute nDCG@10 from the recorded candidates with trec_eval's code.
    candidates = pl.read_parquet(
        settings.data_path / "intermediates" / "clef" / "eval_candidates" / "squad.parquet"
    )
    queries = pl.read_parquet(
        settings.data_path / "intermediates" / "clef" / "eval_dataset" / "squad.parquet"
    )
    judged = queries.filter(~pl.col("unanswerable"))
    qrels = {
        row["query_id"]: {r["doc_id"]: r["grade"] for r in row["relevant"]}
        for row in judged.iter_rows(named=True)
    }
    run: dict[str, dict[str, float]] = {}
    for (qid,), part in candidates.partition_by("query_id", as_dict=True).items():
        if qid in qrels:
            vector_rows = part.filter(pl.col("vector_score").is_not_null()).sort("rank")
            ranked = doc_ranking(vector_rows.select("doc_id", "vector_score").iter_rows())
            run[qid] = {d: float(len(ranked) - i) for i, (d, _) in enumerate(ranked)}
    values = {m.query_id: m.value for m in ir_measures.iter_calc([nDCG @ 10], qrels, run)}
    expected = sum(values.get(q, 0.0) for q in qrels) / len(qrels)
    assert abs(vector["ndcg@10"] - expected) < 1e-6
    assert report["queries_per_metric"]["vector"]["ndcg@10"] == len(qrels) == 293


def _squad_doc_ids(data_path: Path) -> set[str]:
    corpus = data_path / "evals" / "squad" / "corpus.jsonl"
    return {json.loads(line)["id"] for line in corpus.read_text().splitlines()}


def test_cli_eval_json_and_injections(eval_config: Path, tmp_path: Path) -> None:
    corpus_dir = tmp_path / "mini"
    corpus_dir.mkdir()
    (corpus_dir / "corpus.jsonl").write_text(
        "".join(
            json.dumps({"id": f"d{i}", "title": t, "text": f"{t} is described here in detail."})
            + "\n"
            for i, t in enumerate(["Paris", "Lyon", "Nice", "Lille", "Brest"])
        )
    )
    (corpus_dir / "queries.jsonl").write_text(
        json.dumps({"id": "q1", "text": "Paris described", "relevant": ["d0"]})
        + "\n"
        + json.dumps({"id": "q2", "text": "Brest", "relevant": {"d4": 2}})
        + "\n"
    )
    runner = CliRunner()
    out = runner.invoke(
        app,
        ["eval", f"jsonl:{corpus_dir}", "--top-k", "3", "--json", "-c", str(eval_config)],
    )
    assert out.exit_code == 0, out.output
    document = json.loads(out.output)
    assert document["dataset"] == "mini" and document["top_k"] == 3
    assert set(document["systems"]["vector"]) >= {"ndcg@10", "recall@3", "mrr@10"}
    assert document["clef_label"].startswith("off")

    # The first 150 labelled texts: the command's path is the same on all 546.
    out = runner.invoke(
        app,
        ["eval", f"injections:{need(INJECTIONS)}", "--limit", "150", "-c", str(eval_config)],
    )
    assert out.exit_code == 0, out.output
    assert "prompt_injections-train" in out.output

    out = runner.invoke(app, ["eval", "beir:/nonexistent", "-c", str(eval_config)])
    assert out.exit_code != 0
    assert "corpus.jsonl" in out.output
