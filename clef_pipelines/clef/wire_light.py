"""The System One wire without pydantic, for what the client asks most: yes/no (noul)
questions worded as a string, about a state of plain JSON.

`wire.py`'s models are the wire's edge and its one definition; importing pydantic and
building them costs about 0.5 G instructions, more than a whole cold run of
clef-compactor. So the client goes through the three functions here. Each takes what it can
check exactly as the models would (the questions: all noul with a non-blank string wording
and an id of 1 to 256 characters; the request: a model name, no images, 1 to 64 questions, a
state of strings, numbers, booleans, lists and objects; the answer: every question answered
once by a noul probability within bounds, a model name and whole token counts), and gives
plain objects with the models' attributes and `wire()`; anything else goes to the models
(`wire.py`), which give the same values or their own errors (`tests/clef/test_wire_light.py`
feeds the same payloads to both).
"""

from __future__ import annotations

import math
from typing import Any

from clef_pipelines.clef.wire_common import EPS, MAX_QUESTION_ID, MAX_QUESTIONS


class PlainNoulQuestion:
    """A noul question with a string wording, as `wire.NoulQuestion` holds it."""

    type = "noul"
    criteria = None
    __slots__ = ("instructions",)

    def __init__(self, instructions: str) -> None:
        self.instructions = instructions


class PlainRequest:
    """`wire.SystemOneRequest` of plain noul questions: `model`, `state`, `questions`,
    `images` and the same `wire()`."""

    images = None
    __slots__ = ("model", "questions", "state", "_questions_wire")

    def __init__(
        self,
        model: str,
        state: Any,
        questions: dict[str, PlainNoulQuestion],
        questions_wire: dict[str, Any],
    ) -> None:
        self.model, self.state, self.questions = model, state, questions
        self._questions_wire = questions_wire

    def wire(self) -> dict[str, Any]:
        return {"model": self.model, "state": self.state, "questions": self._questions_wire}


class PlainNoulAnswer:
    """`wire.NoulAnswer`'s attributes."""

    type = "noul"
    __slots__ = ("noul",)

    def __init__(self, noul: float) -> None:
        self.noul = noul


class PlainUsage:
    __slots__ = ("input_tokens", "output_tokens")

    def __init__(self, input_tokens: int, output_tokens: int) -> None:
        self.input_tokens, self.output_tokens = input_tokens, output_tokens


class PlainResponse:
    """`wire.SystemOneResponse` of noul answers: `model`, `answers`, `usage`, `wire()`."""

    __slots__ = ("answers", "model", "usage")

    def __init__(self, model: str, answers: dict[str, PlainNoulAnswer], usage: PlainUsage) -> None:
        self.model, self.answers, self.usage = model, answers, usage

    def wire(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "answers": {q: {"type": "noul", "noul": a.noul} for q, a in self.answers.items()},
            "usage": {
                "input_tokens": self.usage.input_tokens,
                "output_tokens": self.usage.output_tokens,
            },
        }


def _plain_question(qid: Any, q: Any) -> str | None:
    """The wording of a plain noul question, else None."""
    if not (type(qid) is str and 1 <= len(qid) <= MAX_QUESTION_ID and type(q) is dict):
        return None
    if len(q) != 2 or q.get("type") != "noul":
        return None
    wording = q.get("instructions")
    return wording if type(wording) is str and wording.strip() else None


def parse_and_dump_questions(questions: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """`wire.parse_and_dump_questions`: the questions and their wire form."""
    if type(questions) is dict and questions:
        parsed: dict[str, Any] = {}
        dumped: dict[str, dict[str, Any]] = {}
        for qid, q in questions.items():
            wording = _plain_question(qid, q)
            if wording is None:
                break
            parsed[qid] = PlainNoulQuestion(wording)
            dumped[qid] = {"instructions": wording, "type": "noul"}
        else:
            return parsed, dumped
    from clef_pipelines.clef import wire

    return wire.parse_and_dump_questions(questions)


def _plain_json(value: Any, depth: int = 0) -> bool:
    """JSON the model keeps as it is: no null (its dump drops none), no NaN or infinity."""
    kind = type(value)
    if kind in (str, bool, int):
        return True
    if kind is float:
        return math.isfinite(value)
    if depth > 64:
        return False
    if kind is list:
        return all(_plain_json(v, depth + 1) for v in value)
    if kind is dict:
        return all(type(k) is str and _plain_json(v, depth + 1) for k, v in value.items())
    return False


def request_from_parsed(
    model: str,
    state: Any,
    parsed: dict[str, Any],
    dumped: dict[str, dict[str, Any]],
    images: list[str] | None = None,
) -> Any:
    """`wire.request_from_parsed`, for questions from `parse_and_dump_questions` here."""
    if (
        type(model) is str
        and model
        and not images
        and 1 <= len(parsed) <= MAX_QUESTIONS
        and all(type(q) is PlainNoulQuestion for q in parsed.values())
        and _plain_json(state)
    ):
        return PlainRequest(model, state, parsed, dumped)
    from clef_pipelines.clef import wire

    if any(type(q) is PlainNoulQuestion for q in parsed.values()):
        parsed, dumped = wire.parse_and_dump_questions(dumped)
    return wire.request_from_parsed(model, state, parsed, dumped, images)


def _probability(value: Any) -> float | None:
    if type(value) not in (int, float) or not -EPS <= value <= 1 + EPS:
        return None  # NaN fails the bounds too
    return float(value)


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def parse_response(body: Any, request: Any) -> Any:
    """`wire.parse_response`: the answer to `request`, checked against it."""
    if type(request) is PlainRequest and type(body) is dict:
        answers, usage, model = body.get("answers"), body.get("usage"), body.get("model")
        if (
            type(model) is str
            and type(answers) is dict
            and answers.keys() == request.questions.keys()
            and type(usage) is dict
        ):
            tokens_in = _count(usage.get("input_tokens"))
            tokens_out = _count(usage.get("output_tokens", 0))
            got: dict[str, PlainNoulAnswer] = {}
            for qid in request.questions:  # the request's order: callers zip by it
                answer = answers[qid]
                p = _probability(answer.get("noul")) if type(answer) is dict else None
                if p is None or answer.get("type") != "noul":
                    break
                got[qid] = PlainNoulAnswer(p)
            else:
                if tokens_in is not None and tokens_out is not None:
                    return PlainResponse(model, got, PlainUsage(tokens_in, tokens_out))
    from clef_pipelines.clef import wire

    return wire.parse_response(body, request)


def merge_responses(responses: list[Any]) -> Any:
    """One response of several requests' answers, in order (a split `ask`)."""
    merged: dict[str, Any] = {}
    for r in responses:
        merged.update(r.answers)
    tokens_in = sum(r.usage.input_tokens for r in responses)
    tokens_out = sum(r.usage.output_tokens for r in responses)
    if all(type(r) is PlainResponse for r in responses):
        return PlainResponse(responses[0].model, merged, PlainUsage(tokens_in, tokens_out))
    from clef_pipelines.clef import wire

    return wire.SystemOneResponse(
        model=responses[0].model,
        answers={
            q: {"type": "noul", "noul": a.noul} if type(a) is PlainNoulAnswer else a
            for q, a in merged.items()
        },
        usage=wire.Usage(input_tokens=tokens_in, output_tokens=tokens_out),
    )
