"""The System One wire format: requests and answers as pydantic models, and their checks.

Every rule is enforced before anything is sent (and again by `serve` on what it receives),
and every answer is checked against the request it answers: a malformed or partial answer
is a `ClefBadAnswer`, never a guess.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from clef_pipelines.clef.errors import ClefBadAnswer, ClefValidationError

# The limits and the JSON helpers, shared with `wire_light` (the client's plain path).
from clef_pipelines.clef.wire_common import EPS as _EPS
from clef_pipelines.clef.wire_common import (
    MAX_CHOICE_OPTIONS,
    MAX_IMAGES,
    MAX_QUESTION_ID,
    MAX_QUESTIONS,
    MAX_SCORE_LEVELS,
    MIN_CHOICE_OPTIONS,
    MIN_SCORE_LEVELS,
    PROBABILITY_TOLERANCE,
    canonical_json,
    render_state,
)

_TAGS = ("noul", "choice", "score")


def _check_instructions(v: Any) -> Any:
    if v is None or (isinstance(v, str) and not v.strip()) or v in ({}, []):
        raise ValueError("instructions are required (a non-empty string or JSON value)")
    return v


class _Question(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instructions: JsonValue = Field(description="A string, or any JSON carrying its subject.")

    _v_instructions = field_validator("instructions")(_check_instructions)


class NoulQuestion(_Question):
    type: Literal["noul"]
    # Only the descriptions of "true" and "false" may be overridden.
    criteria: dict[Literal["true", "false"], JsonValue] | None = None


class ChoiceQuestion(_Question):
    type: Literal["choice"]
    criteria: dict[str, JsonValue] = Field(
        min_length=MIN_CHOICE_OPTIONS,
        max_length=MAX_CHOICE_OPTIONS,
        description="Option id -> description (or null).",
    )

    @field_validator("criteria")
    @classmethod
    def _ids(cls, v: dict[str, Any]) -> dict[str, Any]:
        if any(not k.strip() for k in v):
            raise ValueError("choice option ids must be non-empty")
        return v


class ScoreQuestion(_Question):
    type: Literal["score"]
    criteria: list[JsonValue] = Field(
        min_length=MIN_SCORE_LEVELS,
        max_length=MAX_SCORE_LEVELS,
        description="Ordered levels, low to high.",
    )


Question = Annotated[NoulQuestion | ChoiceQuestion | ScoreQuestion, Field(discriminator="type")]
QuestionId = Annotated[str, Field(min_length=1, max_length=MAX_QUESTION_ID)]


def _check_image(v: str) -> str:
    if v.startswith(("http://", "https://", "//")):
        raise ValueError("remote image URLs are refused: send a data: URL or base64")
    payload = v
    if v.startswith("data:"):
        head, sep, payload = v.partition(",")
        if not sep or ";base64" not in head or not head[5:].startswith("image/"):
            raise ValueError("an image data: URL must look like data:image/<type>;base64,<data>")
    try:
        base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("image is not valid base64") from None
    if not payload:
        raise ValueError("image is empty")
    return v


class SystemOneRequest(BaseModel):
    """One request: at most 64 questions about one state (and up to 4 images)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    state: JsonValue
    questions: dict[QuestionId, Question] = Field(min_length=1, max_length=MAX_QUESTIONS)
    images: list[str] | None = Field(None, max_length=MAX_IMAGES)

    @field_validator("images")
    @classmethod
    def _images(cls, v: list[str] | None) -> list[str] | None:
        if v:
            for i, img in enumerate(v):
                try:
                    _check_image(img)
                except ValueError as exc:
                    raise ValueError(f"images[{i}]: {exc}") from None
        return v or None

    # The questions in wire form when the request was made from them (`parse_dumped_request`).
    _questions_wire: dict[str, Any] | None = PrivateAttr(default=None)

    def wire(self) -> dict[str, Any]:
        """The JSON body as sent; no nulls for absent optional fields."""
        questions = self._questions_wire
        if questions is None:
            questions = {
                qid: q.model_dump(mode="json", exclude_none=True)
                for qid, q in self.questions.items()
            }
        return self.model_dump(mode="json", exclude_none=True, exclude={"questions"}) | {
            "questions": questions
        }


_QUESTIONS = TypeAdapter(dict[QuestionId, Question])


# ---- answers -----------------------------------------------------------------------------

Probability = Annotated[float, Field(ge=-_EPS, le=1 + _EPS)]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")


class NoulAnswer(_Answer):
    type: Literal["noul"]
    noul: Probability


class ChoiceAnswer(_Answer):
    type: Literal["choice"]
    choice: str
    confidence: Probability
    probabilities: dict[str, Probability]


