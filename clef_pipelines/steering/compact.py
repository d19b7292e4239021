"""Compaction: what goes to the LLM fits a token budget, filled with the best passages.

Passage text is never rewritten or cut: a passage is kept whole or dropped with a reason.
Two checks run before Clef is asked anything, because their questions could not change the
outcome: a passage whose text repeats an earlier one is a `duplicate`, and a passage longer
than the whole budget on its own is `over_budget`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from clef_pipelines.steering.candidates import Candidate, normalised_text


def drop_before_asking(
    candidates: Sequence[Candidate], *, dedupe: bool, token_budget: int | None
) -> int:
    """Mark duplicates and passages that cannot fit the budget alone; returns how many."""
    seen: set[str] = set()
    n = 0
    for c in candidates:
        if c.reason is not None:
            continue
        if dedupe:
            key = normalised_text(c.text)
            if key in seen:
                c.reason = "duplicate"
                n += 1
                continue
            seen.add(key)
        if token_budget is not None and c.tokens > token_budget:
            c.reason = "over_budget"
            n += 1
    return n


def fill_budget(
    kept: Sequence[Candidate], conflicts: Sequence[Candidate], token_budget: int | None
) -> tuple[list[Candidate], list[Candidate], list[Candidate]]:
    """Walk the evidence (best first), then the conflicts, keeping each passage that still
    fits: a long passage that does not fit does not stop a shorter, later one. Returns the
    kept evidence, the kept conflicts and the passages dropped as `over_budget`."""
    if token_budget is None:
        return list(kept), list(conflicts), []
    left = token_budget
    out: tuple[list[Candidate], list[Candidate]] = ([], [])
    dropped: list[Candidate] = []
    for bucket, items in zip(out, (kept, conflicts), strict=True):
        for c in items:
            if c.tokens <= left:
                bucket.append(c)
                left -= c.tokens
            else:
                c.reason = "over_budget"
                c.conflict = False
                dropped.append(c)
    return out[0], out[1], dropped


@dataclass
class TokenReport:
    """Tokens of passage text before (every candidate) and after compaction."""

    before: int
    after: int
    budget: int | None = None

    @property
    def saved_fraction(self) -> float:
        return 0.0 if self.before <= 0 else round(1 - self.after / self.before, 4)

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "before": self.before,
            "after": self.after,
            "budget": self.budget,
            "saved_fraction": self.saved_fraction,
        }
