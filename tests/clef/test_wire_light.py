"""`wire_light` against `wire`: the same questions, requests and answers (the same bytes on
the wire and in the cache), or the same errors naming the same field, for every payload."""

from __future__ import annotations

import json
from typing import Any

import pytest

from clef_pipelines.clef import wire, wire_light
from clef_pipelines.clef.errors import ClefBadAnswer, ClefValidationError
from clef_pipelines.clef.wire_light import PlainRequest, PlainResponse
from tests.clef.fake_server import answer_for


def noul(n: int, wording: str = "question") -> dict[str, Any]:
    return {f"q{i}": {"type": "noul", "instructions": f"{wording} {i}"} for i in range(n)}


QUESTIONS: list[Any] = [
    noul(1),
    noul(4, "About `s1`: Does the passage address the subject of `query`?"),
    noul(64),
    noul(65),
    {"a" * 256: {"type": "noul", "instructions": "x"}},
    {"a" * 257: {"type": "noul", "instructions": "x"}},
    {"": {"type": "noul", "instructions": "x"}},
    {},
    [],
    None,
    {"a": {"type": "noul"}},
    {"a": {"type": "noul", "instructions": " "}},
    {"a": {"type": "noul", "instructions": ""}},
    {"a": {"type": "noul", "instructions": None}},
    {"a": {"type": "noul", "instructions": 5}},
    {"a": {"type": "noul", "instructions": {"passage": "p", "question": "q"}}},
    {"a": {"type": "noul", "instructions": {}}},
    {"a": {"type": "maybe", "instructions": "x"}},
    {"a": {"instructions": "x"}},
    {"a": {"type": "noul", "instructions": "x", "criteria": {"true": "yes"}}},
    {"a": {"type": "noul", "instructions": "x", "criteria": {"maybe": "?"}}},
    {"a": {"type": "noul", "instructions": "x", "extra": 1}},
    {"a": {"type": "choice", "instructions": "x", "criteria": {"y": None}}},
    {"a": {"type": "choice", "instructions": "x", "criteria": {"y": None, "n": "no"}}},
    {"a": {"type": "score", "instructions": "x", "criteria": ["low", "high"]}},
    {"a": {"type": "noul", "instructions": "x"}, "b": {"type": "score", "instructions": "y"}},
    {"a": "not a question"},
]


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", fn(*args))
    except (ClefValidationError, ClefBadAnswer) as exc:
        return (type(exc).__name__, str(exc), getattr(exc, "field", None))


def as_json(value: Any) -> str:
    return json.dumps(value, allow_nan=True)  # key order too: the bytes sent and cached


def question_view(q: Any) -> tuple[Any, ...]:
    return (q.type, as_json(q.instructions), as_json(q.criteria))


@pytest.mark.parametrize("questions", QUESTIONS, ids=range(len(QUESTIONS)))
def test_questions_are_the_models_or_their_error(questions: Any) -> None:
    plain = outcome(wire_light.parse_and_dump_questions, questions)
    model = outcome(wire.parse_and_dump_questions, questions)
    assert plain[0] == model[0]
    if plain[0] != "ok":
        assert plain == model
        return
    (p_parsed, p_dumped), (m_parsed, m_dumped) = plain[1], model[1]
    assert as_json(p_dumped) == as_json(m_dumped)
    assert [question_view(q) for q in p_parsed.values()] == [
        question_view(q) for q in m_parsed.values()
    ]