class ScoreAnswer(_Answer):
    type: Literal["score"]
    score: float
    confidence: Probability
    legend: dict[str, JsonValue] = Field(default_factory=dict)
    probabilities: dict[str, Probability]


Answer = Annotated[NoulAnswer | ChoiceAnswer | ScoreAnswer, Field(discriminator="type")]


class Usage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(0, ge=0)


class SystemOneResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    answers: dict[str, Answer]
    usage: Usage

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# ---- checks ------------------------------------------------------------------------------


def error_field(err: ValidationError, prefix: str = "") -> tuple[str, str]:
    """The dotted field and message of the first pydantic error, without union noise."""
    e = err.errors()[0]
    # "[key]" marks a bad dict key in pydantic's location; the key itself names the field.
    parts = ([prefix] if prefix else []) + [str(p) for p in e.get("loc", ()) if str(p) != "[key]"]
    # A discriminated union puts its tag ("choice") right after the question id in the
    # location; it is not a field, so drop it: questions.team.choice.criteria -> ...team.criteria
    parts = [
        p
        for i, p in enumerate(parts)
        if not (i >= 2 and p in _TAGS and parts[i - 2] in ("questions", "answers"))
    ]
    if e.get("type") in ("union_tag_invalid", "union_tag_not_found"):
        parts.append("type")
    loc = ".".join(parts)
    msg = e.get("msg", "invalid")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return loc or "(body)", msg


def parse_request(body: Any) -> SystemOneRequest:
    """Validate a request body; raises ClefValidationError naming the first invalid field."""
    try:
        return SystemOneRequest.model_validate(body)
    except ValidationError as exc:
        field, msg = error_field(exc)
        raise ClefValidationError(f"{field}: {msg}", field=field) from None


def parse_dumped_request(body: dict[str, Any]) -> SystemOneRequest:
    """`parse_request` for a body whose questions are already in wire form (each the
    ``model_dump(mode="json", exclude_none=True)`` of a validated question, as the client
    makes them): validated as ever, and `wire()` then reuses them. Why: the client's packed
    requests carry 45 or more questions, and dumping each of them again for every `wire()`
    (twice a request) was about a fifth of a millisecond a request before it went out."""
    request = parse_request(body)
    request._questions_wire = body["questions"]
    return request


def parse_questions(questions: Any) -> dict[str, NoulQuestion | ChoiceQuestion | ScoreQuestion]:
    """Validate questions without the 64 cap (the client splits larger sets)."""
    if not isinstance(questions, dict) or not questions:
        raise ClefValidationError("questions: at least one question is required", field="questions")
    try:
        return _QUESTIONS.validate_python(questions)
    except ValidationError as exc:
        field, msg = error_field(exc, "questions")
        raise ClefValidationError(f"{field}: {msg}", field=field) from None


#: Validated questions that are only a type and a string wording, with their wire dump, by
#: (type, wording); bounded, cleared when full.
_PLAIN_QUESTIONS: dict[tuple[str, str], tuple[Any, dict[str, Any]]] = {}
_PLAIN_QUESTIONS_MAX = 8192


def _plain_key(qid: Any, q: Any) -> tuple[str, str] | None:
    if not (isinstance(qid, str) and 1 <= len(qid) <= 256 and isinstance(q, dict) and len(q) == 2):
        return None
    kind, wording = q.get("type"), q.get("instructions")
    return (kind, wording) if isinstance(kind, str) and isinstance(wording, str) else None


def parse_and_dump_questions(
    questions: Any,
) -> tuple[dict[str, NoulQuestion | ChoiceQuestion | ScoreQuestion], dict[str, dict[str, Any]]]:
    """`parse_questions`, and each question's wire form (``model_dump(mode="json",
    exclude_none=True)``), in the questions' order. A question that is only a type and a
    string wording, validated once, is not validated again: packed requests ask the same
    few wordings about `s1`, `s2` ... in query after query, and validating and dumping 63 of
    them cost about 1 ms of a query's critical path (twice: the request is validated too).
    Anything else, and the first sight of a wording, is validated as ever (same errors)."""
    if not isinstance(questions, dict) or not questions:
        raise ClefValidationError("questions: at least one question is required", field="questions")
    keys = {qid: _plain_key(qid, q) for qid, q in questions.items()}
    # Looked up once (another thread may clear the memo meanwhile).
    hits = {
        qid: _PLAIN_QUESTIONS.get(key) if key is not None else None for qid, key in keys.items()
    }
    rest = {qid: q for qid, q in questions.items() if hits[qid] is None}
    fresh = parse_questions(rest) if rest else {}
    parsed: dict[str, NoulQuestion | ChoiceQuestion | ScoreQuestion] = {}
    dumped: dict[str, dict[str, Any]] = {}
    for qid, key in keys.items():
        hit = hits[qid]
        if hit is None:
            model = fresh[qid]
            wire = model.model_dump(mode="json", exclude_none=True)
            if key is not None:
                if len(_PLAIN_QUESTIONS) >= _PLAIN_QUESTIONS_MAX:
                    _PLAIN_QUESTIONS.clear()
                _PLAIN_QUESTIONS[key] = (model, wire)
        else:
            model, wire = hit
        parsed[qid] = model
        dumped[qid] = dict(wire)  # a copy: the memo's own is never handed out
    return parsed, dumped


