"""Dataset loaders on the real shared files and on small broken copies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clef_pipelines.evals.config import EvalDatasetConfig
from clef_pipelines.evals.datasets import DatasetError, load_dataset
from tests.shared_data import INJECTIONS, SCIFACT, SQUAD, need


def _cfg(spec: str, **kw: object) -> EvalDatasetConfig:
    return EvalDatasetConfig(name="d", spec=spec, **kw)


def test_beir_scifact_train(tmp_path: Path) -> None:
    ds = load_dataset(_cfg(f"beir:{need(SCIFACT)}"), tmp_path)
    assert len(ds.queries) == 809
    assert sum(len(q.relevant) for q in ds.queries) == 919
    assert ds.documents == 5183
    assert ds.corpus_path == SCIFACT / "corpus.jsonl"
    assert ds.queries[0].id == "0" and ds.queries[0].relevant == {"31715818": 1}
    limited = load_dataset(_cfg(f"beir:{SCIFACT}", limit=50), tmp_path)
    assert [q.id for q in limited.queries] == [q.id for q in ds.queries[:50]]


def test_beir_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no qrels for split 'test'.*splits: train"):
        load_dataset(_cfg(f"beir:{need(SCIFACT)}", split="test"), tmp_path)
    broken = tmp_path / "beir"
    (broken / "qrels").mkdir(parents=True)
    (broken / "corpus.jsonl").write_text('{"_id": "1", "text": "x"}\n')
    (broken / "queries.jsonl").write_text('{"_id": "q1", "text": "a claim"}\n')
    (broken / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\t1\n")
    with pytest.raises(DatasetError, match=r"train.tsv line 2: expected 3"):
        load_dataset(_cfg(f"beir:{broken}"), tmp_path)
    (broken / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq2\t1\t1\n")
    with pytest.raises(DatasetError, match="not in queries.jsonl"):
        load_dataset(_cfg(f"beir:{broken}"), tmp_path)


def test_squad_paragraphs_are_documents(tmp_path: Path) -> None:
    ds = load_dataset(_cfg(f"squad:{need(SQUAD)}"), tmp_path)
    assert len(ds.queries) == 626
    assert sum(q.unanswerable for q in ds.queries) == 333
    assert ds.documents == 87
    lines = [json.loads(x) for x in ds.corpus_path.read_text().splitlines()]  # type: ignore[union-attr]
    assert len(lines) == 87 and {"id", "title", "text"} <= set(lines[0])
    by_id = {d["id"]: d for d in lines}
    answerable = next(q for q in ds.queries if not q.unanswerable)
    (doc_id,) = answerable.relevant
    assert any(a in by_id[doc_id]["text"] for a in answerable.answers)
    mtime = ds.corpus_path.stat().st_mtime_ns  # type: ignore[union-attr]
    load_dataset(_cfg(f"squad:{SQUAD}"), tmp_path)
    assert ds.corpus_path.stat().st_mtime_ns == mtime  # type: ignore[union-attr]  # unchanged


def test_jsonl_queries_beside_a_corpus(tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_text('{"id": "a", "text": "alpha"}\n')
    (tmp_path / "queries.jsonl").write_text(
        '{"id": "1", "text": "what is alpha", "relevant": ["a"]}\n'
        '{"id": "2", "query": "graded", "relevant": {"a": 2}}\n'
        '{"id": "3", "text": "nothing here", "unanswerable": true}\n'
    )
    ds = load_dataset(_cfg(f"jsonl:{tmp_path}"), tmp_path)
    assert [(q.id, q.relevant, q.unanswerable) for q in ds.queries] == [
        ("1", {"a": 1}, False),
        ("2", {"a": 2}, False),
        ("3", {}, True),
    ]
    (tmp_path / "queries.jsonl").write_text('{"id": "1", "text": "no labels"}\n')
    with pytest.raises(DatasetError, match=r"queries.jsonl line 1: no 'relevant'"):
        load_dataset(_cfg(f"jsonl:{tmp_path / 'queries.jsonl'}"), tmp_path)


def test_injections_and_planting(tmp_path: Path) -> None:
    ds = load_dataset(_cfg(f"injections:{need(INJECTIONS)}"), tmp_path)
    assert len(ds.injections) == 546 and sum(r.label for r in ds.injections) == 203
    assert ds.corpus_path is None and ds.queries == []
    planted = load_dataset(_cfg(f"injections:{INJECTIONS}", host=f"squad:{need(SQUAD)}"), tmp_path)
    docs = [json.loads(x) for x in planted.corpus_path.read_text().splitlines()]  # type: ignore[union-attr]
    marked = [d for d in docs if d.get("metadata", {}).get("planted_start")]
    assert len(docs) == 87 and len(marked) == 43
    texts = {r.text for r in ds.injections if r.label == 1}
    assert all(d["text"][d["metadata"]["planted_start"] :] in texts for d in marked)
    assert planted.queries and all(not q.unanswerable for q in planted.queries)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x", "label": 3}\n')
    with pytest.raises(DatasetError, match=r"bad.jsonl line 1"):
        load_dataset(_cfg(f"injections:{bad}"), tmp_path)


def test_spec_is_validated() -> None:
    with pytest.raises(ValueError, match="KIND:PATH"):
        EvalDatasetConfig(name="x", spec="trec:/tmp/x")