REQUESTS: list[tuple[Any, Any, Any, Any]] = [
    ("clef", {"query": "q", "s1": "one", "s2": "two"}, noul(4), None),
    ("clef-flash", "a string state", noul(1), None),
    ("clef", {"n": 1, "f": 0.5, "b": True, "l": [1, "x", [2.5]], "d": {"k": "v"}}, noul(2), None),
    ("clef", {"k": None}, noul(1), None),
    ("clef", None, noul(1), None),
    ("clef", {"k": float("nan")}, noul(1), None),
    ("clef", {"k": float("inf")}, noul(1), None),
    ("clef", {"k": (1, 2)}, noul(1), None),
    ("clef", {1: "int key"}, noul(1), None),
    ("clef", {"k": {1, 2}}, noul(1), None),
    ("", {"s": "x"}, noul(1), None),
    (None, {"s": "x"}, noul(1), None),
    ("clef", {"s": "x"}, noul(64), None),
    ("clef", {"s": "x"}, noul(65), None),
    ("clef", {"s": "x"}, noul(1), ["https://example.com/cat.png"]),
    ("clef", {"s": "x"}, noul(1), []),
    ("clef", {"s": "x"}, {"a": {"type": "score", "instructions": "y", "criteria": [1, 2]}}, None),
]


def make_request(side: Any, model: Any, state: Any, questions: Any, images: Any) -> Any:
    parsed, dumped = side.parse_and_dump_questions(questions)
    return side.request_from_parsed(model, state, parsed, dumped, images)


def request_view(req: Any) -> tuple[Any, ...]:
    return (
        as_json(req.wire()),
        req.model,
        as_json(req.state),
        req.images,
        [question_view(q) for q in req.questions.values()],
    )


@pytest.mark.parametrize("case", REQUESTS, ids=range(len(REQUESTS)))
def test_requests_are_the_models_or_their_error(case: tuple[Any, Any, Any, Any]) -> None:
    plain = outcome(make_request, wire_light, *case)
    model = outcome(make_request, wire, *case)
    assert plain[0] == model[0]
    if plain[0] != "ok":
        assert plain == model
        return
    assert request_view(plain[1]) == request_view(model[1])


def test_the_plain_path_is_taken_for_what_compaction_asks() -> None:
    for case in REQUESTS[:3]:
        assert type(make_request(wire_light, *case)) is PlainRequest
    assert type(make_request(wire_light, *REQUESTS[3])) is not PlainRequest  # a null: the model


QIDS = ["q0", "q1", "q2"]


def good() -> dict[str, Any]:
    return {
        "model": "clef-flash",
        "answers": {q: {"type": "noul", "noul": 0.25 * (i + 1)} for i, q in enumerate(QIDS)},
        "usage": {"input_tokens": 120, "output_tokens": 3},
    }


def changed(path: list[Any], value: Any = "__delete__") -> dict[str, Any]:
    body = good()
    target = body
    for key in path[:-1]:
        target = target[key]
    if value == "__delete__":
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return body


ANSWERS: list[Any] = [
    good(),
    {**good(), "answers": dict(reversed(good()["answers"].items()))},  # any order
    {**good(), "extra": True},
    changed(["answers", "q0", "noul"], 0),
    changed(["answers", "q0", "noul"], 1),
    changed(["answers", "q0", "noul"], 1.0005),
    changed(["answers", "q0", "noul"], -0.0005),
    changed(["answers", "q0", "noul"], 1.5),
    changed(["answers", "q0", "noul"], -0.01),
    changed(["answers", "q0", "noul"], True),
    changed(["answers", "q0", "noul"], "0.5"),
    changed(["answers", "q0", "noul"], None),
    changed(["answers", "q0", "noul"], float("nan")),
    changed(["answers", "q0", "noul"]),
    changed(["answers", "q0", "extra"], "ignored"),
    changed(["answers", "q0", "type"], "choice"),
    changed(["answers", "q0", "type"], "maybe"),
    changed(["answers", "q0"], {"type": "score", "score": 1, "confidence": 0.5}),
    changed(["answers", "q0"], "text"),
    changed(["answers", "q2"]),
    changed(["answers", "q3"], {"type": "noul", "noul": 0.5}),
    changed(["answers"], {}),
    changed(["answers"], []),
    changed(["answers"]),
    changed(["usage", "output_tokens"]),
    changed(["usage", "output_tokens"], -1),
    changed(["usage", "input_tokens"], 3.0),
    changed(["usage", "input_tokens"], "3"),
    changed(["usage", "input_tokens"], -1),
    changed(["usage", "input_tokens"]),
    changed(["usage"], None),
    changed(["usage"]),
    changed(["model"], 5),
    changed(["model"], ""),
    changed(["model"]),
    "text",
    [],
    None,
]


