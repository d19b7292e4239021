"""`chunking.strategy: clef`: pair questions inline, cuts by dynamic programming, fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clef_pipelines.chunking.tokens import EstimateCounter
from clef_pipelines.clef.client import SyncClefClient
from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.config import ChunkingConfig
from clef_pipelines.parsing.models import Block
from clef_pipelines.steering.clef_chunking import ClefChunker, place_cuts
from clef_pipelines.steering.config import SteeringConfig
from clef_pipelines.steering.runtime import Steering
from tests.clef.fake_server import FakeServer, Reply
from tests.ingest.conftest import make_workspace

CFG = ChunkingConfig(
    strategy="clef", min_tokens=10, target_tokens=40, max_tokens=60, overlap_tokens=0
)


def test_cuts_stay_within_max_and_avoid_refers_back_unless_forced() -> None:
    tokens = [15] * 8
    free = [0.1] * 7
    ends = place_cuts(tokens, free, CFG)
    starts = [0, *ends[:-1]]
    assert ends[-1] == 8
    assert all(sum(tokens[s:e]) <= CFG.max_tokens for s, e in zip(starts, ends, strict=True))
    # A cut after unit 2 (before a sentence that refers back) is avoided when others fit.
    costs = [0.1, 0.1, 1000.0, 0.1, 0.1, 1000.0, 0.1]
    ends = place_cuts(tokens, costs, CFG)
    assert 3 not in ends and 6 not in ends
    # Size forces it: every pair refers back, yet no chunk exceeds max_tokens.
    ends = place_cuts(tokens, [1000.0] * 7, CFG)
    starts = [0, *ends[:-1]]
    assert all(sum(tokens[s:e]) <= CFG.max_tokens for s, e in zip(starts, ends, strict=True))
    assert len(ends) >= 2


def _steering(fake: FakeServer, tmp_path: Path, **clef: Any) -> Steering:
    cfg = ClefConfig(
        backend="self-hosted",
        base_url=fake.base_url,
        api_key_env="KEY",
        max_retries=0,
        cache=False,
        **clef,
    )
    client = SyncClefClient(cfg, env={"KEY": "test-key"}, data_dir=tmp_path)
    return Steering(SteeringConfig(), clef=client, data_dir=tmp_path)


SENTENCES = [
    "Northwind keeps a copy of every file in the cloud.",
    "It also keeps thirty days of earlier versions.",
    "Restores bring a version back into place.",
    "This works even for files deleted from every device.",
    "Billing is monthly per seat.",
    "Seats can be added at any time from the console.",
    "They are charged from the day they are added.",
]


def _blocks() -> list[Block]:
    text = " ".join(SENTENCES)
    return [
        Block(
            kind="heading",
            text="Guide",
            heading_path=["Guide"],
            level=1,
            char_start=0,
            char_end=7,
            order=0,
        ),
        Block(
            kind="paragraph",
            text=text,
            heading_path=["Guide"],
            level=0,
            char_start=8,
            char_end=8 + len(text),
            order=1,
            verbatim=True,
        ),
    ]


def pair_answers(qid: str, q: dict[str, Any], state: Any) -> float:
    ins = q["instructions"]
    assert isinstance(ins, dict), "the pair travels inline"
    second = ins["passage"].split("\n2: ", 1)[1]
    if qid.endswith(".refers_back"):
        return 0.95 if second.split()[0] in ("It", "This", "They") else 0.05
    return 0.05 if second.startswith("Billing") else 0.8


def test_clef_chunker_cuts_at_the_topic_turn(fake: FakeServer, tmp_path: Path) -> None:
    fake.answer_with(pair_answers)
    steering = _steering(fake, tmp_path)
    try:
        chunker = ClefChunker(steering, CFG, EstimateCounter())
        blocks = _blocks()
        chunker.prepare([("doc", blocks)])
        chunks = chunker(blocks, "Guide", "doc")
    finally:
        steering.clef.close()  # type: ignore[union-attr]
    assert chunker.report.documents_fallback == 0 and chunker.report.pairs == 6
    assert all(c.chunker == "clef" for c in chunks)
    assert all(c.tokens <= CFG.max_tokens for c in chunks)
    # No chunk starts with a sentence that refers back; the cut falls at "Billing".
    for c in chunks:
        assert c.text.split()[0] not in ("It", "This", "They")
    assert any(c.text.startswith("Billing") for c in chunks)
    # Offsets point into the original.
    for c in chunks:
        assert 8 <= c.char_start < c.char_end <= blocks[1].char_end


def test_failed_pairs_fall_back_to_structural_and_say_so(fake: FakeServer, tmp_path: Path) -> None:
    fake.answer_with(pair_answers)
    fake.script(Reply(status=503))
    steering = _steering(fake, tmp_path)
    try:
        chunker = ClefChunker(steering, CFG, EstimateCounter())
        blocks = _blocks()
        chunker.prepare([("doc", blocks)])
        chunks = chunker(blocks, "Guide", "doc")
    finally:
        steering.clef.close()  # type: ignore[union-attr]
    assert chunker.report.documents_fallback == 1 and chunker.report.fallback_reasons
    assert chunks and all(c.chunker == "structural" for c in chunks)


def test_pipeline_with_clef_off_chunks_structural_and_reports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace(
        tmp_path,
        monkeypatch,
        chunking={"strategy": "clef"},
        clef={"backend": "off"},
        steering={"guard": {"mode": "off"}},
    )
    (report,) = ws.ingest()
    assert report.success, report.error
    meta = report.assets["chunks"]["clef_chunking"]
    assert meta["documents_structural_fallback"] == meta["documents"] > 0
    assert meta["fallback_reasons"] == ["Clef is off"]
    assert {r["chunker"] for r in ws.records()} == {"structural"}
