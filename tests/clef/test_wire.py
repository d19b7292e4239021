"""Wire rules, answer checks and token budgeting: no network."""

from __future__ import annotations

import pytest

from clef_pipelines.clef.errors import ClefBadAnswer, ClefValidationError
from clef_pipelines.clef.tokens import EstimateCounter, TokenizerCounter, counter_for
from clef_pipelines.clef.wire import parse_questions, parse_request, parse_response
from tests.clef.fake_server import answer_for

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def body(**kw):  # type: ignore[no-untyped-def]
    b = {
        "model": "clef",
        "state": {"passage": "The API is down."},
        "questions": {
            "urgent": {"type": "noul", "instructions": "Is this urgent?"},
            "team": {
                "type": "choice",
                "instructions": "Which team?",
                "criteria": {"technical": "Outages", "billing": "Payments", "sales": None},
            },
            "severity": {
                "type": "score",
                "instructions": "How severe?",
                "criteria": ["None", "Minor", "Major", "Critical"],
            },
        },
    }
    b.update(kw)
    return b


def q(n: int) -> dict:
    return {f"q{i}": {"type": "noul", "instructions": f"question {i}"} for i in range(n)}


def test_valid_request_round_trips_to_the_wire() -> None:
    req = parse_request(body(images=[PNG, f"data:image/png;base64,{PNG}"]))
    wire = req.wire()
    assert list(wire["questions"]) == ["urgent", "team", "severity"]
    assert wire["questions"]["team"]["criteria"]["sales"] is None
    assert "criteria" not in wire["questions"]["urgent"]  # absent stays absent
    assert len(wire["images"]) == 2


def test_a_request_made_from_dumped_questions_sends_what_a_fresh_dump_sends() -> None:
    """The client validates its questions once, dumps them, and makes each request from
    that dump (`parse_dumped_request`): its `wire()` reuses the dump, so it must be the dump
    a request validated from scratch gives, every kind of question and instructions; and an
    invalid body is still refused."""
    from clef_pipelines.clef.wire import parse_dumped_request

    b = body(images=[PNG])
    b["questions"]["inline"] = {"type": "noul", "instructions": {"passage": "x", "q": [1, None]}}
    b["questions"]["custom"] = {"type": "noul", "instructions": "x", "criteria": {"true": "yes"}}
    dumped = {
        qid: qq.model_dump(mode="json", exclude_none=True)
        for qid, qq in parse_questions(b["questions"]).items()
    }
    made = parse_dumped_request({**b, "questions": dumped})
    assert made.wire() == parse_request(b).wire()
    assert made.wire() == made.wire()
    with pytest.raises(ClefValidationError):
        parse_dumped_request({**b, "model": "", "questions": dumped})


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"questions": {}}, "questions"),
        ({"questions": q(65)}, "questions"),
        ({"questions": {"a": {"type": "noul"}}}, "questions.a.instructions"),
        ({"questions": {"a": {"type": "noul", "instructions": " "}}}, "questions.a.instructions"),
        ({"questions": {"a": {"type": "noul", "instructions": None}}}, "questions.a.instructions"),
        ({"questions": {"a": {"type": "maybe", "instructions": "x"}}}, "questions.a.type"),
        ({"questions": {"a": {"instructions": "x"}}}, "questions.a.type"),
        (
            {"questions": {"a": {"type": "choice", "instructions": "x", "criteria": {"y": None}}}},
            "questions.a.criteria",
        ),
        (
            {
                "questions": {
                    "a": {
                        "type": "choice",
                        "instructions": "x",
                        "criteria": {f"o{i}": None for i in range(256)},
                    }
                }
            },
            "questions.a.criteria",
        ),
        (
            {"questions": {"a": {"type": "score", "instructions": "x", "criteria": ["low"]}}},
            "questions.a.criteria",
        ),
        (
            {
                "questions": {
                    "a": {"type": "score", "instructions": "x", "criteria": list("abcdefghijk")}
                }
            },
            "questions.a.criteria",
        ),
        (
            {"questions": {"a": {"type": "noul", "instructions": "x", "criteria": {"maybe": "?"}}}},
            "questions.a.criteria.maybe",
        ),
        ({"images": ["https://example.com/cat.png"]}, "images"),
        ({"images": ["not base64!"]}, "images"),
        ({"images": [PNG] * 5}, "images"),
        ({"model": ""}, "model"),
        ({"videos": ["x"]}, "videos"),
    ],
)
def test_every_rule_names_its_field(change: dict, field: str) -> None:
    with pytest.raises(ClefValidationError) as err:
        parse_request(body(**change))
    assert err.value.field == field


def test_missing_state_is_refused_but_null_state_is_allowed() -> None:
    b = body()
    del b["state"]
    with pytest.raises(ClefValidationError) as err:
        parse_request(b)
    assert err.value.field == "state"
    assert parse_request(body(state=None)).state is None


