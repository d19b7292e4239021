"""The `fixed` chunker: sentence-aligned windows of about target_tokens, overlapping.

Headings are not content here: every other block is cut into sentences (tables and code
into lines), and windows of consecutive sentences are taken across the whole document
(crossing headings). Each window holds sentences up to target_tokens (at least one); the
next window starts at the latest sentence that keeps the overlap within overlap_tokens, and
always moves forward. A chunk's section path is the heading path where it starts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from clef_pipelines.chunking.tokens import TokenCounter
from clef_pipelines.chunking.units import Unit, sentence_units, word_units
from clef_pipelines.config import ChunkingConfig
from clef_pipelines.parsing.models import Block

Draft = tuple[list[Unit], int]
_LINE = re.compile(r"[^\n]*\S[^\n]*")


def _units(blocks: Sequence[Block], cfg: ChunkingConfig, counter: TokenCounter) -> list[Unit]:
    prose = [i for i, b in enumerate(blocks) if b.kind not in ("heading", "table", "code")]
    by_block = sentence_units(blocks, prose, cfg.max_tokens, counter)
    # Lines of tables and code, counted in one more batch.
    lines = [
        (i, m.start(), m.end())
        for i, b in enumerate(blocks)
        if b.kind in ("table", "code")
        for m in _LINE.finditer(b.text)
    ]
    counts = counter.count_batch([blocks[i].text[s:e] for i, s, e in lines])
    for (i, s, e), t in zip(lines, counts, strict=True):
        text = blocks[i].text
        if t > cfg.max_tokens:
            by_block.setdefault(i, []).extend(word_units(text, s, e, i, cfg.max_tokens, counter))
        else:
            by_block.setdefault(i, []).append(Unit(text[s:e], t, i, s, e, False))
    return [u for i in sorted(by_block) for u in by_block[i]]


def fixed_drafts(
    blocks: Sequence[Block], cfg: ChunkingConfig, counter: TokenCounter
) -> list[Draft]:
    units = _units(blocks, cfg, counter)
    drafts: list[Draft] = []
    n = len(units)
    start = 0
    while start < n:
        end = start
        total = 0
        while end < n and (end == start or total + units[end].tokens <= cfg.target_tokens):
            total += units[end].tokens
            end += 1
        drafts.append((units[start:end], total))
        if end >= n:
            break
        # Step back from the end while the overlap stays within overlap_tokens.
        nxt = end
        overlap = 0
        while nxt - 1 > start and overlap + units[nxt - 1].tokens <= cfg.overlap_tokens:
            nxt -= 1
            overlap += units[nxt].tokens
        start = nxt
    return drafts
