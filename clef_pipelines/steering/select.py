"""Turn passage probabilities into the passages an LLM sees: pure code, visible thresholds.

`rank` (default): drop planted instructions, set conflicts apart, order the rest by answer
evidence then vector score, keep `max_passages`. `threshold`: keep only passages over the
relevance and evidence thresholds. Conflicts (relevant, and contradicting a premise of the
query) go to their own block in both; they are never silently merged with evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from clef_pipelines.retrieval.config import SelectConfig
from clef_pipelines.steering.candidates import Candidate


@dataclass
class Selection:
    kept: list[Candidate] = field(default_factory=list)
    conflicts: list[Candidate] = field(default_factory=list)
    dropped: list[Candidate] = field(default_factory=list)


def evidence_order(c: Candidate) -> tuple[float, float, int]:
    """Evidence first (unscored passages after scored ones), then vector score, then recall."""
    return (-c.scores.get("contains_answer_evidence", -1.0), -c.vector_score, c.rank)


def decide(c: Candidate, cfg: SelectConfig) -> str:
    """`keep`, `conflict`, or the reason the passage is dropped."""
    s = c.scores
    if s.get("instructs_ai", 0.0) >= cfg.drop_instructs_ai:
        return "instructs_ai"
    relevant = s.get("is_relevant", 1.0) >= cfg.min_relevant
    if relevant and s.get("contradicts_query_premise", 0.0) >= cfg.conflict:
        return "conflict"
    if not relevant and (cfg.strategy == "threshold" or cfg.drop_irrelevant):
        return "irrelevant"
    if cfg.strategy == "threshold":
        if not relevant:
            return "irrelevant"
        if s.get("contains_answer_evidence", 1.0) < cfg.min_evidence:
            return "no_evidence"
    return "keep"


def select(candidates: Sequence[Candidate], cfg: SelectConfig) -> Selection:
    """Candidates that already carry a `reason` (dropped before classification) stay dropped."""
    out = Selection()
    ranked: list[Candidate] = []
    for c in candidates:
        if c.reason is not None:
            out.dropped.append(c)
            continue
        verdict = decide(c, cfg)
        if verdict == "keep":
            ranked.append(c)
        elif verdict == "conflict":
            c.conflict = True
            out.conflicts.append(c)
        else:
            c.reason = verdict
            out.dropped.append(c)
    ranked.sort(key=evidence_order)
    out.conflicts.sort(key=evidence_order)
    for c in ranked[cfg.max_passages :]:
        low = c.scores.get("is_relevant", 1.0) < cfg.min_relevant
        c.reason = "irrelevant" if low else "over_max_passages"
        out.dropped.append(c)
    for c in out.conflicts[cfg.max_passages :]:
        c.conflict = False
        c.reason = "over_max_passages"
        out.dropped.append(c)
    out.kept = ranked[: cfg.max_passages]
    out.conflicts = out.conflicts[: cfg.max_passages]
    return out


def vector_order(candidates: Sequence[Candidate], max_passages: int) -> Selection:
    """The fallback when Clef cannot judge: the first `max_passages` by recall rank."""
    out = Selection()
    live = sorted((c for c in candidates if c.reason is None), key=lambda c: c.rank)
    out.kept = live[:max_passages]
    for c in live[max_passages:]:
        c.reason = "over_max_passages"
    out.dropped = [c for c in candidates if c.reason is not None]
    return out
