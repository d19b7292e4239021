"""Retrieval settings: recall size, and the Clef stages that steer what an LLM sees.

The query path is recall -> route -> classify -> select -> compact -> gate -> answer. Each
Clef stage has `mode`: `on` asks and acts; `shadow` asks and records every probability and
the decision it would have taken in the trace, but acts as `off`; `off` asks nothing. Every
threshold that turns a probability into a decision is here, in the YAML.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from clef_pipelines._strict import Mode, OnOff, StrictModel

#: How recall finds candidates: nearest vectors, full-text matches, or both fused.
RecallMode = Literal["vector", "text", "hybrid"]


class FusionConfig(StrictModel):
    """How hybrid recall fuses the vector and the full-text lists."""

    method: Literal["zscore", "weighted", "rrf"] = Field(
        "zscore",
        description="zscore: weighted sum of each list's scores standardised by the list's "
        "standard deviation (the best on SciFact train, both halves); weighted: the same "
        "min-max normalised; rrf: reciprocal rank fusion (ranks only).",
    )
    rrf_k: int = Field(60, ge=1, description="rrf: the constant k in w / (k + rank).")
    vector_weight: float = Field(1.0, ge=0, description="Weight of the vector list.")
    text_weight: float = Field(1.0, ge=0, description="Weight of the full-text list.")
    candidates: int = Field(
        100, ge=1, le=1000, description="Hits taken from each list before fusing (>= top_k)."
    )


class RouteConfig(StrictModel):
    """Route a query to a slice of the collection by the taxonomy fields marked for routing."""

    mode: Mode = Field("on", description="on | shadow | off. Skipped when the caller filters.")
    min_confidence: float = Field(
        0.60, ge=0, le=1, description="Top option probability that filters on that option alone."
    )
    top2_mass: float = Field(
        0.80, ge=0, le=1, description="Joint probability of the top two that filters with `in`."
    )
    min_candidates: int = Field(
        5, ge=0, description="Fewer hits than this under the route filter: retry unfiltered."
    )


class ClassifyConfig(StrictModel):
    """Ask Clef about each recalled passage: is_relevant, contains_answer_evidence,
    contradicts_query_premise, and instructs_ai where the collection was not screened."""

    mode: Mode = "on"
    packed: bool = Field(True, description="Several passages share one request.")
    waves: bool | Literal["auto"] = Field(
        "auto",
        description="Ask in recall order, first about what one request holds (or "
        "`first_wave` passages), and about the rest only when their answers could still "
        "change the kept passages or conflicts (needs `select.order: class` and "
        "`select.conflicts: ranked`; otherwise every passage is asked at once). Passages "
        "not asked are dropped as `not_needed`; the result is the same either way. true: "
        "always; false: never; auto: while at least `waves_min_settled` of the last "
        "`waves_window` queries were (or, asked at once, would have been) settled by their "
        "first wave: an unsettled query pays one more round trip.",
    )
    waves_min_settled: float = Field(
        0.5, ge=0, le=1, description="auto: share of recent queries settled by the first wave."
    )
    waves_window: int = Field(20, ge=1, description="auto: how many recent queries count.")
    first_wave: int | None = Field(
        None, ge=1, description="Passages in the first wave at most; None: what one request holds."
    )
    passages_per_request: int | None = Field(
        None, ge=1, le=64, description="Cap on passages per request (1 allowed); None: fill."
    )
    layout: Literal["state_key", "inline"] = Field(
        "state_key",
        description="Each question names its passage by a state key, or carries it inline.",
    )
    shared_wording: bool = Field(
        True,
        description="state_key layout, several passages a request: each question's wording "
        "is sent once in the state and the questions refer to it by name (fewer tokens).",
    )
    instructs_ai: Literal["auto", "always", "never"] = Field(
        "auto",
        description="auto: ask only when the collection's manifest does not show it was "
        "screened for planted instructions at ingest.",
    )


class SelectConfig(StrictModel):
    """Turn passage probabilities into the kept set."""

    mode: OnOff = Field("on", description="off: vector order, max_passages.")
    strategy: Literal["rank", "threshold"] = Field(
        "rank",
        description="rank: drop injections, mark conflicts, order by evidence then vector "
        "score; threshold: keep only passages over min_relevant and min_evidence.",
    )
    max_passages: int = Field(5, ge=1, le=200, description="Passages kept at most.")
    order: Literal["class", "probability"] = Field(
        "class",
        description="class: passages with P(contains_answer_evidence) >= min_evidence first, "
        "each class in vector (recall score) order; probability: by the probability itself, "
        "vector score breaking ties. Only `class` lets classification stop early (waves): "
        "under `probability` any passage further down could still outrank the kept ones.",
    )
    conflicts: Literal["ranked", "all"] = Field(
        "ranked",
        description="ranked: a conflict is shown when it ranks above the last kept passage "
        "(or fewer than max_passages are kept); all: any conflict among the candidates. Both "
        "show at most max_passages conflicts.",
    )
    drop_instructs_ai: float = Field(0.70, ge=0, le=1, description="P(instructs_ai) that drops.")
    min_relevant: float = Field(
        0.50, ge=0, le=1, description="P(is_relevant) below which a passage is irrelevant."
    )
    drop_irrelevant: bool = Field(
        False,
        description="rank strategy: drop passages under min_relevant (compact does by default).",
    )
    min_evidence: float = Field(
        0.40,
        ge=0,
        le=1,
        description="P(contains_answer_evidence) of the evidence class (order: class) and that "
        "the threshold strategy keeps.",
    )
    conflict: float = Field(
        0.60, ge=0, le=1, description="P(contradicts_query_premise) that marks a conflict."
    )
    expand_neighbours: bool = Field(
        False, description="Add the chunks around a kept chunk that is not self-contained."
    )
    expand_below_self_contained: float = Field(
        0.5, ge=0, le=1, description="q_self_contained under which neighbours are added."
    )
    expand_max_tokens: int = Field(600, ge=0, description="Tokens neighbours may add in all.")


class CompactConfig(StrictModel):
    """Fill an optional token budget with the best passages; text is never rewritten."""

    mode: OnOff = "on"
    token_budget: int | None = Field(
        None, ge=1, description="Tokens of passage text sent to the LLM at most; None: no cap."
    )
    dedupe: bool = Field(True, description="Drop a passage whose text repeats a kept one.")
    preview_chars: int | None = Field(
        None,
        ge=64,
        description="Clef reads only the first N characters of each passage when classifying "
        "(cut at a word; the passage itself is kept or dropped whole, never cut); None: the "
        "whole passage. Fewer bytes and tokens a request, but evidence past the preview goes "
        "unread: on SciFact's abstracts (about 1,500 characters, findings at the end) 512 "
        "loses evidence (docs/BENCHMARKS.md#compact), so it is off by default.",
    )


class GateConfig(StrictModel):
    """One request: do the kept passages hold what is needed to answer?"""

    mode: Mode = "on"
    answer_min: float = Field(
        0.35, ge=0, le=1, description="Below this the result abstains and no LLM is called."
    )


class AnswerConfig(StrictModel):
    """The LLM that writes the cited answer. The key is read from the env variable named."""

    provider: Literal["openai", "anthropic"] = Field(
        "openai", description="openai: any OpenAI-compatible /chat/completions; anthropic."
    )
    base_url: str | None = Field(
        None,
        description="API base (default https://api.openai.com/v1 or https://api.anthropic.com).",
    )
    model: str | None = Field(None, description="Model name; required to answer.")
    api_key_env: str | None = Field(
        None, description="Env variable with the key (default OPENAI_API_KEY / ANTHROPIC_API_KEY)."
    )
    max_tokens: int = Field(800, ge=1)
    temperature: float = Field(0.0, ge=0, le=2)
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(2, ge=0, le=10, description="Retries on 429, 5xx and timeouts.")


class RetrievalConfig(StrictModel):
    top_k: int = Field(30, ge=1, le=1000, description="Candidates recalled for the Clef stages.")
    query_embedder: Literal["numpy", "torch"] = Field(
        "numpy",
        description="How queries run the minilm embedder: numpy (same vectors, no torch "
        "import: a fast cold start) or torch (the same model on plain torch).",
    )
    mode: RecallMode = Field(
        "hybrid",
        description="Recall by vector, full-text (text) or both fused (hybrid: +0.05 nDCG@10 "
        "over vector on SciFact train; a collection without a full-text index: vector).",
    )
    clef_deadline_s: float = Field(
        60.0,
        gt=0,
        description="Longest one query waits for Clef, retries and backoffs included; past "
        "it the result is degraded (vector order) instead of waiting on. The API uses at most "
        "80% of api.request_timeout_s.",
    )
    fusion: FusionConfig = FusionConfig()
    route: RouteConfig = RouteConfig()
    classify: ClassifyConfig = ClassifyConfig()
    select: SelectConfig = SelectConfig()
    compact: CompactConfig = CompactConfig()
    gate: GateConfig = GateConfig()
    answer: AnswerConfig = AnswerConfig()