def answer_view(resp: Any) -> tuple[Any, ...]:
    return (
        as_json(resp.wire()),
        resp.model,
        [(q, a.type, a.noul, type(a.noul)) for q, a in resp.answers.items()],
        (resp.usage.input_tokens, resp.usage.output_tokens),
    )


@pytest.mark.parametrize("body", ANSWERS, ids=range(len(ANSWERS)))
def test_answers_are_the_models_or_their_error(body: Any) -> None:
    questions = {q: {"type": "noul", "instructions": f"About `s1`: {q}?"} for q in QIDS}
    case = ("clef-flash", {"s1": "text"}, questions, None)
    plain_request, model_request = make_request(wire_light, *case), make_request(wire, *case)
    assert type(plain_request) is PlainRequest
    plain = outcome(wire_light.parse_response, json.loads(json.dumps(body)), plain_request)
    model = outcome(wire.parse_response, json.loads(json.dumps(body)), model_request)
    assert plain[0] == model[0]
    if plain[0] != "ok":
        assert plain == model
        return
    assert answer_view(plain[1]) == answer_view(model[1])
    if body is ANSWERS[0]:
        assert type(plain[1]) is PlainResponse


def test_the_fake_servers_answers_and_a_split_ask_merge_as_the_models_do() -> None:
    case = ("clef", {"s1": "x"}, noul(5), None)
    plain_request, model_request = make_request(wire_light, *case), make_request(wire, *case)
    body = answer_for(model_request.wire())
    plain = wire_light.parse_response(body, plain_request)
    model = wire.parse_response(body, model_request)
    assert answer_view(plain) == answer_view(model)
    merged = wire_light.merge_responses([plain, plain])
    both = wire.SystemOneResponse(
        model=model.model,
        answers={**model.answers, **model.answers},
        usage=wire.Usage(input_tokens=2 * model.usage.input_tokens, output_tokens=0),
    )
    assert type(merged) is PlainResponse
    assert answer_view(merged) == answer_view(both)
    mixed = wire_light.merge_responses([plain, model])
    assert type(mixed) is wire.SystemOneResponse and answer_view(mixed) == answer_view(both)


def test_a_plain_wire_client_answers_as_the_models_client_does(fake: Any, tmp_path: Any) -> None:
    """A one-shot client (`plain_wire`) on the fake server: a split ask (100 questions in two
    requests), the same ask from its cache, and a mix with a choice question (the models)
    give what the models' client gives, and the same bytes reach the server."""
    from clef_pipelines.clef.client import SyncClefClient
    from clef_pipelines.clef.config import ClefConfig

    questions = noul(100, "About `s1`: is it so?")
    mixed = {
        **noul(2),
        "team": {"type": "choice", "instructions": "Which?", "criteria": {"a": None, "b": None}},
    }
    views, bodies = {}, {}
    for plain in (False, True):
        config = ClefConfig(backend="self-hosted", base_url=fake.base_url, api_key_env="KEY")
        with SyncClefClient(
            config, env={"KEY": "test-key"}, data_dir=tmp_path / str(plain), plain_wire=plain
        ) as c:
            fake.requests.clear()
            first = c.ask({"s1": "text"}, questions)
            cached = c.ask({"s1": "text"}, questions)
            other = c.ask({"s1": "text"}, mixed)
            bodies[plain] = [json.dumps(r) for r in fake.requests]
        views[plain] = [answer_view(first), answer_view(cached)] + [
            [(q, a.type) for q, a in other.answers.items()]
        ]
        if plain:
            assert type(first) is PlainResponse and type(other) is wire.SystemOneResponse
    assert views[True] == views[False]
    assert bodies[True] == bodies[False] and len(bodies[True]) == 3  # the cache answered once
