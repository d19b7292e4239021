"""`chunking.strategy: clef`: Clef judges where the text turns, dynamic programming cuts.

For each pair of adjacent sentences inside a section, Clef is asked, with the pair inline in
the question, whether the second `continues` the first's topic and whether it `refers_back`
to it ("this", "they", "such a change"). Cuts are then placed by dynamic programming over the
section's sentences (whole list items, tables and code stay units):

- a chunk never exceeds `max_tokens` (hard);
- each chunk pays for its distance from `target_tokens`, and more when under `min_tokens`;
- a cut pays P(continues), and a large penalty when the next sentence refers back, so it lands
  there only when size forces it.

A document whose questions fail (or with Clef off) is chunked `structural`, and the run's
metadata says how many and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from clef_pipelines.chunking import chunk_blocks
from clef_pipelines.chunking.chunker import chunk_of_units
from clef_pipelines.chunking.models import Chunk
from clef_pipelines.chunking.structural import _sections, _units
from clef_pipelines.chunking.tokens import TokenCounter, get_token_counter
from clef_pipelines.chunking.units import Unit, sentence_units
from clef_pipelines.config import ChunkingConfig
from clef_pipelines.parsing.models import Block
from clef_pipelines.steering.packing import Ask, Subject
from clef_pipelines.steering.runtime import Steering

CONTINUES = Ask("continues", "noul", "Does sentence 2 continue the topic of sentence 1?")
REFERS_BACK = Ask(
    "refers_back", "noul", "Does sentence 2 refer back to sentence 1 (this, it, they, such)?"
)
PAIR_ASKS = [CONTINUES, REFERS_BACK]
#: Cost of a cut just before a sentence that refers back: larger than any size cost below
#: max_tokens, so the DP takes it only when no other cut keeps the chunks within max_tokens.
REFERS_BACK_PENALTY = 1000.0
REFERS_BACK_AT = 0.5


@dataclass
class ClefChunkingReport:
    documents: int = 0
    documents_fallback: int = 0
    fallback_reasons: list[str] = field(default_factory=list)
    pairs: int = 0
    requests: int = 0
    input_tokens: int = 0
    cached_answers: int = 0


def pair_text(first: str, second: str) -> str:
    return f"1: {first.strip()}\n2: {second.strip()}"


def section_units(
    blocks: Sequence[Block], cfg: ChunkingConfig, counter: TokenCounter
) -> list[list[Unit]]:
    """Per section, its units in order: sentences of paragraphs and quotes, whole (or split)
    list items, tables and code."""
    prose = [i for i, b in enumerate(blocks) if b.kind in ("paragraph", "quote")]
    sentences = sentence_units(blocks, prose, cfg.max_tokens, counter)
    others = _units(blocks, cfg, counter)
    out: list[list[Unit]] = []
    for _heading, section in _sections(blocks):
        units: list[Unit] = []
        for i in section:
            units.extend(sentences[i] if i in sentences else others[i])
        out.append(units)
    return out


def place_cuts(
    tokens: Sequence[int],
    cut_cost: Sequence[float],
    cfg: ChunkingConfig,
) -> list[int]:
    """Segment ends (exclusive indexes) minimising size costs plus cut costs.

    `cut_cost[i]` is the cost of cutting after unit i (the last unit's is unused)."""
    n = len(tokens)
    if n == 0:
        return []
    prefix = [0]
    for t in tokens:
        prefix.append(prefix[-1] + t)
    inf = float("inf")
    best = [inf] * (n + 1)
    back = [0] * (n + 1)
    best[0] = 0.0
    target, lo, hi = cfg.target_tokens, cfg.min_tokens, cfg.max_tokens
    for j in range(1, n + 1):
        for i in range(j - 1, -1, -1):
            size = prefix[j] - prefix[i]
            if size > hi and j - i > 1:
                break  # longer segments only grow
            if best[i] == inf:
                continue
            cost = ((size - target) / target) ** 2
            if size < lo and not (i == 0 and j == n):
                cost += 1.0 + (lo - size) / lo
            if j < n:
                cost += cut_cost[j - 1]
            if best[i] + cost < best[j]:
                best[j] = best[i] + cost
                back[j] = i
    ends: list[int] = []
    j = n
    while j > 0:
        ends.append(j)
        j = back[j]
    return sorted(ends)


class ClefChunker:
    """A `ChunkerFn` for `stages.chunk_documents`: asks the pairs of every document first
    (one packed batch for the whole run), then cuts each document."""

    def __init__(
        self, steering: Steering, cfg: ChunkingConfig, counter: TokenCounter | None = None
    ):
        self.steering = steering
        self.cfg = cfg
        self.counter = counter or get_token_counter()
        self.report = ClefChunkingReport()
        self._answers: dict[str, dict[str, float]] = {}
        self._failed: dict[str, str] = {}

    def prepare(self, documents: Sequence[tuple[str, Sequence[Block]]]) -> None:
        """Ask every adjacent-sentence pair of these documents in one packed batch."""
        if not self.steering.clef_enabled:
            return
        subjects: dict[str, Subject] = {}
        for _, blocks in documents:
            for units in section_units(blocks, self.cfg, self.counter):
                for a, b in zip(units, units[1:], strict=False):
                    text = pair_text(a.text, b.text)
                    subjects.setdefault(text, Subject(text, text))
        self.report.pairs += len(subjects)
        if not subjects:
            return
        asked = self.steering.ask(list(subjects.values()), PAIR_ASKS, layout="inline")
        self.report.requests += asked.requests
        self.report.input_tokens += asked.input_tokens
        self.report.cached_answers += asked.cached
        self._failed.update(asked.failed)
        for key, answers in asked.answers.items():
            self._answers[key] = {
                name: float(a.noul) for name, a in answers.items() if hasattr(a, "noul")
            }

    def __call__(self, blocks: list[Block], title: str, doc_id: str) -> list[Chunk]:
        self.report.documents += 1
        reason = self._why_not(blocks)
        if reason is not None:
            self.report.documents_fallback += 1
            if reason not in self.report.fallback_reasons:
                self.report.fallback_reasons.append(reason)
            fallback = self.cfg.model_copy(update={"strategy": "structural"})
            return chunk_blocks(blocks, title, doc_id, fallback, self.counter)
        chunks: list[Chunk] = []
        for units in section_units(blocks, self.cfg, self.counter):
            costs: list[float] = []
            for a, b in zip(units, units[1:], strict=False):
                got = self._answers[pair_text(a.text, b.text)]
                cost = got["continues"]
                if got["refers_back"] >= REFERS_BACK_AT:
                    cost += REFERS_BACK_PENALTY
                costs.append(cost)
            start = 0
            for end in place_cuts([u.tokens for u in units], costs, self.cfg):
                part = units[start:end]
                start = end
                tokens = sum(u.tokens for u in part)
                chunk = chunk_of_units(blocks, part, doc_id, title, len(chunks), tokens, "clef")
                if chunk is not None:
                    chunks.append(chunk)
        return chunks

    def _why_not(self, blocks: Sequence[Block]) -> str | None:
        if not self.steering.clef_enabled:
            return "Clef is off"
        for units in section_units(blocks, self.cfg, self.counter):
            for a, b in zip(units, units[1:], strict=False):
                key = pair_text(a.text, b.text)
                if key in self._failed:
                    return self._failed[key]
                got = self._answers.get(key)
                if got is None or set(got) < {"continues", "refers_back"}:
                    return "no answer for a sentence pair"
        return None
