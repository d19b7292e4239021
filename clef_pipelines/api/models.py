"""The JSON bodies the API accepts. Responses are the `to_dict()` shapes of the Python API
(`RetrievalResult`, `AnswerResult`), so every surface returns the same thing."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from clef_pipelines.api.config import ApiConfig

#: Most candidates one request may recall: each costs Clef work, so no caller sets the spend.
MAX_TOP_K = 1000
#: The limits every surface (HTTP API, MCP tools) puts on these numbers. Strict: `"5"` and
#: `true` are refused, not read as numbers.
TopK = Annotated[int, Field(ge=1, le=MAX_TOP_K, strict=True)]
TokenBudget = Annotated[int, Field(ge=1, strict=True)]
#: A collection's name; empty is refused rather than taken for the default.
CollectionName = Annotated[str, Field(min_length=1)]


class RequestRefused(ValueError):
    """A request value that breaks one of the API's limits; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def first_error(err: ValidationError) -> tuple[str, str]:
    """The field at fault and pydantic's short message for it, without pydantic's own text."""
    # The deepest error: for a union (`str | PassageIn`) given an object, the one about the
    # object's field rather than "should be a string".
    e = max(err.errors(), key=lambda e: len(e.get("loc", ())))
    loc = [str(p) for p in e.get("loc", ()) if not str(p).startswith("function-")]
    # Union members (`str`, `PassageIn`) are not fields: keep the path a user wrote.
    loc = [p for p in loc if p not in ("str", "PassageIn", "list[ContentPart]", "int")]
    return ".".join(loc) or "body", str(e.get("msg"))


def check_query(query: str, api: ApiConfig) -> None:
    if not query.strip():
        raise RequestRefused("query", "is empty")
    if len(query) > api.max_query_chars:
        raise RequestRefused("query", f"over {api.max_query_chars} characters")


def check_passages(texts: list[str], api: ApiConfig, field: str = "passages") -> None:
    """At most `api.max_passages` passages, and no more text in all than the API's body limit
    lets through (a surface without that limit, MCP over stdio, gets it here)."""
    if len(texts) > api.max_passages:
        raise RequestRefused(field, f"over {api.max_passages}")
    if sum(len(t) for t in texts) > api.max_body_bytes:
        raise RequestRefused(field, f"over {api.max_body_bytes} characters in all")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RetrieveRequest(_Body):
    query: str = Field(min_length=1, description="The question.")
    collection: CollectionName | None = Field(
        None, description="Default: the configured collection."
    )
    top_k: TopK | None = Field(None, description="Candidates recalled.")
    where: dict[str, JsonValue] | None = Field(None, description="Portable filter.")


class AnswerRequest(RetrieveRequest):
    pass


class PassageIn(BaseModel):
    """A passage handed in for compaction: its text and, optionally, an id, a score and
    metadata (`title`, `source_uri`, ...) carried into the result."""

    model_config = ConfigDict(extra="allow")
    text: str
    id: str | None = None
    # A finite number: `1e999` and `"NaN"` would break the JSON the result is sent as.
    score: float | None = Field(None, strict=True, allow_inf_nan=False)


class CompactRequest(_Body):
    query: str = Field(min_length=1)
    passages: list[str | PassageIn] = Field(min_length=1)
    token_budget: TokenBudget | None = Field(None, description="Tokens of passage text kept.")
    max_passages: int | None = Field(None, ge=1, strict=True)
    gate: bool = Field(
        False, strict=True, description="Also ask whether the kept passages can answer."
    )


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text or "" for p in self.content or [] if p.type == "text")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """An OpenAI chat completion body. The question is the last user message; the first
    message, when a system or developer one, is the caller's prompt (never compacted); the
    context chunks come from the extension field `context` or, without it, from the other
    non-user messages. OpenAI's sampling parameters are accepted and ignored: nothing is
    generated. `stream=True` answers with server-sent events."""

    model_config = ConfigDict(extra="allow")
    model: str = "clef-compact"
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=1)
    context: list[str | PassageIn] | None = Field(
        None, description="Extension: the chunks to compact."
    )
    token_budget: int | None = Field(None, ge=1, strict=True, description="Extension: tokens kept.")
    max_passages: int | None = Field(None, ge=1, strict=True, description="Extension.")


def json_schemas() -> dict[str, Any]:
    """Every body's JSON schema, for the OpenAPI document."""
    out: dict[str, Any] = {}
    for model in (RetrieveRequest, AnswerRequest, CompactRequest, ChatCompletionRequest):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        out.update(schema.pop("$defs", {}))
        out[model.__name__] = schema
    return out
