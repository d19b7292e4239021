"""Classification in waves (`retrieval.classify.waves`): the passages further down the recall
order are asked about only when their answers could change the result, and the result is
the one classifying every passage gives.

The fake System One server answers by the passage's text (never by its state key or its
place in a request), so a passage gets the same answers whichever wave asks about it. The
gate's answer is a hash of the passages it is shown: a different gate input shows as a
different probability.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import random
from typing import Any

import pytest

from clef_pipelines.clef.client import ClefClient
from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.clef.wire import MAX_QUESTIONS
from clef_pipelines.retrieval.config import RetrievalConfig
from clef_pipelines.retrieval.result import RetrievalResult
from clef_pipelines.retrieval.steer import steer
from clef_pipelines.steering.candidates import Candidate
from clef_pipelines.steering.classify import WaveHistory
from tests.clef.fake_server import FakeServer
from tests.retrieval.conftest import text_of

QUERY = "Does the sync client limit upload bandwidth by default?"
WORDS = [
    "upload",
    "bandwidth",
    "sync",
    "client",
    "limit",
    "rate",
    "network",
    "folder",
    "device",
    "file",
    "tray",
    "quota",
]
# Probabilities at and around every threshold of the default select config, and others.
EDGES = [0.0, 0.02, 0.39, 0.4, 0.41, 0.49, 0.5, 0.51, 0.59, 0.6, 0.61, 0.69, 0.7, 0.71, 1.0]


def passages(rng: random.Random, n: int) -> list[str]:
    out = []
    for i in range(n):
        words = rng.choices(WORDS, k=rng.randint(8, 60))
        out.append(f"Passage {i}: " + " ".join(words) + ".")
    if rng.random() < 0.3:  # a duplicate further down (dropped before asking)
        out[rng.randrange(n // 2, n)] = out[rng.randrange(0, n // 2)]
    return out


def h(*parts: str) -> float:
    digest = hashlib.blake2b("|".join(parts).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") / 2**32


def answers(seed: int, evidence_rate: float, conflict_rate: float, injection_rate: float) -> Any:
    """A scripted answer set: each probability follows from (seed, passage text, question)."""

    def draw(text: str, name: str, rate: float) -> float:
        u = h(str(seed), text, name)
        if h(str(seed), text, name, "edge") < 0.25:
            return EDGES[int(u * len(EDGES)) % len(EDGES)]
        # Above the usual thresholds with probability `rate`, else below.
        if u < rate:
            return round(0.71 + 0.29 * h(str(seed), text, name, "hi"), 4)
        return round(0.39 * h(str(seed), text, name, "lo"), 4)

    def answer(qid: str, question: dict[str, Any], state: Any) -> Any:
        if qid == "answerable":
            shown = "\n".join(state["passages"])
            return round(h(str(seed), shown), 4)
        text = text_of(question, state)
        name = qid.rsplit(".", 1)[-1]
        rate = {
            "is_relevant": 0.7,
            "contains_answer_evidence": evidence_rate,
            "contradicts_query_premise": conflict_rate,
            "instructs_ai": injection_rate,
        }[name]
        return draw(text, name, rate)

    return answer


def candidates(texts: list[str], rng: random.Random, ties: bool) -> list[Candidate]:
    scores = sorted((rng.random() for _ in texts), reverse=True)
    if ties:  # equal vector scores: recall rank breaks the tie
        scores = [round(s, 1) for s in scores]
    return [
        Candidate(
            id=f"p{i}",
            text=t,
            vector_score=s,
            rank=i + 1,
            record={"source_uri": f"doc{i}.md"},
            tokens=len(t.split()),
        )
        for i, (t, s) in enumerate(zip(texts, scores, strict=True))
    ]


def config(rng: random.Random, waves: bool) -> tuple[RetrievalConfig, bool]:
    cfg = RetrievalConfig()
    cfg.classify.waves = waves
    cfg.select.max_passages = rng.choice([1, 2, 3, 5, 5, 5, 8])
    cfg.select.strategy = rng.choice(["rank", "rank", "threshold"])
    cfg.select.drop_irrelevant = rng.random() < 0.3
    if rng.random() < 0.3:
        cfg.compact.token_budget = rng.randint(20, 300)
    if rng.random() < 0.3:
        cfg.classify.passages_per_request = rng.choice([4, 7, 12])
    if rng.random() < 0.2:
        cfg.classify.first_wave = rng.randint(1, 12)
    return cfg, rng.random() < 0.5  # and whether instructs_ai is asked


def client_for(fake: FakeServer) -> ClefClient:
    return ClefClient(
        ClefConfig(
            backend="self-hosted", base_url=fake.base_url, api_key_env="CLEF_TEST_KEY", cache=False
        )
    )


async def run(fake: FakeServer, cands: list[Candidate], cfg: RetrievalConfig, ask: bool) -> Any:
    client = client_for(fake)
    try:
        result = RetrievalResult(query=QUERY)
        return await steer(result, cands, cfg, client, ask_instructs_ai=ask)
    finally:
        await client.aclose()


def shown(res: RetrievalResult) -> Any:
    return (
        [c.id for c in res.passages],
        [c.id for c in res.conflicts],
        res.gate_p,
        res.abstain,
        res.reason,
        res.degraded,
        res.to_prompt(),
        res.tokens.as_dict(),
    )


def compare_one(fake: FakeServer, seed: int) -> tuple[bool, bool, int, int]:
    """(same result, a wave was skipped, tokens with waves, tokens without)."""
    rng = random.Random(seed)
    texts = passages(rng, rng.choice([6, 12, 20, 30, 30, 40]))
    ties = rng.random() < 0.2
    cfg_on, ask = config(random.Random(seed), True)
    cfg_off, _ = config(random.Random(seed), False)
    rates = (rng.uniform(0.02, 0.7), rng.uniform(0.0, 0.3), rng.uniform(0.0, 0.3))
    fake.answer_with(answers(seed, *rates))
    fake.requests.clear()
    on = asyncio.run(run(fake, candidates(texts, random.Random(seed), ties), cfg_on, ask))
    off = asyncio.run(run(fake, candidates(texts, random.Random(seed), ties), cfg_off, ask))
    for body in fake.requests:
        assert 1 <= len(body["questions"]) <= MAX_QUESTIONS
    # Every candidate is accounted for once: shown, or dropped with a reason.
    every = [*on.passages, *on.conflicts, *on.dropped]
    assert sorted(c.id for c in every) == sorted(f"p{i}" for i in range(len(texts)))
    assert all(c.reason for c in on.dropped)
    skipped = [c for c in on.dropped if c.reason == "not_needed"]
    decisions = on.stage("select").details["decisions"]
    assert all(decisions[c.id]["decision"] == "not_needed" for c in skipped)
    assert all(not c.scores for c in skipped)  # never asked
    assert on.clef_requests <= off.clef_requests
    return (
        shown(on) == shown(off),
        bool(skipped),
        on.clef_input_tokens,
        off.clef_input_tokens,
    )


SEEDS = range(160)


def test_waves_give_the_result_of_classifying_everything(
    fake: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLEF_TEST_KEY", "test-key")
    skipped = 0
    for seed in SEEDS:
        same, skip, tokens_on, tokens_off = compare_one(fake, seed)
        assert same, f"seed {seed}: waves changed the result"
        if skip:
            skipped += 1
            assert tokens_on < tokens_off, seed
        else:
            assert tokens_on == tokens_off, seed
    # The answer sets cover both outcomes: the first wave settling, and not.
    assert 0.2 * len(SEEDS) < skipped < 0.8 * len(SEEDS), skipped


def test_the_equality_check_sees_a_wrong_stop(
    fake: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the stop test said yes after every first wave, the results would differ: the
    comparison above can fail."""
    import clef_pipelines.retrieval.steer as steer_module

    monkeypatch.setenv("CLEF_TEST_KEY", "test-key")
    monkeypatch.setattr(steer_module, "settled", lambda done, rest, cfg: True)
    differ = sum(not compare_one(fake, seed)[0] for seed in SEEDS)
    assert differ > 0.1 * len(SEEDS)