def test_limits_at_the_edges_are_accepted() -> None:
    parse_request(body(questions=q(64)))
    parse_request(
        body(
            questions={
                "c": {
                    "type": "choice",
                    "instructions": "x",
                    "criteria": {f"o{i}": None for i in range(255)},
                },
                "s": {
                    "type": "score",
                    "instructions": {"passage": "p", "question": "q"},
                    "criteria": list("ab"),
                },
                "t": {"type": "score", "instructions": "x", "criteria": list("abcdefghij")},
            }
        )
    )


def test_questions_beyond_64_validate_for_splitting() -> None:
    assert len(parse_questions(q(100))) == 100


def test_answer_checks() -> None:
    req = parse_request(body())
    good = answer_for(req.wire())
    resp = parse_response(good, req)
    assert list(resp.answers) == ["urgent", "team", "severity"]

    partial = answer_for(req.wire())
    del partial["answers"]["severity"]
    with pytest.raises(ClefBadAnswer, match="partial"):
        parse_response(partial, req)

    bad_sum = answer_for(req.wire())
    bad_sum["answers"]["team"]["probabilities"] = {"technical": 0.5, "billing": 0.2, "sales": 0.2}
    with pytest.raises(ClefBadAnswer, match="sum"):
        parse_response(bad_sum, req)

    within = answer_for(req.wire())
    within["answers"]["team"]["probabilities"] = {"technical": 0.5, "billing": 0.3, "sales": 0.215}
    parse_response(within, req)  # 1.015: within the 0.02 tolerance

    wrong_choice = answer_for(req.wire())
    wrong_choice["answers"]["team"]["choice"] = "legal"
    with pytest.raises(ClefBadAnswer, match="not an option"):
        parse_response(wrong_choice, req)

    wrong_options = answer_for(req.wire())
    wrong_options["answers"]["severity"]["probabilities"] = {"0": 0.5, "1": 0.5}
    with pytest.raises(ClefBadAnswer, match="options"):
        parse_response(wrong_options, req)

    wrong_type = answer_for(req.wire())
    wrong_type["answers"]["urgent"] = wrong_type["answers"]["team"]
    with pytest.raises(ClefBadAnswer):
        parse_response(wrong_type, req)

    extra = answer_for(req.wire())
    extra["answers"]["other"] = {"type": "noul", "noul": 0.5}
    with pytest.raises(ClefBadAnswer, match="not asked"):
        parse_response(extra, req)

    for broken in ({}, {"answers": {}}, "text", {"model": "clef", "answers": good["answers"]}):
        with pytest.raises(ClefBadAnswer):
            parse_response(broken, req)

    out_of_range = answer_for(req.wire())
    out_of_range["answers"]["urgent"]["noul"] = 1.5
    with pytest.raises(ClefBadAnswer):
        parse_response(out_of_range, req)


def test_estimate_counts_digits_one_each_and_is_never_zero_for_text() -> None:
    est = EstimateCounter()
    assert est.count("1234567890") == 10
    assert est.count("abcd") == 1
    assert est.count("é") == 1
    assert est.count("") == 0


def test_exact_counter_from_a_release(tiny_release) -> None:  # type: ignore[no-untyped-def]
    counter = counter_for(str(tiny_release))
    assert isinstance(counter, TokenizerCounter) and counter.exact
    # The tiny tokenizer has one token per byte.
    assert counter.count("héllo") == len("héllo".encode())
    assert not counter_for(None).exact


def test_memoised_questions_give_what_a_fresh_validation_gives() -> None:
    """`parse_and_dump_questions` reuses the validation of a plain question (a type and a
    string wording) seen before: the second pass must give the same objects' dumps and the
    same request as validating from scratch, in the same order, hand out its own copies, and
    still refuse what is invalid."""
    from clef_pipelines.clef.wire import parse_and_dump_questions, request_from_parsed

    qs = {
        f"s{i}.{a}": {"type": "noul", "instructions": f"About `s{i}`: {a}?"}
        for i in range(1, 12)
        for a in ("relevant", "evidence")
    }
    qs["inline"] = {"type": "noul", "instructions": {"passage": "x", "question": "y"}}
    state = {"query": "q", "s1": "text"}
    first = parse_and_dump_questions(dict(qs))
    again = parse_and_dump_questions(dict(reversed(list(qs.items()))))
    assert list(again[1]) == list(reversed(list(qs)))
    assert again[1] == first[1]
    request = request_from_parsed("m", state, *again)
    assert request.wire() == parse_request({"model": "m", "state": state, "questions": qs}).wire()
    again[1]["s1.relevant"]["type"] = "changed"  # a caller's copy, not the memo's
    assert parse_and_dump_questions(dict(qs))[1]["s1.relevant"]["type"] == "noul"
    with pytest.raises(ClefValidationError):
        parse_and_dump_questions({"": {"type": "noul", "instructions": "About `s1`: relevant?"}})
    with pytest.raises(ClefValidationError):
        parse_and_dump_questions({"x": {"type": "noul", "instructions": "  "}})
    many = {f"q{i}": {"type": "noul", "instructions": "About `s1`: relevant?"} for i in range(65)}
    with pytest.raises(ClefValidationError):
        request_from_parsed("m", state, *parse_and_dump_questions(many))
