"""Units: the pieces chunkers pack into chunks (whole blocks, sentences, lines or words).

Each unit keeps where it came from (block index, span inside the block's text) so that
consecutive units of one block are joined by slicing the block text (exact spacing) and the
chunk's source offsets can be computed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice

from clef_pipelines.chunking.sentences import sentence_spans
from clef_pipelines.chunking.tokens import TokenCounter
from clef_pipelines.parsing.models import Block

_BULLET = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)]|#\.|\(\w+\))\s")
_WORD = re.compile(r"\S+")


@dataclass(slots=True)
class Unit:
    text: str
    tokens: int
    block: int  # index into the chunker's block list
    start: int  # span inside blocks[block].text (whole-block units: 0, len)
    end: int
    whole: bool  # the unit is the whole (rendered) block


def render(block: Block) -> str:
    """A block's text as it appears in a chunk: list items get a bullet, code its fences."""
    if block.kind == "list_item" and not _BULLET.match(block.text):
        return "- " + block.text
    if block.kind == "code":
        return "```\n" + block.text + "\n```"
    return block.text


def source_span(block: Block, start: int, end: int, whole: bool) -> tuple[int, int]:
    """Offsets in the original document of a span of the block's text."""
    if block.char_start < 0:
        return -1, -1
    if whole or not block.verbatim:
        return block.char_start, block.char_end
    return block.char_start + start, block.char_start + end


def pack_spans(
    spans: Sequence[tuple[int, int]], counts: Sequence[int], limit: int
) -> list[tuple[int, int, int]]:
    """Greedy packing of consecutive spans up to `limit` tokens: (start, end, tokens)."""
    out: list[tuple[int, int, int]] = []
    cur_s = cur_e = -1
    cur_t = 0
    for (s, e), t in zip(spans, counts, strict=True):
        if cur_s >= 0 and cur_t + t > limit:
            out.append((cur_s, cur_e, cur_t))
            cur_s = -1
            cur_t = 0
        if cur_s < 0:
            cur_s = s
        cur_e = e
        cur_t += t
    if cur_s >= 0:
        out.append((cur_s, cur_e, cur_t))
    return out


#: Words counted per batch by `word_units`: a megabyte-long line holds a million words, and
#: their spans and counts are packed as they come rather than held all at once.
_WORD_WINDOW = 4096


def word_units(
    text: str, start: int, end: int, block: int, limit: int, counter: TokenCounter
) -> list[Unit]:
    """Split text[start:end] at blank space into units of at most `limit` tokens (greedy, as
    `pack_spans`), counting a window of words at a time so memory follows the output."""
    units: list[Unit] = []
    words = _WORD.finditer(text, start, end)
    cur_s = cur_e = -1
    cur_t = 0
    while window := [(m.start(), m.end()) for m in islice(words, _WORD_WINDOW)]:
        counts = counter.count_batch([text[s:e] for s, e in window])
        for (s, e), t in zip(window, counts, strict=True):
            if cur_s >= 0 and cur_t + t > limit:
                units.append(Unit(text[cur_s:cur_e], cur_t, block, cur_s, cur_e, False))
                cur_s, cur_t = -1, 0
            if cur_s < 0:
                cur_s = s
            cur_e = e
            cur_t += t
    if cur_s >= 0:
        units.append(Unit(text[cur_s:cur_e], cur_t, block, cur_s, cur_e, False))
    return units


def sentence_units(
    blocks: Sequence[Block], indexes: Sequence[int], max_tokens: int, counter: TokenCounter
) -> dict[int, list[Unit]]:
    """Sentence units of several blocks, counted in one batch; long sentences split by words."""
    spans_of = {i: sentence_spans(blocks[i].text) for i in indexes}
    flat = [(i, s, e) for i in indexes for s, e in spans_of[i]]
    counts = counter.count_batch([blocks[i].text[s:e] for i, s, e in flat])
    out: dict[int, list[Unit]] = {i: [] for i in indexes}
    for (i, s, e), t in zip(flat, counts, strict=True):
        text = blocks[i].text
        if t > max_tokens:
            out[i].extend(word_units(text, s, e, i, max_tokens, counter))
        else:
            out[i].append(Unit(text[s:e], t, i, s, e, False))
    return out


def line_units(block: Block, index: int, limit: int, counter: TokenCounter) -> list[Unit]:
    """A table or code block too big for one chunk, cut between rows / lines.

    Tables repeat their header row (and separator) at the top of every piece.
    """
    text = block.text
    spans = [(m.start(), m.end()) for m in re.finditer(r"[^\n]+", text)]
    header = ""
    header_tokens = 0
    if (
        block.kind == "table"
        and len(spans) > 2
        and set(text[spans[1][0] : spans[1][1]]) <= set("|-: ")
    ):
        header = text[spans[0][0] : spans[1][1]] + "\n"
        header_tokens = counter.count(header)
        spans = spans[2:]
    counts = counter.count_batch([text[s:e] for s, e in spans])
    budget = max(limit - header_tokens, 1)
    units: list[Unit] = []
    for (s, e), t in zip(spans, counts, strict=True):
        if t > budget:  # one enormous line
            units.extend(word_units(text, s, e, index, budget, counter))
        else:
            units.append(Unit(text[s:e], t, index, s, e, False))
    fence_tokens = counter.count("```\n\n```") if block.kind == "code" else 0
    packed: list[Unit] = []
    for s, e, t in pack_spans([(u.start, u.end) for u in units], [u.tokens for u in units], budget):
        piece = header + text[s:e]
        if block.kind == "code":
            piece = "```\n" + piece + "\n```"
        packed.append(Unit(piece, header_tokens + t + fence_tokens, index, s, e, False))
    return packed


def join_units(blocks: Sequence[Block], units: Sequence[Unit]) -> str:
    """Chunk text: units of one block joined by slicing it; blocks by a blank line (list
    items by a newline)."""
    parts: list[str] = []
    i = 0
    while i < len(units):
        u = units[i]
        j = i + 1
        if not u.whole:
            # Consecutive sentence units of the same block: slice the block's text.
            while (
                j < len(units)
                and not units[j].whole
                and units[j].block == u.block
                and blocks[u.block].kind not in ("table", "code")
            ):
                j += 1
            text = blocks[u.block].text[u.start : units[j - 1].end] if j - i > 1 else u.text
        else:
            text = u.text
        if parts:
            prev_block = blocks[units[i - 1].block]
            sep = (
                "\n"
                if prev_block.kind == "list_item" and blocks[u.block].kind == "list_item"
                else "\n\n"
            )
            parts.append(sep)
        parts.append(text)
        i = j
    return "".join(parts)


def chunk_span(blocks: Sequence[Block], units: Sequence[Unit]) -> tuple[int, int]:
    starts: list[int] = []
    ends: list[int] = []
    for u in units:
        s, e = source_span(blocks[u.block], u.start, u.end, u.whole)
        if s >= 0:
            starts.append(s)
            ends.append(e)
    if not starts:
        return -1, -1
    return min(starts), max(ends)