def evidence_at(*heads: int) -> Any:
    """Evidence only in the passages numbered in `heads`; no conflicts, no injections."""

    def answer(qid: str, question: dict[str, Any], state: Any) -> Any:
        if qid == "answerable":
            return 0.8
        text = text_of(question, state)
        name = qid.rsplit(".", 1)[-1]
        n = int(text.split(":")[0].split()[-1])
        if name == "contains_answer_evidence":
            return 0.9 if n in heads else 0.1
        if name == "is_relevant":
            return 0.8
        return 0.05

    return answer


def plain(n: int) -> list[Candidate]:
    texts = [f"Passage {i}: the sync client limits upload bandwidth in case {i}." for i in range(n)]
    return [
        Candidate(id=f"p{i}", text=t, vector_score=1 - i / 100, rank=i + 1, tokens=12)
        for i, t in enumerate(texts)
    ]


def test_a_second_wave_is_asked_when_the_first_is_not_enough(
    fake: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """30 passages x 3 questions: the first request holds 21 passages (63 questions). With
    the fifth evidence passage at recall rank 25 the rest is asked; with five in the head, not."""
    monkeypatch.setenv("CLEF_TEST_KEY", "test-key")
    cfg = RetrievalConfig()

    fake.answer_with(evidence_at(0, 3, 7, 12, 24))
    late = asyncio.run(run(fake, plain(30), cfg, False))
    c = late.stage("classify")
    assert c.details["waves"] == 2 and c.details["first_wave"] == 21
    assert c.details["not_needed"] == 0 and c.details["passages"] == 30
    assert c.requests == 2 and late.clef_requests == 3  # two waves, the gate
    assert [p.id for p in late.passages] == ["p0", "p3", "p7", "p12", "p24"]
    questions = [len(b["questions"]) for b in fake.requests]
    assert questions == [63, 27, 1]

    fake.requests.clear()
    fake.answer_with(evidence_at(0, 3, 7, 12, 20))
    early = asyncio.run(run(fake, plain(30), cfg, False))
    c = early.stage("classify")
    assert c.details["waves"] == 1 and c.details["not_needed"] == 9
    assert c.requests == 1 and early.clef_requests == 2
    assert [p.id for p in early.passages] == ["p0", "p3", "p7", "p12", "p20"]
    assert [len(b["questions"]) for b in fake.requests] == [63, 1]
    assert {d.id for d in early.dropped if d.reason == "not_needed"} == {
        f"p{i}" for i in range(21, 30)
    }

    fake.requests.clear()
    cfg.classify.waves = False
    everything = asyncio.run(run(fake, plain(30), cfg, False))
    assert [p.id for p in everything.passages] == [p.id for p in early.passages]
    assert everything.gate_p == early.gate_p
    assert everything.clef_requests == 3
    assert early.stage("classify").input_tokens < 0.8 * everything.stage("classify").input_tokens


def test_probability_order_asks_everything_at_once(
    fake: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `select.order: probability` a later passage can always outrank the kept ones:
    no waves (they would only add a round trip), and the trace says why."""
    monkeypatch.setenv("CLEF_TEST_KEY", "test-key")
    cfg = RetrievalConfig()
    cfg.select.order = "probability"
    fake.answer_with(evidence_at(0, 1, 2, 3, 4))
    res = asyncio.run(run(fake, plain(30), cfg, False))
    c = res.stage("classify")
    assert c.details["waves"] == 1 and c.details["passages"] == 30
    assert "probability" in c.details["waves_off"]
    # The two classify requests go out concurrently (either may arrive first); then the gate.
    sizes = [len(b["questions"]) for b in fake.requests]
    assert sorted(sizes[:2]) == [27, 63] and sizes[2:] == [1]


def test_auto_asks_at_once_while_recent_heads_did_not_settle(
    fake: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`waves: auto` follows how often recent first waves settled (window 4, at least half):
    after two unsettled queries it asks at once (no extra round trip), still checks the
    head after the fact, and goes back to waves once heads settle again."""
    monkeypatch.setenv("CLEF_TEST_KEY", "test-key")
    cfg = RetrievalConfig()
    cfg.classify.waves_window = 4
    history = WaveHistory(4)

    async def once() -> Any:
        client = client_for(fake)
        try:
            res = RetrievalResult(query=QUERY)
            return await steer(
                res, plain(30), cfg, client, ask_instructs_ai=False, wave_history=history
            )
        finally:
            await client.aclose()

    def classify_trace() -> dict[str, Any]:
        res = asyncio.run(once())
        return res.stage("classify").details

    fake.answer_with(evidence_at(0, 3, 7, 12, 24))  # the head never settles
    assert classify_trace()["waves"] == 2  # nothing seen yet: waves
    d = classify_trace()
    assert d["waves"] == 1 and d["passages"] == 30  # asked at once ...
    assert d["waves_auto"] == {"asked_in_waves": False, "recent_settled": 0.0, "min_settled": 0.5}
    fake.answer_with(evidence_at(0, 3, 7, 12, 20))  # now it would
    assert classify_trace()["not_needed"] == 0  # at once, seen settling: 1 of 3
    assert classify_trace()["not_needed"] == 0  # 2 of 4: half
    d = classify_trace()
    assert d["waves_auto"]["asked_in_waves"] is True and d["not_needed"] == 9
    assert history.share == 0.75


def test_shadow_classification_in_waves_changes_no_result(
    fake: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLEF_TEST_KEY", "test-key")
    cfg = RetrievalConfig()
    cfg.classify.mode = "shadow"
    cfg.gate.mode = "shadow"
    fake.answer_with(evidence_at(2, 3, 7, 12, 20))
    res = asyncio.run(run(fake, plain(30), cfg, False))
    assert [c.id for c in res.passages] == ["p0", "p1", "p2", "p3", "p4"]  # vector order
    assert not any(c.reason == "not_needed" for c in res.dropped)
    would = res.stage("select").details["shadow"]
    assert would["keep"] == ["p2", "p3", "p7", "p12", "p20"]
    assert sum(1 for r in would["drop"].values() if r == "not_needed") == 9
    assert res.stage("classify").details["not_needed"] == 9


@pytest.mark.parametrize("order", ["class", "probability"])
@pytest.mark.parametrize("conflicts", ["ranked", "all"])
def test_settled_holds_for_any_answers_about_the_rest(order: str, conflicts: str) -> None:
    """`settled` alone, under every order and conflict rule: when it says yes, any answers
    about the rest (several tries each) leave the kept passages and conflicts as they are."""
    from clef_pipelines.retrieval.config import SelectConfig
    from clef_pipelines.steering.select import select, settled

    rng = random.Random(7)
    yes = 0
    names = ["is_relevant", "contains_answer_evidence", "contradicts_query_premise"]
    for _ in range(400):
        cfg = SelectConfig(
            order=order,  # type: ignore[arg-type]
            conflicts=conflicts,  # type: ignore[arg-type]
            max_passages=rng.choice([1, 2, 3, 5]),
            strategy=rng.choice(["rank", "threshold"]),  # type: ignore[arg-type]
        )
        n = rng.randint(2, 14)
        cands = plain(n)
        if rng.random() < 0.3:
            for c in cands:
                c.vector_score = round(c.vector_score, 1)  # ties
        head = rng.randint(1, n - 1)

        def pick(c: Candidate, hi: float) -> None:
            # 1.0 often enough that probability order and `all` can settle too
            c.scores = {k: rng.choice([1.0, 1.0, hi, rng.random(), 0.0]) for k in names}

        for c in cands[:head]:
            pick(c, 0.9)
        if not settled(cands[:head], cands[head:], cfg):
            continue
        yes += 1
        base = [copy.copy(c) for c in cands]
        for c in base[head:]:
            c.reason = "not_needed"
        want = select(base, cfg)
        for _ in range(5):
            trial = [copy.copy(c) for c in cands]
            for c in trial[head:]:
                pick(c, rng.random())
            got = select(trial, cfg)
            assert [c.id for c in got.kept] == [c.id for c in want.kept]
            assert [c.id for c in got.conflicts] == [c.id for c in want.conflicts]
    assert yes >= 20, yes