def request_from_parsed(
    model: str,
    state: Any,
    parsed: dict[str, NoulQuestion | ChoiceQuestion | ScoreQuestion],
    dumped: dict[str, dict[str, Any]],
    images: list[str] | None = None,
) -> SystemOneRequest:
    """A request from questions `parse_and_dump_questions` gave (the same keys in `parsed`
    and `dumped`): validated as ever (model, state, images, the 64-question cap), the
    question objects taken as they are rather than validated again, and `wire()` reusing
    their dump (`parse_dumped_request`)."""
    body: dict[str, Any] = {"model": model, "state": state, "questions": parsed}
    if images:
        body["images"] = images
    request = parse_request(body)
    request._questions_wire = dumped
    return request


def option_ids(question: NoulQuestion | ChoiceQuestion | ScoreQuestion) -> list[str]:
    if isinstance(question, NoulQuestion):
        return ["true", "false"]
    if isinstance(question, ChoiceQuestion):
        return list(question.criteria)
    return [str(i) for i in range(len(question.criteria))]


def _check_distribution(qid: str, probs: dict[str, float], expected: list[str]) -> None:
    if set(probs) != set(expected):
        missing = sorted(set(expected) - set(probs))
        extra = sorted(set(probs) - set(expected))
        raise ClefBadAnswer(
            f"answer {qid!r}: probabilities do not match the options "
            f"(missing {missing}, unexpected {extra})"
        )
    total = sum(probs.values())
    if abs(total - 1.0) > PROBABILITY_TOLERANCE:
        raise ClefBadAnswer(f"answer {qid!r}: probabilities sum to {total:.4f}, not 1")


def parse_response(body: Any, request: SystemOneRequest) -> SystemOneResponse:
    """Validate an answer body against the request it answers."""
    try:
        resp = SystemOneResponse.model_validate(body)
    except ValidationError as exc:
        field, msg = error_field(exc)
        raise ClefBadAnswer(f"malformed answer: {field}: {msg}") from None
    missing = [q for q in request.questions if q not in resp.answers]
    if missing:
        raise ClefBadAnswer(f"partial answer: no answer for {missing}")
    extra = [q for q in resp.answers if q not in request.questions]
    if extra:
        raise ClefBadAnswer(f"answer for questions that were not asked: {extra}")
    for qid, q in request.questions.items():
        a = resp.answers[qid]
        if a.type != q.type:
            raise ClefBadAnswer(f"answer {qid!r} is {a.type!r}, the question is {q.type!r}")
        if isinstance(a, ChoiceAnswer):
            opts = option_ids(q)
            _check_distribution(qid, a.probabilities, opts)
            if a.choice not in opts:
                raise ClefBadAnswer(f"answer {qid!r}: choice {a.choice!r} is not an option")
        elif isinstance(a, ScoreAnswer):
            opts = option_ids(q)
            _check_distribution(qid, a.probabilities, opts)
            if not (-_EPS <= a.score <= len(opts) - 1 + _EPS):
                raise ClefBadAnswer(
                    f"answer {qid!r}: score {a.score} is outside 0..{len(opts) - 1}"
                )
    # Keep the request's question order: callers zip answers with their questions.
    resp.answers = {qid: resp.answers[qid] for qid in request.questions}
    return resp


def merge_responses(responses: list[SystemOneResponse]) -> SystemOneResponse:
    """One response of several requests' answers, in order (a split `ask`)."""
    merged: dict[str, Any] = {}
    for r in responses:
        merged.update(r.answers)
    return SystemOneResponse(
        model=responses[0].model,
        answers=merged,
        usage=Usage(
            input_tokens=sum(r.usage.input_tokens for r in responses),
            output_tokens=sum(r.usage.output_tokens for r in responses),
        ),
    )


__all__ = ["MAX_IMAGES", "canonical_json", "render_state"]
