"""The `structural` chunker: chunks follow the document's sections.

Rules, in order:
1. A chunk never crosses a heading: blocks are grouped into sections (runs of blocks under
   one heading path) and each section is chunked on its own.
2. Tables and code blocks stay whole unless over max_tokens; then they are cut between rows
   (repeating the header) or lines.
3. A paragraph, list item or quote over max_tokens is cut at sentence boundaries into pieces
   of about target_tokens (a sentence over max_tokens is cut between words).
4. Consecutive units are packed up to target_tokens.
5. A chunk under min_tokens is merged with a neighbour in the same section (the previous one
   first) when the result stays within max_tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from clef_pipelines.chunking.sentences import sentence_spans
from clef_pipelines.chunking.tokens import TokenCounter
from clef_pipelines.chunking.units import (
    Unit,
    line_units,
    pack_spans,
    render,
    word_units,
)
from clef_pipelines.config import ChunkingConfig
from clef_pipelines.parsing.models import Block

Draft = tuple[list[Unit], int]  # units of one chunk and their token total


def _sections(blocks: Sequence[Block]) -> list[list[int]]:
    """Indexes of the non-heading blocks of each section, in order."""
    sections: list[list[int]] = []
    current: list[int] = []
    path: list[str] | None = None
    for i, b in enumerate(blocks):
        if b.kind == "heading" or b.heading_path != path:
            if current:
                sections.append(current)
            current = []
            path = b.heading_path
        if b.kind != "heading":
            current.append(i)
    if current:
        sections.append(current)
    return sections


def _units(
    blocks: Sequence[Block], cfg: ChunkingConfig, counter: TokenCounter
) -> dict[int, list[Unit]]:
    """Every non-heading block as one whole unit, or as pieces when over max_tokens.

    One tokenizer call per document: a prose block that could exceed max_tokens (more
    characters than max_tokens; a WordPiece token covers at least one character) is counted
    sentence by sentence, and its total is the sum (exact for WordPiece, see tokens.py), so
    it is never tokenized twice.
    """
    requests: list[str] = []
    plan: list[tuple[int, str, list[tuple[int, int]] | None, int]] = []
    for i, b in enumerate(blocks):
        if b.kind == "heading":
            continue
        rendered = render(b)
        if b.kind in ("table", "code") or len(rendered) <= cfg.max_tokens:
            plan.append((i, rendered, None, len(requests)))
            requests.append(rendered)
        else:
            spans = sentence_spans(b.text)
            plan.append((i, rendered, spans, len(requests)))
            requests.extend(b.text[s:e] for s, e in spans)
    counts = counter.count_batch(requests)

    units: dict[int, list[Unit]] = {}
    for i, rendered, spans, k in plan:
        b = blocks[i]
        if spans is None:
            t = counts[k]
            if t <= cfg.max_tokens:
                units[i] = [Unit(rendered, t, i, 0, len(b.text), True)]
            else:
                units[i] = line_units(b, i, cfg.max_tokens, counter)
            continue
        sent_counts = counts[k : k + len(spans)]
        # The bullet of a rendered list item is one more token.
        total = sum(sent_counts) + (1 if rendered != b.text else 0)
        if total <= cfg.max_tokens:
            units[i] = [Unit(rendered, total, i, 0, len(b.text), True)]
            continue
        sents: list[Unit] = []
        for (s, e), t in zip(spans, sent_counts, strict=True):
            if t > cfg.max_tokens:
                sents.extend(word_units(b.text, s, e, i, cfg.max_tokens, counter))
            else:
                sents.append(Unit(b.text[s:e], t, i, s, e, False))
        packed = pack_spans(
            [(u.start, u.end) for u in sents], [u.tokens for u in sents], cfg.target_tokens
        )
        units[i] = [Unit(b.text[s:e], t, i, s, e, False) for s, e, t in packed]
    return units


def _pack(units: list[Unit], target: int) -> list[Draft]:
    drafts: list[Draft] = []
    cur: list[Unit] = []
    total = 0
    for u in units:
        if cur and total + u.tokens > target:
            drafts.append((cur, total))
            cur, total = [], 0
        cur.append(u)
        total += u.tokens
    if cur:
        drafts.append((cur, total))
    return drafts


def _merge_small(drafts: list[Draft], min_tokens: int, max_tokens: int) -> list[Draft]:
    out: list[Draft] = []
    for units, total in drafts:
        if out and (total < min_tokens or out[-1][1] < min_tokens):
            prev_units, prev_total = out[-1]
            if prev_total + total <= max_tokens:
                out[-1] = (prev_units + units, prev_total + total)
                continue
        out.append((units, total))
    return out


def structural_drafts(
    blocks: Sequence[Block], cfg: ChunkingConfig, counter: TokenCounter
) -> list[Draft]:
    units_of = _units(blocks, cfg, counter)
    drafts: list[Draft] = []
    for section in _sections(blocks):
        units = [u for i in section for u in units_of[i]]
        drafts.extend(_merge_small(_pack(units, cfg.target_tokens), cfg.min_tokens, cfg.max_tokens))
    return drafts
