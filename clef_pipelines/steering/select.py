"""Turn passage probabilities into the passages an LLM sees: pure code, visible thresholds.

`rank` (default): drop planted instructions, set conflicts apart, order the rest by answer
evidence then vector score, keep `max_passages`. `threshold`: keep only passages over the
relevance and evidence thresholds. Conflicts (relevant, and contradicting a premise of the
query) go to their own block in both; they are never silently merged with evidence.

"Evidence then vector score" (`order`): `class` (default) chooses the kept passages from
those at or over `min_evidence` first, each class in vector score order; `probability`
chooses by the evidence probability itself. Either way the kept passages are shown best
evidence probability first. Conflicts (`conflicts`): `ranked` (default) shows a conflict
that ranks above the last kept passage; `all` shows any.

Why the defaults: with them, once the passages asked about so far hold `max_passages` kept
evidence passages, no passage further down the recall order can be shown, whatever Clef
would answer about it (`settled`), so classification can stop there (`classify.waves`).
Under `probability` a passage further down could always outrank the kept ones (a higher
probability), and under `conflicts: all` it could always be a conflict: every passage must
be asked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from clef_pipelines.steering.candidates import Candidate

if TYPE_CHECKING:
    from clef_pipelines.retrieval.config import SelectConfig


@dataclass
class Selection:
    kept: list[Candidate] = field(default_factory=list)
    conflicts: list[Candidate] = field(default_factory=list)
    dropped: list[Candidate] = field(default_factory=list)


def evidence_order(c: Candidate) -> tuple[float, float, int]:
    """Evidence first (unscored passages after scored ones), then vector score, then recall."""
    return (-c.scores.get("contains_answer_evidence", -1.0), -c.vector_score, c.rank)


Key = tuple[float, float, int]


def order_key(cfg: SelectConfig) -> Callable[[Candidate], Key]:
    """The sort key of `cfg.order` (smaller ranks first)."""
    if cfg.order == "probability":
        return evidence_order
    threshold = cfg.min_evidence

    def by_class(c: Candidate) -> Key:
        e = c.scores.get("contains_answer_evidence")
        cls = -1.0 if e is None else (1.0 if e >= threshold else 0.0)  # unscored last
        return (-cls, -c.vector_score, c.rank)

    return by_class


def best_key(c: Candidate, cfg: SelectConfig) -> Key:
    """The best (smallest) key any answers about `c` could give it."""
    return (-1.0, -c.vector_score, c.rank)


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
            if verdict == "instructs_ai":
                c.decided_by = "clef"
            out.dropped.append(c)
    key = order_key(cfg)
    cap = cfg.max_passages
    ranked.sort(key=key)
    out.conflicts.sort(key=key)
    for c in ranked[cap:]:
        low = c.scores.get("is_relevant", 1.0) < cfg.min_relevant
        c.reason = "irrelevant" if low else "over_max_passages"
        out.dropped.append(c)
    shown = out.conflicts
    if cfg.conflicts == "ranked" and len(ranked) >= cap:
        # Only conflicts ranking above the last kept passage: what a reader going down the
        # ranking would meet before the kept set is full.
        bound = key(ranked[cap - 1])
        shown = [c for c in shown if key(c) < bound]
    shown = shown[:cap]
    on_show = {id(c) for c in shown}
    for c in out.conflicts:
        if id(c) not in on_show:
            c.conflict = False
            c.reason = "over_max_passages"
            out.dropped.append(c)
    # Which passages are kept is decided above; they are shown best evidence first (under
    # `class` too: the order inside the kept set depends on the kept passages alone).
    out.kept = sorted(ranked[:cap], key=evidence_order)
    out.conflicts = sorted(shown, key=evidence_order)
    return out


def settled(done: Sequence[Candidate], rest: Sequence[Candidate], cfg: SelectConfig) -> bool:
    """Whether `select` over `done` (scored) and `rest` (not asked yet) keeps the same
    passages, in the same order, and shows the same conflicts whatever Clef would answer
    about `rest`; then `rest` need not be asked.

    A passage in `rest` can at best rank with the best key (evidence, its own vector score
    and rank). If that key still sorts after the `max_passages`-th kept passage of `done`,
    it cannot enter the kept set, and sorting in below the cut moves no kept passage. As a
    conflict: under `ranked`, it would show only above that cut, which more passages can
    only raise; under `all`, only `max_passages` conflicts of `done` ranking before it keep
    it out. Passages that already carry a reason are dropped whatever Clef says."""
    key = order_key(cfg)
    cap = cfg.max_passages
    ranked: list[Key] = []
    conflicts: list[Key] = []
    for c in done:
        if c.reason is not None:
            continue
        verdict = decide(c, cfg)
        if verdict == "keep":
            ranked.append(key(c))
        elif verdict == "conflict":
            conflicts.append(key(c))
    if len(ranked) < cap:
        return False
    bound = sorted(ranked)[cap - 1]
    conflicts.sort()
    for c in rest:
        if c.reason is not None:
            continue
        best = best_key(c, cfg)
        if best < bound:
            return False
        if cfg.conflicts == "all" and (len(conflicts) < cap or best < conflicts[cap - 1]):
            return False
    return True


def waves_cannot_settle(cfg: SelectConfig) -> str | None:
    """Why a first wave would (nearly) never settle the result here, so that waves would only
    add a round trip (None: it can settle). `settled` stays exact either way; under these
    settings it needs `max_passages` answers of exactly 1.0 or as many conflicts."""
    if cfg.order != "class":
        return "select.order is probability: any later passage could outrank the kept ones"
    if cfg.conflicts != "ranked":
        return "select.conflicts is all: any later passage could be a shown conflict"
    return None


def vector_order(candidates: Sequence[Candidate], max_passages: int) -> Selection:
    """The fallback when Clef cannot judge: the first `max_passages` by recall rank."""
    out = Selection()
    live = sorted((c for c in candidates if c.reason is None), key=lambda c: c.rank)
    out.kept = live[:max_passages]
    for c in live[max_passages:]:
        c.reason = "over_max_passages"
    out.dropped = [c for c in candidates if c.reason is not None]
    return out
