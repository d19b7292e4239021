"""Chunk enrichment: quality answers, taxonomy tags and custom questions, per chunk.

Per chunk, in as few packed requests as fit (several chunks share a request):
- quality: one choice whose option probabilities are stored as `q_low_information`,
  `q_boilerplate`, `q_instructs_ai` and `q_self_contained`; P(low_information) or
  P(boilerplate) >= `enrich.drop_at` drops the chunk, P(instructs_ai) >= `enrich.quarantine_at`
  quarantines it;
- each taxonomy field: one choice; the chosen option is stored as `tag_<field>` only when its
  probability reaches `tag_min_confidence`, the probability always as `p_tag_<field>`;
- each custom question: `x_<name>` (P(true), the chosen option, or the weighted level).

A chunk whose request failed after the client's retries is kept with `needs_reenrich`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl

from clef_pipelines.clef.wire import ChoiceAnswer, NoulAnswer, ScoreAnswer
from clef_pipelines.steering.config import EnrichConfig, Taxonomy
from clef_pipelines.steering.packing import Ask, Subject
from clef_pipelines.steering.questions import (
    QUALITY_ASK,
    QUALITY_FIELDS,
    enrich_version,
    enrichment_asks,
)
from clef_pipelines.steering.runtime import Steering

KEEP, DROP, QUARANTINE = "keep", "drop", "quarantine"


@dataclass
class EnrichReport:
    chunks: int = 0
    asked: int = 0
    kept: int = 0
    dropped: int = 0
    quarantined: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    needs_reenrich: int = 0
    failures: list[str] = field(default_factory=list)
    mode: str = "off"  # on | shadow | off | unavailable
    version: str | None = None
    requests: int = 0
    input_tokens: int = 0
    cached_answers: int = 0
    tags: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def enrichment_dtypes(asks: Sequence[Ask]) -> dict[str, pl.DataType]:
    """The columns the asks produce, with their types."""
    out: dict[str, pl.DataType] = {}
    for a in asks:
        if a.name == QUALITY_ASK.name:
            out.update({f"q_{f}": pl.Float64() for f in QUALITY_FIELDS})
        elif a.name.startswith("tag_"):
            out[a.name] = pl.Utf8()
            out[f"p_{a.name}"] = pl.Float64()
        else:
            out[a.name] = pl.Utf8() if a.type == "choice" else pl.Float64()
    return out


def answer_columns(
    answers: dict[str, Any], asks: Sequence[Ask], tag_min_confidence: float
) -> dict[str, Any]:
    """One chunk's answers as column values (absent answers as None)."""
    out: dict[str, Any] = {}
    for a in asks:
        ans = answers.get(a.name)
        if a.name == QUALITY_ASK.name:
            probs = ans.probabilities if isinstance(ans, ChoiceAnswer) else {}
            for f in QUALITY_FIELDS:
                out[f"q_{f}"] = float(probs[f]) if f in probs else None
        elif a.name.startswith("tag_"):
            if isinstance(ans, ChoiceAnswer):
                p = float(ans.probabilities.get(ans.choice, ans.confidence))
                out[a.name] = ans.choice if p >= tag_min_confidence else None
                out[f"p_{a.name}"] = p
            else:
                out[a.name] = out[f"p_{a.name}"] = None
        elif isinstance(ans, NoulAnswer):
            out[a.name] = float(ans.noul)
        elif isinstance(ans, ChoiceAnswer):
            out[a.name] = ans.choice
        elif isinstance(ans, ScoreAnswer):
            out[a.name] = float(ans.score)
        else:
            out[a.name] = None
    return out


def decide(values: dict[str, Any], cfg: EnrichConfig) -> str:
    """keep / drop / quarantine from the quality probabilities (quarantine wins)."""
    p_ai = values.get("q_instructs_ai")
    if p_ai is not None and p_ai >= cfg.quarantine_at:
        return QUARANTINE
    worst = max((values.get(k) or 0.0 for k in ("q_low_information", "q_boilerplate")), default=0.0)
    return DROP if worst >= cfg.drop_at else KEEP


@dataclass
class Enriched:
    values: dict[str, dict[str, Any]]  # chunk id -> column -> value
    complete: set[str]  # chunk ids with every answer
    failures: list[str]
    requests: int
    input_tokens: int
    cached: int


