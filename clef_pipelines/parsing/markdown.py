"""Markdown (CommonMark + GFM tables) -> blocks, via markdown-it-py tokens.

Offsets come from each block token's `.map` (its source line range), so
`original[char_start:char_end]` is exactly the block's source lines, markers included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.token import Token

from clef_pipelines.parsing.builder import BlockBuilder
from clef_pipelines.parsing.lines import LineIndex
from clef_pipelines.parsing.models import Block, BlockKind

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n.*?\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)


# markdown-it stops descending past this many nested containers and drops what lies deeper;
# `_recover_deep_lines` flattens that content back in. 100 levels keep the parser's recursion
# far from Python's limit.
MAX_NESTING = 100
# Container markers at the start of a line: quote '>', bullets, ordered list numbers.
_MARKERS = re.compile(r"^(?:[ \t]*(?:>|[-*+](?=[ \t]|$)|\d{1,9}[.)](?=[ \t]|$)))+[ \t]*")
_LEAVES = frozenset(
    {"paragraph_open", "heading_open", "fence", "code_block", "html_block", "hr", "table_open"}
)


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"maxNesting": MAX_NESTING}).enable("table")


@dataclass
class _Item:
    """An open list item: its own paragraphs (nested lists become their own items)."""

    first_line: int
    texts: list[str] = field(default_factory=list)
    last_line: int = -1
    emitted: bool = False


def _blank_front_matter(text: str) -> str:
    # YAML front matter is metadata, not content; blank it out line for line so that
    # token line numbers still match the original text.
    m = _FRONT_MATTER.match(text)
    if not m:
        return text
    blanked = re.sub(r"[^\r\n]", "", m.group(0))
    return blanked + text[m.end() :]


def _table_text(tokens: list[Token], i: int) -> tuple[str, int]:
    """Pipe-table text of the table starting at tokens[i]; returns (text, index after it)."""
    rows: list[list[str]] = []
    header_rows = 0
    in_head = False
    while i < len(tokens) and tokens[i].type != "table_close":
        t = tokens[i]
        if t.type == "thead_open":
            in_head = True
        elif t.type == "thead_close":
            in_head = False
        elif t.type == "tr_open":
            rows.append([])
            if in_head:
                header_rows += 1
        elif t.type == "inline" and rows:
            rows[-1].append(t.content.strip())
        i += 1
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    if header_rows and rows:
        lines.insert(header_rows, "| " + " | ".join("---" for _ in rows[0]) + " |")
    return "\n".join(lines), i + 1


def _recover_deep_lines(tokens: list[Token], idx: LineIndex, blocks: list[Block]) -> list[Block]:
    """Lines that markdown-it left out because they were nested too deep, flattened into
    blocks of their own (markers stripped) at their place in the document."""
    covered = bytearray(len(idx))
    for t in tokens:
        if t.type in _LEAVES and t.map:
            covered[t.map[0] : t.map[1]] = b"\x01" * (t.map[1] - t.map[0])
    extra: list[Block] = []
    for line_no, line in enumerate(idx.lines):
        if covered[line_no] or not line.strip():
            continue
        marker = _MARKERS.match(line)
        cut = marker.end() if marker else 0
        text = line[cut:].strip()
        if not text:
            continue
        kind: BlockKind = "paragraph"
        if marker:
            kind = "quote" if marker.group(0).lstrip().startswith(">") else "list_item"
        start = idx.starts[line_no] + cut + (len(line[cut:]) - len(line[cut:].lstrip()))
        extra.append(Block(kind, text, [], 0, start, start + len(text), verbatim=True))
    if not extra:
        return blocks
    merged = sorted([*blocks, *extra], key=lambda b: b.char_start)  # stable: ties keep order
    parsed = {id(b) for b in blocks}
    path: list[str] = []
    for order, block in enumerate(merged):
        block.order = order
        if id(block) in parsed:
            path = block.heading_path
        else:
            block.heading_path = list(path)
    return merged


def parse_markdown(original: str) -> list[Block]:
    tokens = _parser().parse(_blank_front_matter(original))
    idx = LineIndex(original)
    out = BlockBuilder(original)
    items: list[_Item] = []

    def emit_item(item: _Item) -> None:
        if item.emitted or not item.texts:
            item.emitted = True
            return
        item.emitted = True
        s, e = idx.span(item.first_line, item.last_line)
        out.add("list_item", "\n".join(item.texts), s, e)

    i = 0
    n = len(tokens)
    while i < n:
        t = tokens[i]
        typ = t.type
        if typ == "heading_open":
            inline = tokens[i + 1]
            s, e = idx.span(*t.map) if t.map else (-1, -1)
            out.heading(inline.content, int(t.tag[1]), s, e)
            i += 3
            continue
        if typ == "blockquote_open":
            # A quote stays one block, whatever it holds.
            depth, j, parts = 1, i + 1, []
            while j < n and depth:
                tj = tokens[j]
                if tj.type == "blockquote_open":
                    depth += 1
                elif tj.type == "blockquote_close":
                    depth -= 1
                elif tj.type == "inline" or tj.type in ("fence", "code_block"):
                    parts.append(tj.content.strip("\n"))
                j += 1
            if items:
                emit_item(items[-1])
            s, e = idx.span(*t.map) if t.map else (-1, -1)
            out.add("quote", "\n".join(parts), s, e)
            i = j
            continue
        if typ == "table_open":
            text, j = _table_text(tokens, i)
            if items:
                emit_item(items[-1])
            s, e = idx.span(*t.map) if t.map else (-1, -1)
            out.add("table", text, s, e)
            i = j
            continue
        if typ in ("fence", "code_block"):
            if items:
                emit_item(items[-1])
            s, e = idx.span(*t.map) if t.map else (-1, -1)
            out.add("code", t.content, s, e)
        elif typ == "list_item_open":
            if items:
                emit_item(items[-1])
            items.append(_Item(first_line=t.map[0] if t.map else 0))
        elif typ == "list_item_close":
            emit_item(items.pop())
        elif typ in ("bullet_list_open", "ordered_list_open") and items:
            emit_item(items[-1])
        elif typ == "paragraph_open":
            inline = tokens[i + 1]
            if items and not items[-1].emitted:
                items[-1].texts.append(inline.content)
                items[-1].last_line = t.map[1] if t.map else items[-1].first_line + 1
            elif not items:
                s, e = idx.span(*t.map) if t.map else (-1, -1)
                out.add("paragraph", inline.content, s, e)
            else:
                # A paragraph after a nested list, inside the same item: its own block.
                s, e = idx.span(*t.map) if t.map else (-1, -1)
                out.add("list_item", inline.content, s, e)
            i += 3
            continue
        i += 1
    if max((t.level for t in tokens), default=0) >= MAX_NESTING - 2:
        return _recover_deep_lines(tokens, idx, out.blocks)
    return out.blocks
