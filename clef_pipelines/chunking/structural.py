"""The `structural` chunker: chunks follow the document's sections.

Rules, in order:
1. Blocks are grouped into sections (runs of blocks under one heading path) and each section
   is chunked on its own, so a chunk of ordinary size never crosses a heading.
2. Tables and code blocks stay whole unless over max_tokens; then they are cut between rows
   (repeating the header) or lines.
3. A paragraph, list item or quote over max_tokens is cut at sentence boundaries into pieces
   of about target_tokens (a sentence over max_tokens is cut between words).
4. Consecutive units are packed up to target_tokens.
5. A chunk under min_tokens is merged with a neighbour in the same section (the previous one
   first) when the result stays within max_tokens.
6. A chunk still under min_tokens (a section holding one short paragraph, as API references
   and FAQs are written) is merged with the adjacent chunk of a related section (its parent,
   a child or a sibling: the same enclosing section) when the result stays within
   max_tokens; the joined section's heading is written into the text as a Markdown heading
   line, so the chunk still says which part is which. Unrelated sections never join.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


def _sections(blocks: Sequence[Block]) -> list[tuple[int | None, list[int]]]:
    """Each section: the index of the heading that opens it (None before the first heading,
    or where the path changed without one) and the indexes of its non-heading blocks."""
    sections: list[tuple[int | None, list[int]]] = []
    current: list[int] = []
    heading: int | None = None
    path: list[str] | None = None
    for i, b in enumerate(blocks):
        if b.kind == "heading" or b.heading_path != path:
            if current:
                sections.append((heading, current))
            current = []
            heading = i if b.kind == "heading" else None
            path = b.heading_path
        if b.kind != "heading":
            current.append(i)
    if current:
        sections.append((heading, current))
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


@dataclass
class _Run:
    """Drafts of consecutive sections, joined; `paths` are their heading paths in order."""

    units: list[Unit]
    tokens: int
    paths: list[tuple[str, ...]]


def _related(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Parent and child, or siblings: both sections lie in the same enclosing section."""
    shorter, longer = sorted((a, b), key=len)
    return longer[: len(shorter)] == shorter or (len(a) == len(b) > 0 and a[:-1] == b[:-1])


def _heading_unit(blocks: Sequence[Block], i: int | None, counter: TokenCounter) -> list[Unit]:
    if i is None:
        return []
    b = blocks[i]
    text = f"{'#' * b.level} {b.text}" if b.level > 0 else b.text
    return [Unit(text, counter.count(text), i, 0, len(b.text), True)]


def _join_tiny_sections(
    sections: list[tuple[int | None, list[Draft]]],
    blocks: Sequence[Block],
    cfg: ChunkingConfig,
    counter: TokenCounter,
) -> list[Draft]:
    """Rule 6: a draft under min_tokens joins the adjacent draft of a related section."""
    out: list[_Run] = []
    for heading, drafts in sections:
        for k, (units, total) in enumerate(drafts):
            path = tuple(blocks[units[0].block].heading_path) if units else ()
            prev = out[-1] if out else None
            tiny = total < cfg.min_tokens or (prev is not None and prev.tokens < cfg.min_tokens)
            if prev is not None and k == 0 and tiny and _related(prev.paths[-1], path):
                head = _heading_unit(blocks, heading, counter)
                joined = prev.tokens + sum(u.tokens for u in head) + total
                if joined <= cfg.max_tokens:
                    prev.units.extend([*head, *units])
                    prev.tokens = joined
                    prev.paths.append(path)
                    continue
            out.append(_Run(list(units), total, [path]))
    return [(r.units, r.tokens) for r in out]


def structural_drafts(
    blocks: Sequence[Block], cfg: ChunkingConfig, counter: TokenCounter
) -> list[Draft]:
    units_of = _units(blocks, cfg, counter)
    per_section: list[tuple[int | None, list[Draft]]] = []
    for heading, section in _sections(blocks):
        units = [u for i in section for u in units_of[i]]
        drafts = _merge_small(_pack(units, cfg.target_tokens), cfg.min_tokens, cfg.max_tokens)
        per_section.append((heading, drafts))
    return _join_tiny_sections(per_section, blocks, cfg, counter)