def ask_enrichment(
    items: Sequence[tuple[str, str]], steering: Steering, taxonomy: Taxonomy
) -> tuple[Enriched, list[Ask]]:
    """Ask every enrichment question about each (chunk id, text)."""
    cfg = steering.cfg.enrich
    asks = enrichment_asks(cfg, taxonomy)
    subjects = [Subject(cid, text) for cid, text in items if (text or "").strip()]
    asked = steering.ask(subjects, asks, max_subjects_per_request=cfg.max_subjects_per_request)
    values: dict[str, dict[str, Any]] = {}
    complete: set[str] = set()
    names = {a.name for a in asks}
    for cid, _ in items:
        got = asked.answers.get(cid, {})
        values[cid] = answer_columns(got, asks, cfg.tag_min_confidence)
        if set(got) >= names:
            complete.add(cid)
    result = Enriched(
        values=values,
        complete=complete,
        failures=sorted(set(asked.failed.values())),
        requests=asked.requests,
        input_tokens=asked.input_tokens,
        cached=asked.cached,
    )
    return result, asks


def enrich_chunks(
    chunks: pl.DataFrame, steering: Steering, taxonomy: Taxonomy
) -> tuple[pl.DataFrame, EnrichReport]:
    """Add the enrichment columns, drop and quarantine by the thresholds (mode `on`)."""
    started = time.perf_counter()
    cfg = steering.cfg.enrich
    rep = EnrichReport(chunks=chunks.height, mode=cfg.mode)
    if cfg.mode == "off" or chunks.height == 0:
        rep.seconds = round(time.perf_counter() - started, 3)
        return chunks, rep
    if not steering.clef_enabled:
        rep.mode = "unavailable"
        return chunks, rep
    rep.version = enrich_version(cfg, taxonomy)
    todo = chunks.filter(~pl.col("quarantined"))
    items = list(zip(todo["id"].to_list(), todo["text"].to_list(), strict=True))
    result, asks = ask_enrichment(items, steering, taxonomy)
    rep.asked = len(items)
    rep.requests, rep.input_tokens, rep.cached_answers = (
        result.requests,
        result.input_tokens,
        result.cached,
    )
    rep.failures = result.failures
    dtypes = enrichment_dtypes(asks)
    ids = chunks["id"].to_list()
    cols: dict[str, list[Any]] = {c: [] for c in dtypes}
    decision: list[str] = []
    needs: list[bool] = []
    version: list[str | None] = []
    for cid, was_quarantined in zip(ids, chunks["quarantined"].to_list(), strict=True):
        values = result.values.get(cid, {})
        for c in dtypes:
            cols[c].append(values.get(c))
        asked = cid in result.values
        done = cid in result.complete
        decision.append(decide(values, cfg) if done and not was_quarantined else KEEP)
        needs.append(asked and not done)
        version.append(rep.version if done else None)
    out = chunks.with_columns(
        [pl.Series(c, cols[c], dtype=t) for c, t in dtypes.items()]
        + [
            pl.Series("enrich_decision", decision, dtype=pl.Utf8),
            pl.Series("needs_reenrich", needs, dtype=pl.Boolean),
            pl.Series("enrich_version", version, dtype=pl.Utf8),
        ]
    )
    rep.decisions = {d: decision.count(d) for d in (KEEP, DROP, QUARANTINE) if d in decision}
    rep.needs_reenrich = sum(needs)
    for c in dtypes:
        if c.startswith("tag_"):
            rep.tags[c[4:]] = {
                str(k): int(v)
                for k, v in out.group_by(c).len().sort(c).iter_rows()
                if k is not None
            }
    if cfg.mode == "on":
        out = out.with_columns(
            quarantined=pl.col("quarantined") | (pl.col("enrich_decision") == QUARANTINE),
            quarantine_reason=pl.when(pl.col("enrich_decision") == QUARANTINE)
            .then(pl.lit("instructs_ai"))
            .otherwise(pl.col("quarantine_reason")),
            decided_by=pl.when(pl.col("enrich_decision") == QUARANTINE)
            .then(pl.lit("clef:enrichment"))
            .otherwise(pl.col("decided_by")),
        )
        rep.dropped = decision.count(DROP)
        rep.quarantined = decision.count(QUARANTINE)
        out = out.filter(pl.col("enrich_decision") != DROP)
        # A document's record count is what the inventory checks for completeness.
        out = out.with_columns(doc_chunk_count=pl.len().over("doc_id").cast(pl.Int64))
    rep.kept = out.height
    rep.seconds = round(time.perf_counter() - started, 3)
    return out, rep
