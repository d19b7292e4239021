"""The Clef systems and injection rows on real SQuAD data, with the fake System One server
answering as a reader who knows the labels. These numbers test the plumbing (every Clef score
recorded once, replayed by each system, usage charged, the gate tuned on a dev half); they say
nothing about the model, and the report says so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from clef_pipelines.cli.eval_cmds import eval_overrides
from clef_pipelines.config import apply_overrides, load_settings
from clef_pipelines.evals.config import EvalDatasetConfig
from clef_pipelines.evals.datasets import squad_documents
from clef_pipelines.jobs.launch import run_evaluation
from clef_pipelines.testing.fake_systemone import FakeServer
from tests.shared_data import INJECTIONS, SQUAD, need


def _passage(question: dict[str, Any], state: Any) -> str:
    ins = question["instructions"]
    if isinstance(ins, dict):
        return ins["passage"]
    return state[ins.split("`")[1]]


def oracle() -> Any:
    """Clef as a reader who knows SQuAD's labels: evidence is the question's own paragraph,
    the gate opens for answerable questions, planted text instructs an AI."""
    docs, queries = squad_documents(need(SQUAD))
    text_of_doc = {d["id"]: d["text"] for d in docs}
    by_question = {q.text: q for q in queries}

    def answer(qid: str, question: dict[str, Any], state: Any) -> Any:
        query = by_question.get(state.get("query", "")) if isinstance(state, dict) else None
        if qid == "answerable":
            return 0.1 if query is None or query.unanswerable else 0.9
        name = qid.rsplit(".", 1)[-1]
        text = _passage(question, state)
        own = query is not None and any(text_of_doc[d] in text for d in query.relevant)
        if name == "instructs_ai":
            return (
                0.97
                if "\n\n" in text and not any(text == t for t in text_of_doc.values())
                else 0.02
            )
        if name in ("is_relevant", "contains_answer_evidence"):
            return 0.9 if own else 0.1
        if name == "contradicts_query_premise":
            return 0.02
        return None

    return answer


@pytest.fixture
def fake_clef(eval_config: Path) -> Iterator[Path]:
    with FakeServer(answerer=oracle()) as server:
        raw = yaml.safe_load(eval_config.read_text())
        raw["clef"] = {"backend": "self-hosted", "base_url": server.base_url, "cache": False}
        raw["chunking"] = {"min_tokens": 40, "target_tokens": 400, "max_tokens": 480}
        eval_config.write_text(yaml.safe_dump(raw))
        yield eval_config


def _run(config: Path, dataset: EvalDatasetConfig, **changes: Any) -> dict[str, Any]:
    settings = load_settings(config)
    overrides = eval_overrides(settings, dataset, **changes)
    settings = apply_overrides(settings, overrides)
    result = run_evaluation(settings, dataset.name)
    assert result.success, result.error
    return json.loads(Path(result.assets["eval_report"]["report_json"]).read_text())


def test_clef_systems_on_squad_with_the_fake_server(fake_clef: Path) -> None:
    report = _run(fake_clef, EvalDatasetConfig(name="squad", spec=f"squad:{SQUAD}", limit=60))
    assert "fake System One server" in report["clef_label"]
    assert "NOT model quality" in report["clef_label"]
    systems = report["systems"]
    assert set(systems) >= {"vector", "clef-rerank", "clef-rank", "clef-gate", "clef-gate-tuned"}
    assert report["unavailable"] == {}
    assert "clef_failures" not in report
    # An oracle re-ranker puts the paragraph first whenever recall found it (the Clef
    # systems rerank the list of the query path's recall mode: hybrid by default).
    recall_mode = load_settings(fake_clef).retrieval.mode
    assert systems["clef-rerank"]["evidence_first"] == pytest.approx(
        systems[recall_mode][f"recall@{report['top_k']}"]
    )
    assert systems["clef-rerank"]["ndcg@10"] > systems[recall_mode]["ndcg@10"]
    assert systems["clef-threshold"]["context_tokens"] < systems["vector"]["context_tokens"]
    assert systems["clef-compact"]["context_tokens"] <= 300
    # The gate refuses the unanswerable questions and keeps the answerable ones.
    assert systems["clef-gate"]["abstain_unanswerable"] == 1.0
    assert systems["clef-gate"]["abstain_answerable"] == 0.0
    sweep = report["gate_sweep"]
    assert 0.1 < sweep["chosen_answer_min"] <= 0.9
    assert systems["clef-gate-tuned"]["abstain_unanswerable"] == 1.0
    # Clef usage is charged: classification for every system, the gate request on top.
    assert systems["clef-rank"]["clef_requests"] >= 1
    assert systems["clef-gate"]["clef_requests"] == pytest.approx(
        systems["clef-rank"]["clef_requests"] + 1
    )
    assert systems["clef-gate"]["clef_input_tokens"] > systems["clef-rank"]["clef_input_tokens"]
    assert "vector" in report["notes"] and "clef-gate-tuned" in report["notes"]


def test_planted_injections_reach_prompts_without_screening(fake_clef: Path) -> None:
    report = _run(
        fake_clef,
        # The first 200 labelled texts: the detectors' plumbing is the same on all 546, and
        # the planted corpus (every SQuAD host paragraph) does not depend on the limit.
        EvalDatasetConfig(
            name="planted",
            spec=f"injections:{need(INJECTIONS)}",
            host=f"squad:{SQUAD}",
            limit=200,
        ),
    )
    section = report["injections"]
    rows = {r["name"]: r for r in section["planted"]}
    unscreened = rows["vector, no screening"]
    assert unscreened["queries"] > 50
    assert unscreened["prompts_reached"] > 0
    # Quarantined records were recalled and marked: the ingest screen (offline guard + the fake
    # Clef judge) kept planted paragraphs out of what `query` returns.
    ingest = rows["vector + ingest screen (as configured)"]
    assert ingest["available"] and ingest["queries"] == unscreened["queries"]
    assert ingest["prompts_reached"] < unscreened["prompts_reached"]
    screened = rows["clef-rank (drops instructs_ai)"]
    assert screened["available"]
    assert screened["prompts_reached"] < unscreened["prompts_reached"]
    detectors = {r["name"]: r for r in section["detectors"]}
    assert set(detectors) >= {"offline-guard", "clef-screen"}
    # The Clef screen asks the fake server about every labelled text (plumbing, not quality).
    screen = detectors["clef-screen"]
    assert screen["available"] and screen["texts"] == 200, screen
    assert "NOT model quality" in report["clef_label"]
